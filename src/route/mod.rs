//! Routing: which of several registry endpoints carries an operation.
//!
//! A distributed registry without a load balancer in front (every node speaks the whole
//! API, clients talk to nodes directly) is driven by giving `--registry` several
//! endpoints. [`Router`] picks one per operation by the `--route` rule:
//!
//! - `round-robin`: operation *k* of the plan goes to endpoint *k mod N*;
//! - `random`: a pseudo-random endpoint drawn from the seed and the operation's position
//!   (the same plan and seed route the same way on every run);
//! - `client`: the trace client's position on the ring (a client sticks to one node);
//! - `digest`: consistent hashing of the object — a blob's digest, a manifest's
//!   `repo:reference`, a tag list's repository — on a [`Ring`] with virtual nodes. Reads go
//!   to one of the first `--replicas R` distinct ring successors (chosen from the seed and
//!   the operation's position), writes to the first.
//!
//! Invariants: the ring is a pure function of the endpoints' URLs and the number of
//! virtual nodes, and keys are hashed with SHA-256 (never Rust's randomly keyed SipHash),
//! so every host, every run and the prewarm agree on where each object lives. Adding a node
//! moves only the keys the new node takes over (about 1/(N+1) of them); removing one moves
//! only that node's keys. A route never names an endpoint outside `0..N`.
//!
//! Failover order: when the chosen endpoint is down, the operation goes to the next
//! candidate that is up — the next distinct ring successor for `digest` and `client`, the
//! next endpoint in the list for `round-robin` and `random`.

pub mod health;

use sha2::{Digest as _, Sha256};

use crate::fast_hash::{splitmix64, GOLDEN_GAMMA};

/// How operations are spread over endpoints (`--route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteKind {
    /// Operation k goes to endpoint k mod N.
    #[default]
    RoundRobin,
    /// A pseudo-random endpoint per operation, drawn from the seed.
    Random,
    /// By trace client: a client sticks to one node (consistent hashing).
    Client,
    /// By object: consistent hashing of the blob digest or manifest `repo:reference`.
    Digest,
}

/// Virtual nodes per endpoint on the ring. Each endpoint's share of the keys deviates from
/// 1/N by about 1/√V (1.6% here), so even three nodes split a uniform load evenly.
pub const DEFAULT_VNODES: usize = 4096;

/// The stable 64-bit hash of a key: the first eight bytes of its SHA-256, big-endian.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let d = Sha256::digest(bytes);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

/// A cheap stable mix of two numbers (splitmix64's finalizer), for per-operation choices.
fn mix(a: u64, b: u64) -> u64 {
    splitmix64(a ^ b.wrapping_mul(GOLDEN_GAMMA))
}

/// A consistent-hash ring: `vnodes` points per node, each at the stable hash of
/// `"<node name>#<i>"`; a key belongs to the first point at or after its hash (wrapping).
#[derive(Debug, Clone)]
pub struct Ring {
    /// (position, node index), sorted by position.
    points: Vec<(u64, u16)>,
    nodes: usize,
}

impl Ring {
    /// A ring over `names` (node *i* is `names[i]`). Positions depend only on the names,
    /// so a node keeps its points when others are added or removed.
    pub fn new<S: AsRef<str>>(names: &[S], vnodes: usize) -> Ring {
        let vnodes = vnodes.max(1);
        let mut points = Vec::with_capacity(names.len() * vnodes);
        for (node, name) in names.iter().enumerate() {
            let node = u16::try_from(node).unwrap_or(u16::MAX);
            for i in 0..vnodes {
                let point = format!("{}#{i}", name.as_ref());
                points.push((stable_hash(point.as_bytes()), node));
            }
        }
        // Equal positions (astronomically rare) are ordered by node so the ring is still a
        // function of the names alone.
        points.sort_unstable();
        Ring {
            points,
            nodes: names.len(),
        }
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    fn start(&self, key: u64) -> usize {
        let i = self.points.partition_point(|(p, _)| *p < key);
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    /// The node that owns `key`.
    pub fn owner(&self, key: u64) -> usize {
        self.points
            .get(self.start(key))
            .map_or(0, |(_, n)| usize::from(*n))
    }

    /// The first `count` distinct nodes clockwise from `key` (fewer if the ring has fewer).
    pub fn successors(&self, key: u64, count: usize) -> Vec<usize> {
        let want = count.min(self.nodes);
        let mut out = Vec::with_capacity(want);
        if self.points.is_empty() {
            return out;
        }
        let start = self.start(key);
        for k in 0..self.points.len() {
            if out.len() >= want {
                break;
            }
            let node = usize::from(self.points[(start + k) % self.points.len()].1);
            if !out.contains(&node) {
                out.push(node);
            }
        }
        out
    }
}

/// What an operation touches, for routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object<'a> {
    /// A blob, by digest (`sha256:…`).
    Blob(&'a str),
    /// A manifest, by repository and reference (tag or digest).
    Manifest { repo: &'a str, reference: &'a str },
    /// A repository as a whole (tag list).
    Repository(&'a str),
    /// Nothing in particular (`GET /v2/`).
    None,
}

impl Object<'_> {
    /// The ring key, or `None` for [`Object::None`].
    pub fn key(&self) -> Option<u64> {
        match self {
            Object::Blob(d) => Some(stable_hash(d.as_bytes())),
            Object::Manifest { repo, reference } => {
                Some(stable_hash(format!("{repo}:{reference}").as_bytes()))
            }
            Object::Repository(r) => Some(stable_hash(r.as_bytes())),
            Object::None => None,
        }
    }
}

/// One operation as the router sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Position of the operation in the plan.
    pub seq: u64,
    /// Stable hash of the trace client (`client` routing).
    pub client: u64,
    pub object: Object<'a>,
    /// A write (upload, manifest PUT, delete) goes to the first ring successor.
    pub write: bool,
}

/// Routing settings, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RouteOptions {
    pub kind: RouteKind,
    /// Ring successors a read may go to (`digest`), at least 1.
    pub replicas: usize,
    pub vnodes: usize,
    pub seed: u64,
}

