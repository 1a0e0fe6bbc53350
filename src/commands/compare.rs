//! `creb-rs compare A B` (or `A1,A2,… B1,B2,…` with repetitions): result directories side
//! by side, compared by [`crate::report::compare`], printed as a table or JSON.

use std::path::PathBuf;

use clap::Args;

use crate::report::compare::{compare_runs, render};
use crate::results::store::{aggregator_of, load};
use crate::results::thresholds::{parse_all, report, verdicts, Baseline};
use crate::session::status::ExitStatus;

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The baseline result directory, or the directories of its repetitions separated by
    /// commas (medians, spread and noise are then shown).
    #[arg(value_name = "A", value_delimiter = ',', num_args = 1, required = true)]
    pub a: Vec<PathBuf>,
    /// The result directory (or repetitions) compared with it.
    #[arg(value_name = "B", value_delimiter = ',', num_args = 1, required = true)]
    pub b: Vec<PathBuf>,
    /// Compare even when the datasets differ (never across workload models).
    #[arg(long)]
    pub force: bool,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit 3 when EXPR holds for B with A as its baseline (one run a side), e.g.
    /// 'p99(blob_get) > baseline * 1.10': beyond both runs' 95% intervals (docs/results.md).
    #[arg(long, value_name = "EXPR")]
    pub fail_if: Vec<String>,
    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,
}

/// Runs `creb-rs compare`.
pub async fn run(args: CompareArgs) -> anyhow::Result<ExitStatus> {
    let load_all = |dirs: &[PathBuf]| dirs.iter().map(|d| load(d)).collect::<Result<Vec<_>, _>>();
    let a = load_all(&args.a)?;
    let b = load_all(&args.b)?;
    let comparison = compare_runs(&a, &b, args.force)?;
    let held = gate(&args.fail_if, &a, &b)?;
    if !args.quiet {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&comparison)?);
        } else {
            print!("{}", render(&comparison));
        }
    }
    Ok(if held {
        ExitStatus::ThresholdFailed
    } else {
        ExitStatus::Success
    })
}

/// `--fail-if` on B with A as the baseline: whether one held (said on stderr).
fn gate(
    texts: &[String],
    a: &[crate::results::ResultSet],
    b: &[crate::results::ResultSet],
) -> anyhow::Result<bool> {
    if texts.is_empty() {
        return Ok(false);
    }
    let thresholds = parse_all(texts)?;
    let ([base], [run]) = (a, b) else {
        anyhow::bail!("--fail-if compares one run with its baseline: give one directory a side");
    };
    let baseline = Baseline {
        summary: base.summary.clone(),
        table: aggregator_of(&base.counters, &base.hlog)?.into_table(),
        dir: base.dir.clone(),
        dataset_hash: base.meta.dataset_hash.clone(),
    };
    let table = aggregator_of(&run.counters, &run.hlog)?.into_table();
    let judged = verdicts(&thresholds, &run.summary, &table, Some(&baseline));
    Ok(report(&judged))
}
