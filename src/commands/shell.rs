//! `creb-rs completions SHELL` and `creb-rs man`: the shell completion scripts and the
//! manual pages, generated from the same clap definitions as `--help` (clap_complete,
//! clap_mangen), never written by hand. Their output is their product: `--quiet` does not
//! silence it, as it does not silence `--help`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

use crate::session::status::ExitStatus;

/// `creb-rs completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, powershell (or elvish).
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

/// `creb-rs man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write `creb-rs.1` and one page per command (`creb-rs-push.1`, `creb-rs-trace-stats.1`,
    /// …) into DIR, instead of printing `creb-rs.1` on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Replace files in DIR of the pages' names that are not manual pages of creb-rs
    /// (refused without it; its own pages are replaced, being made again).
    #[arg(long, requires = "dir")]
    pub force: bool,
}

/// Prints the completion script of `args.shell` for the command line `cmd` on stdout.
pub fn completions(args: &CompletionsArgs, cmd: clap::Command) -> anyhow::Result<ExitStatus> {
    let script = completion_script(args.shell, cmd);
    let mut out = std::io::stdout().lock();
    out.write_all(script.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write the completion script")?;
    Ok(ExitStatus::Success)
}

/// The completion script of `shell` for `creb-rs`.
///
/// clap_complete's bash generator spells the hyphen of a binary name two ways: the state it
/// tracks is `creb__rs__subcmd__replay` while the `case` labels that complete a subcommand's
/// flags read `creb__subcmd__rs__subcmd__replay`, so nothing after the subcommand would
/// complete (clap-rs/clap#6421). The labels are rewritten to the spelling the state uses;
/// `tests/it/shell.rs` completes a subcommand's flags in a real bash to keep this honest.
pub fn completion_script(shell: Shell, mut cmd: clap::Command) -> String {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "creb-rs", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    match shell {
        Shell::Bash => script.replace("creb__subcmd__rs__", "creb__rs__"),
        _ => script,
    }
}

/// Writes every page into `dir` by the rule of [`crate::outfile`]: made in a scratch
/// directory inside it first, then each checked against what stands at its name (an
/// earlier page of creb-rs is replaced, anything else only with `force`) before any is
/// moved into place, so a refusal leaves `dir` as it was.
fn write_pages(cmd: clap::Command, dir: &Path, force: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix(".creb-rs-man.")
        .tempdir_in(dir)
        .with_context(|| format!("cannot write manual pages to {}", dir.display()))?;
    clap_mangen::generate_to(cmd, scratch.path())
        .with_context(|| format!("cannot write manual pages to {}", dir.display()))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(scratch.path())?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    pages.sort();
    for page in &pages {
        let target = dir.join(page.file_name().unwrap_or_default());
        crate::outfile::check(
            &target,
            "man --dir",
            crate::outfile::Kind::ManPage,
            &[],
            force,
        )?;
    }
    for page in &pages {
        let target = dir.join(page.file_name().unwrap_or_default());
        std::fs::rename(page, &target)
            .with_context(|| format!("cannot write {}", target.display()))?;
    }
    Ok(())
}

/// Prints the manual page of the command line `cmd`, or writes every command's page into
/// `args.dir`.
pub fn man(args: &ManArgs, cmd: clap::Command) -> anyhow::Result<ExitStatus> {
    match &args.dir {
        Some(dir) => write_pages(cmd, dir, args.force)?,
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .context("cannot write the manual page")?;
            out.flush().context("cannot write the manual page")?;
        }
    }
    Ok(ExitStatus::Success)
}