impl Default for RouteOptions {
    fn default() -> Self {
        RouteOptions {
            kind: RouteKind::RoundRobin,
            replicas: 1,
            vnodes: DEFAULT_VNODES,
            seed: 0,
        }
    }
}

/// Picks an endpoint per operation. Pure: no clock, no state.
#[derive(Debug, Clone)]
pub struct Router {
    options: RouteOptions,
    ring: Ring,
}

impl Router {
    /// A router over endpoints named `names` (their URLs).
    pub fn new<S: AsRef<str>>(names: &[S], options: RouteOptions) -> Router {
        Router {
            ring: Ring::new(names, options.vnodes),
            options: RouteOptions {
                replicas: options.replicas.clamp(1, names.len().max(1)),
                ..options
            },
        }
    }

    pub fn endpoints(&self) -> usize {
        self.ring.nodes()
    }

    pub fn options(&self) -> RouteOptions {
        self.options
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The endpoints in order of preference: the first is where the operation goes while
    /// every endpoint is up; the rest are the failover order. Contains every endpoint once.
    pub fn candidates(&self, req: &Request<'_>) -> Vec<usize> {
        let n = self.ring.nodes();
        if n <= 1 {
            return (0..n).collect();
        }
        let by_list = |first: usize| (0..n).map(|i| (first + i) % n).collect::<Vec<_>>();
        match self.options.kind {
            RouteKind::RoundRobin => by_list((req.seq % n as u64) as usize),
            RouteKind::Random => by_list((mix(self.options.seed, req.seq) % n as u64) as usize),
            // Mixed first: client hashes of similar names need not be spread over 64 bits.
            RouteKind::Client => self.ring.successors(mix(req.client, 0), n),
            RouteKind::Digest => match req.object.key() {
                None => by_list((req.seq % n as u64) as usize),
                Some(key) => {
                    let mut order = self.ring.successors(key, n);
                    let replicas = self.options.replicas.min(order.len());
                    if !req.write && replicas > 1 {
                        let pick =
                            (mix(self.options.seed ^ key, req.seq) % replicas as u64) as usize;
                        order[..replicas].rotate_left(pick);
                    }
                    order
                }
            },
        }
    }

    /// Where the prewarm puts an object so that every read of it finds it: its `--replicas`
    /// ring successors with `digest` routing, every endpoint otherwise (any endpoint may
    /// serve the read).
    pub fn placement(&self, object: Object<'_>) -> Vec<usize> {
        let n = self.ring.nodes();
        match (self.options.kind, object.key()) {
            (RouteKind::Digest, Some(key)) => self.ring.successors(key, self.options.replicas),
            _ => (0..n).collect(),
        }
    }

    /// Where the prewarm puts every blob when that does not depend on the blob's digest
    /// (every endpoint; the one with a single endpoint), so it can upload a blob before it
    /// knows the digest; `None` with `digest` routing over several endpoints.
    pub fn placement_of_any_blob(&self) -> Option<Vec<usize>> {
        let n = self.ring.nodes();
        match self.options.kind {
            RouteKind::Digest if n > 1 => None,
            RouteKind::Digest => Some(vec![0]),
            _ => Some((0..n).collect()),
        }
    }

    /// How many endpoints [`Router::placement`] names for an object with a key.
    pub fn copies(&self) -> usize {
        match self.options.kind {
            RouteKind::Digest => self.options.replicas.min(self.ring.nodes()),
            _ => self.ring.nodes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn names(n: usize, salt: u32) -> Vec<String> {
        (0..n)
            .map(|i| format!("http://10.{salt}.0.{i}:5000"))
            .collect()
    }

    fn keys(count: u64, salt: u64) -> Vec<u64> {
        (0..count)
            .map(|i| stable_hash(format!("sha256:{salt}-{i}").as_bytes()))
            .collect()
    }

    #[test]
    fn the_hash_is_stable_across_hosts_and_runs() {
        // Fixed values: a change here moves every object of every deployment.
        assert_eq!(stable_hash(b""), 0xe3b0_c442_98fc_1c14);
        assert_eq!(stable_hash(b"abc"), 0xba78_16bf_8f01_cfea);
    }

    #[test]
    fn the_ring_depends_only_on_the_names() {
        let a = Ring::new(&names(3, 1), 64);
        let b = Ring::new(&names(3, 1), 64);
        for k in keys(1000, 0) {
            assert_eq!(a.owner(k), b.owner(k));
        }
    }

    #[test]
    fn successors_are_distinct_and_start_with_the_owner() {
        let ring = Ring::new(&names(5, 2), 128);
        for k in keys(500, 1) {
            let s = ring.successors(k, 5);
            assert_eq!(s.len(), 5);
            assert_eq!(s.iter().collect::<BTreeSet<_>>().len(), 5);
            assert_eq!(s[0], ring.owner(k));
            assert_eq!(ring.successors(k, 2), s[..2]);
        }
    }

    #[test]
    fn digest_routing_sends_writes_to_the_owner_and_reads_to_the_replicas() {
        let names = names(4, 3);
        let router = Router::new(
            &names,
            RouteOptions {
                kind: RouteKind::Digest,
                replicas: 2,
                vnodes: 256,
                seed: 7,
            },
        );
        let mut read_targets = BTreeSet::new();
        let digest = "sha256:0123";
        let key = Object::Blob(digest).key().unwrap();
        let owners = router.ring().successors(key, 2);
        for seq in 0..200 {
            let write = router.candidates(&Request {
                seq,
                client: 0,
                object: Object::Blob(digest),
                write: true,
            });
            assert_eq!(write[0], owners[0]);
            let read = router.candidates(&Request {
                seq,
                client: 0,
                object: Object::Blob(digest),
                write: false,
            });
            assert!(owners.contains(&read[0]));
            assert_eq!(read.iter().collect::<BTreeSet<_>>().len(), 4);
            read_targets.insert(read[0]);
        }
        assert_eq!(read_targets.len(), 2, "reads use both replicas");
        assert_eq!(router.placement(Object::Blob(digest)), owners);
    }

    #[test]
    fn round_robin_and_random_cover_every_endpoint_evenly() {
        let names = names(3, 4);
        for kind in [RouteKind::RoundRobin, RouteKind::Random] {
            let router = Router::new(
                &names,
                RouteOptions {
                    kind,
                    seed: 1,
                    ..RouteOptions::default()
                },
            );
            let mut counts = [0u32; 3];
            for seq in 0..3000 {
                let c = router.candidates(&Request {
                    seq,
                    client: 0,
                    object: Object::None,
                    write: false,
                });
                counts[c[0]] += 1;
            }
            // Random: binomial(3000, 1/3), sd ≈ 26; 150 is almost six sd.
            for c in counts {
                assert!((850..=1150).contains(&c), "{kind:?}: {counts:?}");
            }
            assert_eq!(
                router.placement(Object::Blob("sha256:00")),
                vec![0, 1, 2],
                "any endpoint may serve a read"
            );
        }
    }

    #[test]
    fn client_routing_keeps_a_client_on_one_node() {
        let router = Router::new(
            &names(3, 5),
            RouteOptions {
                kind: RouteKind::Client,
                ..RouteOptions::default()
            },
        );
        let client = stable_hash(b"10.0.0.1");
        let first = router.candidates(&Request {
            seq: 0,
            client,
            object: Object::None,
            write: false,
        })[0];
        for seq in 1..100 {
            let c = router.candidates(&Request {
                seq,
                client,
                object: Object::Blob("sha256:ab"),
                write: seq % 2 == 0,
            });
            assert_eq!(c[0], first);
        }
    }

    /// The default ring splits keys evenly among three endpoints named as on loopback, for
    /// any ports. A node's share is the sum of its V arcs and deviates from 1/3 by about
    /// 1/sqrt(V) relative (V = 4096: 1.6%), two nodes' by about 2.2%, and 30k keys add 1.2%
    /// to that: the 15% bound is over 5.9 standard deviations for each set of names.
    #[test]
    fn the_default_ring_splits_keys_evenly_whatever_the_ports() {
        for set in 0..8u32 {
            let names: Vec<String> = (0..3)
                .map(|i| format!("http://127.0.0.1:{}", 30_000 + set * 977 + i * 4_111))
                .collect();
            let ring = Ring::new(&names, DEFAULT_VNODES);
            let mut shares = [0u64; 3];
            for k in keys(30_000, u64::from(set)) {
                shares[ring.owner(k)] += 1;
            }
            let (min, max) = (*shares.iter().min().unwrap(), *shares.iter().max().unwrap());
            assert!(
                max as f64 <= min as f64 * 1.15,
                "{names:?}: shares differ by more than 15%: {shares:?}"
            );
        }
    }

    // Ring stability. With V virtual nodes a node's share deviates from 1/N by about
    // 1/sqrt(V) relatively (V = 256: 6%), and 4000 keys add about 1.5/sqrt(4000/N) more; the
    // bound of half the expected fraction is many standard deviations away.
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn adding_a_node_moves_about_one_in_n_plus_one_keys_all_to_it(
            n in 1usize..8,
            salt in 0u32..1000,
        ) {
            let before = names(n, salt);
            let mut after = before.clone();
            after.push(format!("http://10.{salt}.1.1:5000"));
            let old = Ring::new(&before, 256);
            let new = Ring::new(&after, 256);
            let keys = keys(4000, u64::from(salt));
            let mut moved = 0usize;
            for &k in &keys {
                let (a, b) = (old.owner(k), new.owner(k));
                if a != b {
                    prop_assert_eq!(b, n, "a key moved between old nodes");
                    moved += 1;
                }
            }
            let share = moved as f64 / keys.len() as f64;
            let expected = 1.0 / (n as f64 + 1.0);
            prop_assert!(
                (share - expected).abs() <= expected / 2.0,
                "moved {:.3}, expected about {:.3}", share, expected
            );
        }

        #[test]
        fn removing_a_node_moves_only_its_keys(
            n in 2usize..8,
            gone in 0usize..8,
            salt in 0u32..1000,
        ) {
            let gone = gone % n;
            let before = names(n, salt);
            let after: Vec<String> = before
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != gone)
                .map(|(_, s)| s.clone())
                .collect();
            let old = Ring::new(&before, 256);
            let new = Ring::new(&after, 256);
            for k in keys(2000, u64::from(salt)) {
                let a = old.owner(k);
                let b = new.owner(k);
                // Indices after `gone` shift down by one in the smaller list.
                let b_old = if b >= gone { b + 1 } else { b };
                if a != gone {
                    prop_assert_eq!(a, b_old, "a key of a remaining node moved");
                } else {
                    prop_assert_ne!(b_old, gone);
                    // It goes to its next ring successor.
                    prop_assert_eq!(old.successors(k, 2)[1], b_old);
                }
            }
        }

        #[test]
        fn every_route_names_a_live_endpoint(
            n in 1usize..10,
            replicas in 1usize..4,
            kind in prop_oneof![
                Just(RouteKind::RoundRobin),
                Just(RouteKind::Random),
                Just(RouteKind::Client),
                Just(RouteKind::Digest),
            ],
            seq in any::<u64>(),
            client in any::<u64>(),
            digest in "[0-9a-f]{8}",
            write in any::<bool>(),
            down in proptest::collection::vec(any::<bool>(), 10),
        ) {
            let router = Router::new(
                &names(n, 9),
                RouteOptions { kind, replicas, vnodes: 64, seed: 3 },
            );
            let digest = format!("sha256:{digest}");
            let c = router.candidates(&Request {
                seq,
                client,
                object: Object::Blob(&digest),
                write,
            });
            prop_assert_eq!(c.len(), n);
            prop_assert_eq!(c.iter().collect::<BTreeSet<_>>().len(), n);
            prop_assert!(c.iter().all(|&i| i < n));
            // The failover choice: the first candidate that is up, if any is.
            let live = c.iter().find(|&&i| !down[i]);
            prop_assert_eq!(live.is_some(), (0..n).any(|i| !down[i]));
            let placed = router.placement(Object::Blob(&digest));
            prop_assert!(!placed.is_empty() && placed.iter().all(|&i| i < n));
            if kind == RouteKind::Digest && write {
                prop_assert_eq!(c[0], placed[0]);
            }
            if kind == RouteKind::Digest {
                prop_assert!(placed.contains(&c[0]), "a read finds the object");
            }
        }
    }
}
