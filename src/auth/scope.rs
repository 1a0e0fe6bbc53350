//! Token scopes (`type:name:actions`), merged per resource.
//!
//! A scope string splits at its *first* colon for the type and its *last* colon for the
//! actions, because repository names may contain `host:port`. Several scopes may share one
//! string, separated by spaces.

use std::collections::{BTreeMap, BTreeSet};

use super::AccessScope;

/// A set of scopes, one entry per (type, name) with the union of their actions. Ordered,
/// so equal sets render to equal strings (the token cache key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ScopeSet(BTreeMap<(String, String), BTreeSet<String>>);

impl ScopeSet {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn add(
        &mut self,
        kind: &str,
        name: &str,
        actions: impl IntoIterator<Item = impl Into<String>>,
    ) {
        self.0
            .entry((kind.to_owned(), name.to_owned()))
            .or_default()
            .extend(actions.into_iter().map(Into::into));
    }

    /// Adds every scope in a space-separated scope string; malformed ones are ignored.
    pub fn add_str(&mut self, scopes: &str) {
        for s in scopes.split_whitespace() {
            if let Some((kind, name, actions)) = parse_scope(s) {
                self.add(&kind, &name, actions);
            }
        }
    }

    pub fn merge(&mut self, other: &ScopeSet) {
        for ((k, n), a) in &other.0 {
            self.add(k, n, a.iter().cloned());
        }
    }

    /// Whether every action of `other` is in `self`.
    pub fn contains(&self, other: &ScopeSet) -> bool {
        other.0.iter().all(|(key, actions)| {
            self.0.get(key).is_some_and(|mine| {
                actions
                    .iter()
                    .all(|a| mine.contains(a) || mine.contains("*"))
            })
        })
    }

    /// One `type:name:a,b` string per resource, for `scope=` parameters.
    pub fn to_strings(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|((k, n), a)| {
                format!(
                    "{k}:{n}:{}",
                    a.iter().cloned().collect::<Vec<_>>().join(",")
                )
            })
            .collect()
    }

    /// All scopes space-joined: the OAuth2 form and the cache key.
    pub fn key(&self) -> String {
        self.to_strings().join(" ")
    }

    /// The scopes an operation needs: `pull` (plus `push` for writes, `delete` alone for
    /// deletes) on its repository, `pull` on a mount's source.
    pub fn for_access(access: &AccessScope) -> ScopeSet {
        let mut set = ScopeSet::default();
        if let Some(repo) = &access.repository {
            let actions: &[&str] = match (access.push, access.delete) {
                (_, true) => &["delete"],
                (true, false) => &["pull", "push"],
                (false, false) => &["pull"],
            };
            set.add("repository", repo.as_str(), actions.iter().copied());
        }
        if let Some(from) = &access.mount_from {
            set.add("repository", from.as_str(), ["pull"]);
        }
        set
    }
}

/// Splits `type:name:actions` (first colon, last colon).
pub fn parse_scope(s: &str) -> Option<(String, String, Vec<String>)> {
    let (kind, rest) = s.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    if kind.is_empty() || name.is_empty() {
        return None;
    }
    let actions = actions
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    Some((kind.to_owned(), name.to_owned(), actions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Found by the compatibility suite: distribution v3 with token auth refused DELETE
    /// with a `pull,push` token; token servers grant `delete` as an action of its own.
    #[test]
    fn each_kind_of_access_asks_for_its_actions() {
        let repo: crate::oci::Repository = "x/y".parse().unwrap();
        let from: crate::oci::Repository = "a/b".parse().unwrap();
        let key = |access: &AccessScope| ScopeSet::for_access(access).key();
        assert_eq!(key(&AccessScope::pull(&repo)), "repository:x/y:pull");
        assert_eq!(key(&AccessScope::push(&repo)), "repository:x/y:pull,push");
        assert_eq!(key(&AccessScope::delete(&repo)), "repository:x/y:delete");
        assert_eq!(
            key(&AccessScope::mount(&repo, &from)),
            "repository:a/b:pull repository:x/y:pull,push"
        );
        assert_eq!(key(&AccessScope::registry()), "");
    }

    #[test]
    fn split_at_first_and_last_colon() {
        let (k, n, a) = parse_scope("repository:registry.local:5000/x/y:pull,push").unwrap();
        assert_eq!(
            (k.as_str(), n.as_str()),
            ("repository", "registry.local:5000/x/y")
        );
        assert_eq!(a, ["pull", "push"]);
        assert_eq!(parse_scope("registry:catalog:*").unwrap().2, ["*"]);
        assert!(parse_scope("nocolon").is_none());
        assert!(parse_scope("repository:x").is_none());
    }

    #[test]
    fn merging_and_rendering() {
        let mut s = ScopeSet::default();
        s.add_str("repository:a:pull repository:b:push");
        s.add_str("repository:a:push,pull");
        assert_eq!(s.key(), "repository:a:pull,push repository:b:push");
        let access = AccessScope::mount(&"dst/x".parse().unwrap(), &"src/x".parse().unwrap());
        assert_eq!(
            ScopeSet::for_access(&access).to_strings(),
            ["repository:dst/x:pull,push", "repository:src/x:pull"]
        );
        let mut pull_only = ScopeSet::default();
        pull_only.add_str("repository:dst/x:pull");
        assert!(ScopeSet::for_access(&access).contains(&pull_only));
        assert!(!pull_only.contains(&ScopeSet::for_access(&access)));
        assert!(ScopeSet::for_access(&AccessScope::registry()).is_empty());
    }

    proptest! {
        #[test]
        fn rendered_scopes_parse_back(name in "[a-z0-9]{1,8}(:[0-9]{1,5})?(/[a-z0-9]{1,8}){0,2}") {
            let mut s = ScopeSet::default();
            s.add("repository", &name, ["pull", "push"]);
            let mut back = ScopeSet::default();
            back.add_str(&s.key());
            prop_assert_eq!(back, s);
        }

        #[test]
        fn never_panics(text in ".{0,60}") {
            let mut s = ScopeSet::default();
            s.add_str(&text);
            let _ = parse_scope(&text);
        }
    }
}
