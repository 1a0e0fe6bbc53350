//! Registry names for trace names: a trace repository becomes a registry repository (kept,
//! prefixed, or folded into one), a trace reference a tag; names the registry would refuse
//! become stable hashed ones.

use super::catalog::Catalog;
use super::RepoMap;
use crate::fast_hash::{fnv1a, FastHashMap};
use crate::oci::{Repository, Tag};
use crate::trace::Sym;

/// Registry names for trace names.
#[derive(Debug)]
pub struct Naming {
    map: RepoMap,
    /// Recently named repositories; cleared when full, so it stays small however many
    /// repositories the trace has.
    repos: FastHashMap<Sym, Repository>,
    /// Recently made tags, by trace repository and reference, kept as `repos` is: a tag is
    /// made for every manifest operation planned, and made anew it is a string formatted,
    /// checked and allocated on the planner's thread and freed on the runtime's.
    tags: FastHashMap<(Sym, Sym), Tag>,
}

/// Repositories [`Naming`] remembers at most.
const NAMING_CACHE: usize = 4096;

impl Naming {
    pub fn new(map: RepoMap) -> Self {
        Naming {
            map,
            repos: FastHashMap::default(),
            tags: FastHashMap::default(),
        }
    }

    /// The registry repository for a trace repository.
    pub fn repo(&mut self, catalog: &Catalog, sym: Sym) -> Repository {
        if let Some(r) = self.repos.get(&sym) {
            return r.clone();
        }
        let name = catalog.names.resolve(sym);
        let repo = match &self.map {
            RepoMap::Single { repository } => repository.clone(),
            RepoMap::Keep { prefix } => {
                let base: Repository = name
                    .to_ascii_lowercase()
                    .parse()
                    .unwrap_or_else(|_| hashed_repo(&name));
                match prefix {
                    Some(p) => base.prefixed(p).unwrap_or_else(|_| hashed_repo(&name)),
                    None => base,
                }
            }
        };
        if self.repos.len() >= NAMING_CACHE {
            self.repos.clear();
        }
        self.repos.insert(sym, repo.clone());
        repo
    }

    /// The registry tag for a trace reference in a trace repository.
    pub fn tag(&mut self, catalog: &Catalog, repo: Sym, reference: Sym) -> Tag {
        if let Some(t) = self.tags.get(&(repo, reference)) {
            return t.clone();
        }
        let r = catalog.names.resolve(reference);
        let tag = match &self.map {
            RepoMap::Single { .. } => {
                let key = format!("{}:{r}", catalog.names.resolve(repo));
                hashed_tag(&key)
            }
            RepoMap::Keep { .. } => r.parse().unwrap_or_else(|_| hashed_tag(&r)),
        };
        if self.tags.len() >= NAMING_CACHE {
            self.tags.clear();
        }
        self.tags.insert((repo, reference), tag.clone());
        tag
    }
}

fn hashed_repo(name: &str) -> Repository {
    format!("r{:016x}", fnv1a(name.as_bytes()))
        .parse()
        .unwrap_or_else(|_| unreachable!("hex names are valid repositories"))
}

fn hashed_tag(name: &str) -> Tag {
    format!("t{:016x}", fnv1a(name.as_bytes()))
        .parse()
        .unwrap_or_else(|_| unreachable!("hex names are valid tags"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Interner;

    #[test]
    fn a_tag_is_made_once_per_name_and_the_cache_stays_bounded() {
        let mut names = Interner::default();
        let repo = names.intern("library/app");
        let refs: Vec<Sym> = (0..=NAMING_CACHE)
            .map(|i| names.intern(&format!("v{i}")))
            .collect();
        let mut catalog = Catalog::default();
        catalog.names = names;
        for map in [
            RepoMap::Keep { prefix: None },
            RepoMap::Single {
                repository: "all/in/one".parse().unwrap(),
            },
        ] {
            let mut naming = Naming::new(map);
            let first = naming.tag(&catalog, repo, refs[0]);
            let again = naming.tag(&catalog, repo, refs[0]);
            // The same tag, not one made again: the same text in the same place.
            assert_eq!(first, again);
            assert!(std::ptr::eq(first.as_str(), again.as_str()));
            let other = naming.tag(&catalog, repo, refs[1]);
            assert_ne!(first, other);
            for &r in &refs {
                naming.tag(&catalog, repo, r);
                assert!(naming.tags.len() <= NAMING_CACHE);
            }
            // Made anew after the cache was cleared, still the same name.
            assert_eq!(naming.tag(&catalog, repo, refs[0]), first);
        }
    }
}
