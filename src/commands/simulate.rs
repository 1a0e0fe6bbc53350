//! `creb-rs simulate cache|prefetch`: the flags of the offline cache and prefetch
//! experiments, turned into the settings of [`crate::analysis::simulate`], run on the
//! blocking pool and printed as text or JSON.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::analysis::simulate::{
    simulate_cache_files, simulate_prefetch_files, PrefetchConfig, TraceInfo, PAPER_RETENTIONS,
};
use crate::report::analysis::simulate::{cache_text, prefetch_text};
use crate::session::status::ExitStatus;
use crate::units::{parse_duration, ByteSize};

/// `simulate`: offline cache and prefetch experiments on traces.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    #[command(subcommand)]
    pub command: SimulateCommand,
    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum SimulateCommand {
    /// Two-level (memory + SSD) LRU layer cache, FAST'18 §5.3: hit ratios per tier, cold
    /// start vs steady state, and sweeps over cache sizes.
    Cache(CacheArgs),
    /// Layer prefetching after a push, FAST'18 §5.4: hit ratio, prefetch ratio and the
    /// memory the prefetch cache needs.
    Prefetch(PrefetchArgs),
}

/// Flags of `simulate cache`.
#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// Trace files or directories (JSON array or lines; plain, gzip or zstd).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,

    /// Memory tier size, e.g. `2GiB`.
    #[arg(
        long,
        value_name = "SIZE",
        required_unless_present = "sweep",
        conflicts_with = "sweep"
    )]
    pub memory: Option<ByteSize>,

    /// SSD tier size as a multiple of the memory tier (FAST'18 used 10-20); 0 for memory
    /// only.
    #[arg(long, value_name = "X", default_value = "10", value_parser = parse_factor)]
    pub ssd_factor: f64,

    /// Layers of this size or larger skip the memory tier and go to the SSD.
    #[arg(long, value_name = "SIZE", default_value = "100MiB")]
    pub memory_max_object: ByteSize,

    /// Memory sizes as percentages of the working set (the bytes of the distinct layers the
    /// trace's GETs fetch), e.g. `2%,5%,10%`; prints a table. Reads the trace twice.
    #[arg(long, value_name = "PCT,...", value_delimiter = ',', value_parser = parse_percent)]
    pub sweep: Vec<f64>,

    /// Print JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,

    /// Skip invalid trace records (counted) instead of failing.
    #[arg(long)]
    pub skip_invalid: bool,
}

/// Flags of `simulate prefetch`.
#[derive(Debug, clap::Args)]
pub struct PrefetchArgs {
    /// Trace files or directories (JSON array or lines; plain, gzip or zstd).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,

    /// How long a push keeps a repository (and the layers seen with it) in the lookup
    /// table.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub lookup_retention: Duration,

    /// How long a prefetched layer stays in the prefetch cache.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub cache_retention: Duration,

    /// Run the paper's thresholds instead: every pair of 1h, 12h and 1d for the lookup and
    /// cache retentions (one pass over the trace).
    #[arg(long, conflicts_with_all = ["lookup_retention", "cache_retention"])]
    pub sweep: bool,

    /// Print JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,

    /// Skip invalid trace records (counted) instead of failing.
    #[arg(long)]
    pub skip_invalid: bool,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a positive percentage (e.g. 2%)")),
    }
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e6).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a factor between 0 and 1e6")),
    }
}

/// The prefetch configurations `args` asks for.
pub fn prefetch_configs(args: &PrefetchArgs) -> Vec<PrefetchConfig> {
    if args.sweep {
        let mut out = Vec::new();
        for lookup in PAPER_RETENTIONS {
            for cache in PAPER_RETENTIONS {
                out.push(PrefetchConfig {
                    lookup_retention: lookup,
                    cache_retention: cache,
                });
            }
        }
        out
    } else {
        vec![PrefetchConfig {
            lookup_retention: args.lookup_retention,
            cache_retention: args.cache_retention,
        }]
    }
}

/// Runs `simulate`; prints the result on stdout.
pub async fn run(args: SimulateArgs) -> anyhow::Result<ExitStatus> {
    let quiet = args.quiet;
    let text = tokio::task::spawn_blocking(move || render(args))
        .await
        .context("the simulation thread failed")??;
    if !quiet {
        print!("{text}");
    }
    Ok(ExitStatus::Success)
}

/// Runs a simulation and renders what `run` prints (JSON or text).
pub fn render(args: SimulateArgs) -> anyhow::Result<String> {
    match args.command {
        SimulateCommand::Cache(a) => {
            let out = simulate_cache_files(
                &a.traces,
                a.memory.map(|m| m.bytes()),
                &a.sweep,
                a.ssd_factor,
                a.memory_max_object.bytes(),
                a.skip_invalid,
            )?;
            no_records(&a.traces, &out.trace)?;
            if a.json {
                json(&out)
            } else {
                Ok(cache_text(&out))
            }
        }
        SimulateCommand::Prefetch(a) => {
            let configs = prefetch_configs(&a);
            let out = simulate_prefetch_files(&a.traces, &configs, a.skip_invalid)?;
            no_records(&a.traces, &out.trace)?;
            if a.json {
                json(&out)
            } else {
                Ok(prefetch_text(&out))
            }
        }
    }
}

/// A simulation over no record has no result: an error, not empty tables.
fn no_records(traces: &[std::path::PathBuf], read: &TraceInfo) -> anyhow::Result<()> {
    if read.records > 0 {
        return Ok(());
    }
    let skipped: u64 = read.skipped.values().sum();
    anyhow::bail!(
        "{} holds no usable trace record{}",
        traces
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        if skipped > 0 {
            format!(" ({skipped} skipped)")
        } else {
            String::new()
        }
    )
}

fn json(value: &impl Serialize) -> anyhow::Result<String> {
    let mut s = serde_json::to_string_pretty(value).context("cannot serialise the result")?;
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_parsers() {
        assert_eq!(parse_percent("2%"), Ok(2.0));
        assert_eq!(parse_percent(" 0.5 "), Ok(0.5));
        assert!(parse_percent("0%").is_err());
        assert!(parse_percent("x").is_err());
        assert!(parse_percent("inf").is_err());
        assert_eq!(parse_factor("10"), Ok(10.0));
        assert_eq!(parse_factor("0"), Ok(0.0));
        assert!(parse_factor("-1").is_err());
    }
}
