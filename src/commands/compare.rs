//! `creb-rs compare A B` (or `A1,A2,… B1,B2,…` with repetitions): result directories side
//! by side, compared by [`crate::report::compare`], printed as a table or JSON.

use std::path::PathBuf;

use clap::Args;

use crate::report::compare::{compare_runs, render};
use crate::results::store::load;
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
    if args.quiet {
        return Ok(ExitStatus::Success);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", render(&comparison));
    }
    Ok(ExitStatus::Success)
}
