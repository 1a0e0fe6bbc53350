//! `simulate cache` and `simulate prefetch` as people read them: the trace simulated, then
//! a row per cache size (hit ratios of each tier, the steady state) or per prefetch
//! configuration, rendered from [`CacheOutput`] and [`PrefetchOutput`].

use std::time::Duration;

use crate::analysis::simulate::{CacheOutput, PrefetchOutput, TraceInfo};
use crate::units::{format_duration, grouped, ByteSize};

fn pct(r: f64) -> String {
    format!("{:.1}%", r * 100.0)
}

fn trace_line(t: &TraceInfo) -> String {
    let skipped: u64 = t.skipped.values().sum();
    format!(
        "{} file(s), {} records ({} skipped), spanning {}",
        t.files,
        grouped(t.records),
        grouped(skipped),
        format_duration(Duration::from_secs_f64(t.span_s.max(0.0)))
    )
}

/// One row of the cache simulation's table.
fn cache_row(s: &mut String, c: [String; 10]) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{:>7}  {:>10}  {:>10}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>10}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
    );
}

/// The human summary of a cache simulation.
#[allow(clippy::too_many_lines)]
pub fn cache_text(out: &CacheOutput) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "simulate cache: {}", trace_line(&out.trace));
    let _ = writeln!(
        s,
        "layer GETs: {} ({}); working set: {} layers, {}",
        grouped(out.layer_requests),
        ByteSize(out.layer_request_bytes),
        grouped(out.working_set_layers),
        ByteSize(out.working_set_bytes)
    );
    let _ = writeln!(
        s,
        "memory takes layers < {}; SSD = {} x memory; steady state = after the cache first drops a layer",
        ByteSize(out.memory_max_object),
        out.ssd_factor
    );
    let _ = writeln!(s);
    cache_row(
        &mut s,
        [
            "memory%",
            "memory",
            "ssd",
            "mem-only",
            "two-tier",
            "from mem",
            "from ssd",
            "byte hit",
            "steady",
            "filled at",
        ]
        .map(str::to_owned),
    );
    for p in &out.points {
        let t = &p.two_tier;
        cache_row(
            &mut s,
            [
                format!("{:.1}%", p.percent_of_working_set),
                ByteSize(t.config.memory_bytes).to_string(),
                ByteSize(t.config.ssd_bytes).to_string(),
                pct(p.memory_only.overall.hit_ratio.overall),
                pct(t.overall.hit_ratio.overall),
                pct(t.overall.hit_ratio.memory),
                pct(t.overall.hit_ratio.ssd),
                pct(t.overall.byte_hit_ratio.overall),
                t.steady_state
                    .as_ref()
                    .map_or("-".to_owned(), |r| pct(r.hit_ratio.overall)),
                t.filled_at_request.map_or("never".to_owned(), grouped),
            ],
        );
    }
    if let [p] = out.points.as_slice() {
        let m = &p.two_tier.movements;
        let _ = writeln!(
            s,
            "\npromotions {}, demotions {}, SSD evictions {}, dropped {}, bypassed {}; peak memory {}, peak SSD {}",
            grouped(m.promotions),
            grouped(m.demotions),
            grouped(m.ssd_evictions),
            grouped(m.dropped),
            grouped(m.bypassed),
            ByteSize(p.two_tier.peak_memory_bytes),
            ByteSize(p.two_tier.peak_ssd_bytes)
        );
    }
    s
}

/// The human summary of a prefetch simulation.
pub fn prefetch_text(out: &PrefetchOutput) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "simulate prefetch: {}", trace_line(&out.trace));
    if let Some(r) = out.results.first() {
        let _ = writeln!(
            s,
            "layer GETs {} ({}), manifest GETs {}, manifest PUTs {}, pushed layers {}",
            grouped(r.layer_gets),
            ByteSize(r.layer_get_bytes),
            grouped(r.manifest_gets),
            grouped(r.manifest_puts),
            grouped(r.pushed_layers)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>7}  {:>7}  {:>9}  {:>8}  {:>14}  {:>10}  {:>11}  {:>11}  {:>8}",
        "lookup",
        "cache",
        "hit ratio",
        "byte hit",
        "prefetch ratio",
        "prefetched",
        "bytes",
        "peak cache",
        "triggers"
    );
    for r in &out.results {
        let _ = writeln!(
            s,
            "{:>7}  {:>7}  {:>9}  {:>8}  {:>14}  {:>10}  {:>11}  {:>11}  {:>8}",
            humantime::format_duration(Duration::from_secs(r.lookup_retention_s)).to_string(),
            humantime::format_duration(Duration::from_secs(r.cache_retention_s)).to_string(),
            pct(r.hit_ratio),
            pct(r.byte_hit_ratio),
            pct(r.prefetch_ratio),
            grouped(r.prefetched),
            ByteSize(r.prefetched_bytes).to_string(),
            ByteSize(r.peak_cache_bytes).to_string(),
            grouped(r.triggers),
        );
    }
    s
}
