//! `creb-rs compare A B`: two result directories side by side, compared by
//! [`crate::report::compare`], printed as a table or JSON.

use std::path::PathBuf;

use clap::Args;

use super::ExitStatus;
use crate::report::compare::{compare, render};
use crate::results::store::load;

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The baseline result directory.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The result directory compared with it.
    #[arg(value_name = "B")]
    pub b: PathBuf,
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
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    let comparison = compare(&a, &b, args.force)?;
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
