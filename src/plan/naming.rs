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
}

/// Repositories [`Naming`] remembers at most.
const NAMING_CACHE: usize = 4096;

impl Naming {
    pub fn new(map: RepoMap) -> Self {
        Naming {
            map,
            repos: FastHashMap::default(),
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
    pub fn tag(&self, catalog: &Catalog, repo: Sym, reference: Sym) -> Tag {
        let r = catalog.names.resolve(reference);
        match &self.map {
            RepoMap::Single { .. } => {
                let key = format!("{}:{r}", catalog.names.resolve(repo));
                hashed_tag(&key)
            }
            RepoMap::Keep { .. } => r.parse().unwrap_or_else(|_| hashed_tag(&r)),
        }
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
