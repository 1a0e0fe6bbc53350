//! `creb-rs merge DIR... --output-dir OUT`: the results of many hosts as one, merged by
//! [`crate::merge::merge_into`] on the blocking pool; prints the per-host table and the merged
//! summary. Capacity ladders (`capacity --ladder`, one shard per host) merge step by step
//! ([`crate::capacity::merge`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::capacity::merge::{is_capacity, merge_ladders};
use crate::merge::merge_into;
use crate::report::{host_table, render_text_with};
use crate::session::status::ExitStatus;

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Result directories to merge (one per host or shard; merged results work too).
    #[arg(value_name = "RESULT_DIR", required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,

    /// Where to write the merged result directory.
    #[arg(long, value_name = "DIR")]
    pub output_dir: PathBuf,

    /// Accept results that do not cover every shard (still refusing overlaps), for merging
    /// in stages.
    #[arg(long)]
    pub partial: bool,

    /// Replace files in --output-dir that have a result's names but were not written by
    /// creb-rs (an earlier result of creb-rs there is always replaced).
    #[arg(long)]
    pub force: bool,

    /// Print the merged summary JSON instead of the tables.
    #[arg(long)]
    pub json: bool,

    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,
}

/// Runs `creb-rs merge`.
pub async fn run(args: MergeArgs) -> anyhow::Result<ExitStatus> {
    let ladders = args.dirs.iter().filter(|d| is_capacity(d)).count();
    if ladders > 0 {
        if let Some(other) = args.dirs.iter().find(|d| !is_capacity(d)) {
            anyhow::bail!(
                "{} holds no capacity.json: capacity ladders merge only with capacity ladders",
                other.display()
            );
        }
        let result = {
            let args = args.clone();
            tokio::task::spawn_blocking(move || {
                merge_ladders(&args.dirs, &args.output_dir, args.partial, args.force)
            })
            .await
            .context("the merge stopped unexpectedly")??
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&result)?);
        } else if !args.quiet {
            print!("{}", crate::report::capacity::render(&result));
        }
        return Ok(ExitStatus::Success);
    }
    let (summary, hosts) = {
        let args = args.clone();
        tokio::task::spawn_blocking(move || {
            merge_into(&args.dirs, &args.output_dir, args.partial, args.force)
        })
        .await
        .context("the merge stopped unexpectedly")??
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else if !args.quiet {
        print!("{}", host_table(&hosts));
        println!();
        print!("{}", render_text_with(&summary, &[], &hosts));
    }
    Ok(ExitStatus::Success)
}
