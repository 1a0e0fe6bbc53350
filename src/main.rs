//! The `creb-rs` binary: parse flags, hand them to [`creb::exit::main_with`], exit.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use creb::Cli;

fn main() -> ExitCode {
    ExitCode::from(creb::exit::main_with(Cli::parse()))
}
