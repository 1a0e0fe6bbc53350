//! `creb-rs cost`: the flags of the cost model, the estimate of [`crate::analysis::cost`]
//! computed on the blocking pool, printed as text or JSON.

use std::path::PathBuf;

use anyhow::Context;

use crate::analysis::cost::{estimate, load_table, measure, Estimate};
use crate::report::analysis::cost::text;
use crate::session::status::ExitStatus;
use crate::units::ByteSize;

/// Flags of `cost`.
#[derive(Debug, clap::Args)]
pub struct CostArgs {
    /// A result directory (holding `summary.json`), or trace files and directories.
    #[arg(required = true, value_name = "RESULT_DIR|TRACE")]
    pub inputs: Vec<PathBuf>,

    /// Provider in the pricing table: ecr, acr-basic, acr-standard, acr-premium, gcr, ibm,
    /// dockerhub, quay (or any a `--pricing` file defines).
    #[arg(long, value_name = "NAME")]
    pub provider: String,

    /// Region whose prices to use (default: the provider's base region in the table).
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,

    /// Months to project: the monthly bill times this.
    #[arg(long, value_name = "M", default_value = "1", value_parser = parse_months)]
    pub months: f64,

    /// A pricing table replacing the built-in one (same schema as `data/pricing.toml`).
    #[arg(long, value_name = "FILE")]
    pub pricing: Option<PathBuf>,

    /// Scale the workload so that a month's egress is SIZE (e.g. `200TiB`; note `TB` is
    /// 10^12 bytes, `TiB` 2^40); requests scale by the same factor, storage does not.
    #[arg(long, value_name = "SIZE")]
    pub scale_to: Option<ByteSize>,

    /// Print JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,

    /// Skip invalid trace records (counted) instead of failing.
    #[arg(long)]
    pub skip_invalid: bool,

    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,
}

fn parse_months(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1200.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of months in (0, 1200]")),
    }
}

/// Computes the estimate `args` asks for (reads files; prints nothing).
pub fn compute(args: &CostArgs) -> anyhow::Result<Estimate> {
    let table = load_table(args.pricing.as_deref())?;
    let prices = table.resolve(&args.provider, args.region.as_deref())?;
    let workload = measure(&args.inputs, args.skip_invalid)?;
    Ok(estimate(
        &workload,
        &prices,
        args.months,
        args.scale_to.map(|s| s.bytes()),
    )?)
}

/// Runs `cost`; prints the breakdown on stdout.
pub async fn run(args: CostArgs) -> anyhow::Result<ExitStatus> {
    let (json, quiet) = (args.json, args.quiet);
    let estimate = tokio::task::spawn_blocking(move || compute(&args))
        .await
        .context("the cost thread failed")??;
    if quiet {
        return Ok(ExitStatus::Success);
    }
    if json {
        let mut s =
            serde_json::to_string_pretty(&estimate).context("cannot serialise the estimate")?;
        s.push('\n');
        print!("{s}");
    } else {
        print!("{}", text(&estimate));
    }
    Ok(ExitStatus::Success)
}
