//! The attribution of a run (`by_repository`, `by_client`) with a counting allocator: the
//! live heap and its peak after operations of ever more distinct repositories and clients,
//! to show that it stays flat whatever their number (used for the figure in
//! `docs/benchmarks.md`), and the time it adds per operation:
//!
//! ```sh
//! cargo build --release --example attribution_heap
//! target/release/examples/attribution_heap
//! ```
//!
//! Each round records one operation per name (a blob GET of 1–64 ms, 1 KiB–1 MiB), every
//! name new, plus one heavy repository and client every 50 operations, which must stay on
//! top.

// A global allocator cannot be written without `unsafe`; the library and the binary forbid it.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use creb::metrics::attribution::{Attribution, Who};
use creb::metrics::{HttpStatuses, Op, Outcome, Sample, SizeClass, Timing};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

fn sample(ms: u64, bytes: u64) -> Sample {
    let sent = tokio::time::Instant::now();
    Sample {
        op: Op::BlobGet,
        outcome: Outcome::Ok,
        size_class: SizeClass::of(bytes),
        timing: Timing {
            intended: None,
            ready: None,
            sent,
            first_byte: None,
            end: sent + Duration::from_millis(ms),
        },
        bytes_sent: 0,
        bytes_received: bytes,
        http: HttpStatuses::NONE,
    }
}

fn main() {
    let mut a = Attribution::default();
    let heavy = Who {
        repository: Some(Arc::from("heavy/repo")),
        client: Some(Arc::from("10.0.0.1")),
    };
    let base = counting_alloc::live();
    counting_alloc::reset_peak();
    let mut done = 0u64;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let started = Instant::now();
    for target in [1_000u64, 10_000, 100_000, 1_000_000] {
        while done < target {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // A new name each time (the names are what a trace hands the run, not what
            // attribution keeps).
            let who = Who {
                repository: Some(Arc::from(format!("repo-{done}").as_str())),
                client: Some(Arc::from(format!("client-{done}").as_str())),
            };
            a.record(&who, &sample(1 + x % 64, 1024 + x % (1 << 20)));
            if done.is_multiple_of(50) {
                a.record(&heavy, &sample(200, 64 << 20));
            }
            done += 1;
        }
        let listed = a.repositories.listed();
        println!(
            "{target:>9} distinct repositories and clients: live {:.2} MB (peak {:.2} MB), {} entries held per dimension, top by time {} ({} operations, exact {})",
            (counting_alloc::live() - base) as f64 / 1e6,
            (counting_alloc::peak() - base) as f64 / 1e6,
            a.repositories.held(),
            listed[0].name,
            listed[0].tally.count,
            listed[0].whole,
        );
    }
    let per_op = started.elapsed().as_secs_f64() * 1e9 / done as f64;
    println!("{per_op:.0} ns per operation (names made included)");
}
