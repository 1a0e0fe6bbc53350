//! The `creb-rs` binary: parse flags, set up diagnostics and the runtime, run, exit.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use creb::shutdown::Shutdown;
use creb::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("creb-rs: error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let status = runtime.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        creb::exit::run_with(cli, shutdown).await
    });
    ExitCode::from(status.code())
}
