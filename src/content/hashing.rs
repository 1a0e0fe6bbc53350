//! Digests of generated content computed on several threads at once: the jobs spread by
//! size so the threads finish together, each block's bytes reported to a [`HashWatch`]
//! (a progress line) that can stop the hashing between blocks.

use super::{ContentSpec, Sums};

/// What hears of a hashing as it goes (a progress line, a stop).
pub trait HashWatch: Sync {
    /// `contents` of `bytes` in all are about to be hashed.
    fn start(&self, contents: u64, bytes: u64);
    /// `bytes` more were hashed; `false` stops the hashing.
    fn hashed(&self, bytes: u64) -> bool;
    /// One content's digest is known.
    fn done(&self);
}

/// Hashing nobody watches.
#[derive(Debug, Clone, Copy)]
pub struct Unwatched;

impl HashWatch for Unwatched {
    fn start(&self, _: u64, _: u64) {}
    fn hashed(&self, _: u64) -> bool {
        true
    }
    fn done(&self) {}
}

/// A hashed content: its key, the content, its SHA-256 and diff digest.
pub type Hashed<K> = (K, ContentSpec, Sums);

/// The SHA-256 and diff digest ([`ContentSpec::digests_while`]) of every job's content on
/// `threads` threads (at least one): the largest
/// first, each to the thread with the fewest bytes so far. A stop (`watch` answering
/// `false`) ends each thread after the content it is hashing: the result then holds fewer
/// digests than jobs. `watch.start` is the caller's to call.
pub fn sha256_on_threads<K: Send>(
    mut jobs: Vec<(K, ContentSpec)>,
    threads: usize,
    watch: &dyn HashWatch,
) -> Vec<Hashed<K>> {
    jobs.sort_by_key(|(_, spec)| std::cmp::Reverse(spec.size()));
    let threads = threads.max(1);
    let mut buckets: Vec<Vec<(K, ContentSpec)>> = (0..threads).map(|_| Vec::new()).collect();
    let mut loads = vec![0u64; threads];
    for job in jobs {
        let lightest = (0..threads).min_by_key(|i| loads[*i]).unwrap_or(0);
        loads[lightest] += job.1.size();
        buckets[lightest].push(job);
    }
    let results: Vec<Vec<Hashed<K>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = buckets
            .into_iter()
            .filter(|bucket| !bucket.is_empty())
            .map(|bucket| {
                scope.spawn(move || {
                    let mut done = Vec::with_capacity(bucket.len());
                    for (k, spec) in bucket {
                        match spec.digests_while(|bytes| watch.hashed(bytes)) {
                            Some((blob, diff)) => done.push((k, spec, Sums { blob, diff })),
                            None => break,
                        }
                        watch.done();
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counting(AtomicU64, u64);

    impl HashWatch for Counting {
        fn start(&self, _: u64, _: u64) {}
        fn hashed(&self, bytes: u64) -> bool {
            self.0.fetch_add(bytes, Ordering::Relaxed) + bytes <= self.1
        }
        fn done(&self) {}
    }

    #[test]
    fn every_content_is_hashed_once_on_any_number_of_threads_and_a_stop_stops() {
        let jobs: Vec<(u32, ContentSpec)> = (0..12u32)
            .map(|i| {
                (
                    i,
                    ContentSpec::new(3, format!("c{i}").as_bytes(), 1000 + 7000 * u64::from(i)),
                )
            })
            .collect();
        for threads in [0, 1, 3, 8] {
            let mut done = sha256_on_threads(jobs.clone(), threads, &Unwatched);
            done.sort_by_key(|(k, _, _)| *k);
            assert_eq!(done.len(), jobs.len());
            for ((k, spec, sums), (k0, spec0)) in done.iter().zip(&jobs) {
                assert_eq!((k, spec), (k0, spec0));
                assert_eq!(*sums, spec.sums());
            }
        }
        let stop = Counting(AtomicU64::new(0), 10_000);
        let done = sha256_on_threads(jobs.clone(), 2, &stop);
        assert!(done.len() < jobs.len(), "{}", done.len());
    }
}
