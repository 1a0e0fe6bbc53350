//! `creb-rs report RESULT_DIR`: any result directory re-rendered as text, JSON, CSV or a
//! self-contained HTML page, and its charts as SVG and PNG files.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::outfile::Kind;
use crate::report::render_csv;
use crate::results::capacity::CapacityResult;
use crate::results::store::load;
use crate::session::status::ExitStatus;

/// Output formats of `creb-rs report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
    Html,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// A result directory (of a run or a merge).
    #[arg(value_name = "RESULT_DIR")]
    pub dir: PathBuf,

    /// The format; without it, the one `-o FILE` names by its extension (`.html`, `.json`,
    /// `.csv`, `.txt`), else text.
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// Write to FILE instead of stdout (HTML defaults to RESULT_DIR/report.html).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Replace an existing `-o` FILE that is not a report of creb-rs (refused without it; a
    /// report creb-rs wrote is replaced, being made again from the result).
    #[arg(long, requires = "output")]
    pub force: bool,

    /// Also write every chart of the HTML report to DIR, as SVG and as PNG (for papers).
    #[arg(long, value_name = "DIR")]
    pub charts: Option<PathBuf>,

    /// The summary JSON on stdout (the same as `--format json`).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,
}

impl Format {
    /// The format a file name asks for by its extension.
    fn of_file(path: &std::path::Path) -> anyhow::Result<Format> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        Ok(match ext.as_str() {
            "html" | "htm" => Format::Html,
            "json" => Format::Json,
            "csv" => Format::Csv,
            "txt" | "text" => Format::Text,
            _ => anyhow::bail!(
                "cannot tell the format of {} from its extension: name it .html, .json, .csv \
                 or .txt, or give --format",
                path.display()
            ),
        })
    }
}

/// Runs `creb-rs report`.
pub async fn run(args: ReportArgs) -> anyhow::Result<ExitStatus> {
    let format = match (args.json, args.format, &args.output) {
        (true, _, _) => Format::Json,
        (false, Some(format), _) => format,
        (false, None, Some(path)) => Format::of_file(path)?,
        (false, None, None) => Format::Text,
    };
    if let Some(path) = &args.output {
        // The result's own files are inputs; its report page is an output.
        let inputs: Vec<PathBuf> = crate::results::RESULT_FILES
            .iter()
            .filter(|name| **name != "report.html")
            .map(|name| args.dir.join(name))
            .collect();
        crate::outfile::check(path, "-o", Kind::Report, &inputs, args.force)?;
    }
    if CapacityResult::is_in(&args.dir) && !args.dir.join("summary.json").exists() {
        return capacity_report(&args, format);
    }
    let set = load(&args.dir)?;
    if let Some(dir) = &args.charts {
        let files = crate::report::html::write_charts(&set, dir)?;
        if !args.quiet {
            eprintln!(
                "creb-rs: wrote {} chart files to {}",
                files.len(),
                dir.display()
            );
        }
    }
    let text = match format {
        Format::Text => crate::report::render_result(&set),
        Format::Json => serde_json::to_string_pretty(&set.summary)? + "\n",
        Format::Csv => render_csv(&set.summary)?,
        Format::Html => {
            let page = crate::report::html::render(&set)?;
            let path = args
                .output
                .clone()
                .unwrap_or_else(|| args.dir.join("report.html"));
            std::fs::write(&path, page)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            if !args.quiet {
                eprintln!("creb-rs: wrote {}", path.display());
            }
            return Ok(ExitStatus::Success);
        }
    };
    emit(&text, args.output.as_deref(), args.quiet)
}

/// Writes `text` to `path` (said on stderr), or prints it.
fn emit(text: &str, path: Option<&std::path::Path>, quiet: bool) -> anyhow::Result<ExitStatus> {
    match path {
        Some(path) => {
            std::fs::write(path, text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            if !quiet {
                eprintln!("creb-rs: wrote {}", path.display());
            }
        }
        None if quiet => {}
        None => print!("{text}"),
    }
    Ok(ExitStatus::Success)
}

/// `report OUT` of a capacity search or ladder: its table, capacity.json, or its HTML page
/// with the curves (each step's own report is `report OUT/steps/NN`).
fn capacity_report(args: &ReportArgs, format: Format) -> anyhow::Result<ExitStatus> {
    let (result, json) = CapacityResult::read_with_text(&args.dir)?;
    let text = match format {
        Format::Html => crate::report::capacity::page::render(&result, &args.dir),
        Format::Json => json,
        Format::Text => crate::report::capacity::render(&result),
        Format::Csv => anyhow::bail!(
            "{} is a capacity result: its CSV is each step's (`creb-rs report {}/steps/NN \
             --format csv`)",
            args.dir.display(),
            args.dir.display()
        ),
    };
    let path = match (&args.output, format) {
        (Some(path), _) => Some(path.clone()),
        (None, Format::Html) => Some(args.dir.join("report.html")),
        (None, _) => None,
    };
    emit(&text, path.as_deref(), args.quiet)
}
