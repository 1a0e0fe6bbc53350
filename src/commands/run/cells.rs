//! Cells — one (experiment, registry, round, repetition) — and the command line that runs
//! each: a pure translation of the experiment file into the flags of `replay`, `push`,
//! `pull` or `capacity`, parsed by the same clap definitions, so a cell is exactly the command a person
//! would type and every value gets the command's own validation.
//!
//! Invariants: no secret is ever part of a command line (`password_env` becomes
//! `--password-cmd 'printf %s "$VAR"'`, which names the variable only); the environment
//! does not leak into a cell (`CREB_USERNAME` and `CREB_REGISTRY` are ignored: the file is
//! the only source of registries and user names); a cell's directory is a pure function of
//! its identity and the run's layout, so `--resume` finds it again.

use std::path::Path;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::commands::args::{OutputArgs, RegistryArgs};
use crate::commands::capacity::CapacityArgs;
use crate::commands::pull::PullArgs;
use crate::commands::push::PushArgs;
use crate::commands::replay::ReplayArgs;
use crate::content::DEFAULT_SEED;
pub use crate::experiment::cells::Cell;
use crate::experiment::config::{Experiment, ExperimentFile, FlagValue, Kind, RegistrySpec};

fn push_value(argv: &mut Vec<String>, flag: &str, value: &Option<FlagValue>) {
    if let Some(v) = value {
        argv.push(flag.into());
        argv.push(v.0.clone());
    }
}

fn push_text(argv: &mut Vec<String>, flag: &str, value: &Option<String>) {
    if let Some(v) = value {
        argv.push(flag.into());
        argv.push(v.clone());
    }
}

fn push_flag(argv: &mut Vec<String>, flag: &str, value: Option<bool>) {
    if value == Some(true) {
        argv.push(flag.into());
    }
}

fn path_text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The registry flags (URL, TLS, timeouts, retries, credentials).
pub fn registry_flags(r: &RegistrySpec) -> Vec<String> {
    let mut argv = vec!["--registry".to_owned(), r.url.clone()];
    if r.insecure {
        argv.push("--insecure".into());
    }
    for ca in &r.ca_cert.0 {
        argv.push("--ca-cert".into());
        argv.push(path_text(ca));
    }
    push_value(&mut argv, "--connect-timeout", &r.connect_timeout);
    push_value(&mut argv, "--request-timeout", &r.request_timeout);
    push_value(&mut argv, "--body-idle-timeout", &r.body_idle_timeout);
    push_value(&mut argv, "--credential-timeout", &r.credential_timeout);
    push_text(&mut argv, "--retry", &r.retry);
    push_value(&mut argv, "--max-retries", &r.max_retries);
    push_value(&mut argv, "--backoff", &r.backoff);
    if r.anonymous {
        argv.push("--anonymous".into());
    }
    push_text(&mut argv, "--username", &r.username);
    if let Some(var) = &r.password_env {
        // The variable's name only; `sh` reads the value from this process's environment.
        argv.push("--password-cmd".into());
        argv.push(format!("printf %s \"${var}\""));
    }
    push_text(&mut argv, "--password-cmd", &r.password_cmd);
    if let Some(dir) = &r.docker_config {
        argv.push("--docker-config".into());
        argv.push(path_text(dir));
    }
    argv
}

/// `prefix/repo`, or `repo` without a prefix.
pub fn prefixed_repo(r: &RegistrySpec, repo: &str) -> String {
    match r.repo_prefix.as_deref().map(|p| p.trim_matches('/')) {
        Some(p) if !p.is_empty() => format!("{p}/{repo}"),
        _ => repo.to_owned(),
    }
}

/// The seed of a cell: the experiment's, offset by the cell's number for pushes with
/// `fresh_content` (the default), so every repetition and round pushes new bytes.
pub fn cell_seed(exp: &Experiment, cell: &Cell) -> Result<u64, String> {
    let base = match &exp.spec.seed {
        None => DEFAULT_SEED,
        Some(v) => {
            let t = v.0.trim();
            match t.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            }
            .map_err(|_| format!("seed '{}' is not a whole number (decimal or 0x-hex)", v.0))?
        }
    };
    let fresh = exp.spec.kind == Kind::Push && exp.spec.fresh_content != Some(false);
    Ok(if fresh {
        base.wrapping_add(
            cell.round
                .wrapping_mul(u64::from(exp.spec.repetitions()))
                .wrapping_add(u64::from(cell.rep)),
        )
    } else {
        base
    })
}

/// The command line of a cell (without the program name), writing into `out_dir`.
#[allow(clippy::too_many_lines)]
pub fn cell_argv(
    file: &ExperimentFile,
    cell: &Cell,
    out_dir: &Path,
) -> Result<Vec<String>, String> {
    let exp = &file.experiments[cell.experiment];
    let reg = &file.registries[cell.registry];
    let s = &exp.spec;
    let mut argv = vec![s.kind.name().to_owned()];
    if matches!(s.kind, Kind::Replay | Kind::Capacity) {
        for t in s.traces.iter().flat_map(|t| t.0.iter()) {
            argv.push(path_text(t));
        }
    }
    argv.extend(registry_flags(reg));
    argv.push("--output-dir".into());
    argv.push(path_text(out_dir));
    argv.push("--quiet".into());
    push_value(&mut argv, "--interval", &s.interval);
    push_flag(&mut argv, "--record-requests", s.record_requests);
    push_text(&mut argv, "--split-by-header", &s.split_by_header);
    for expr in &s.fail_if {
        argv.push("--fail-if".into());
        argv.push(expr.clone());
    }
    push_value(&mut argv, "--concurrency", &s.concurrency);
    if s.kind != Kind::Pull {
        argv.push("--seed".into());
        argv.push(cell_seed(exp, cell)?.to_string());
    }
    if s.kind == Kind::Capacity {
        for slo in &s.slo {
            argv.push("--slo".into());
            argv.push(slo.clone());
        }
        push_value(&mut argv, "--step", &s.step);
        push_value(&mut argv, "--step-warmup", &s.step_warmup);
        push_value(&mut argv, "--max-time", &s.max_time);
        push_value(&mut argv, "--max-speed", &s.max_speed);
        push_value(&mut argv, "--resolution", &s.resolution);
        push_value(&mut argv, "--ladder", &s.ladder);
    }
    match s.kind {
        Kind::Replay | Kind::Capacity => {
            push_text(&mut argv, "--mode", &s.mode);
            push_value(&mut argv, "--speed", &s.speed);
            push_text(&mut argv, "--phase", &s.phase);
            push_value(&mut argv, "--limit-requests", &s.limit_requests);
            push_value(&mut argv, "--limit-duration", &s.limit_duration);
            push_text(&mut argv, "--upload", &s.upload);
            push_value(&mut argv, "--chunk-size", &s.chunk_size);
            push_text(&mut argv, "--manifest-format", &s.manifest_format);
            push_text(&mut argv, "--compression", &s.compression);
            push_value(&mut argv, "--compress-ratio", &s.compress_ratio);
            push_value(&mut argv, "--max-lateness", &s.max_lateness);
            push_value(&mut argv, "--grace", &s.grace);
            push_value(&mut argv, "--session-gap", &s.session_gap);
            push_value(&mut argv, "--prewarm-concurrency", &s.prewarm_concurrency);
            push_text(&mut argv, "--shard-by", &s.shard_by);
            push_flag(&mut argv, "--skip-invalid", s.skip_invalid);
            push_flag(&mut argv, "--replay-failed", s.replay_failed);
            push_flag(&mut argv, "--strict", s.strict);
            push_text(&mut argv, "--verify", &s.verify);
            push_flag(&mut argv, "--no-verify", s.no_verify);
            push_flag(&mut argv, "--unpack", s.unpack);
            if s.kind == Kind::Replay {
                for replica in &s.replica {
                    argv.push("--replica".into());
                    argv.push(replica.clone());
                }
            }
            if let Some(p) = reg.repo_prefix.as_deref().map(|p| p.trim_matches('/')) {
                if !p.is_empty() {
                    argv.push("--repo-prefix".into());
                    argv.push(p.to_owned());
                }
            }
        }
        Kind::Push => {
            let repo = s
                .repo
                .clone()
                .unwrap_or_else(|| s.name.to_ascii_lowercase());
            argv.push("--repo".into());
            argv.push(prefixed_repo(reg, &repo));
            push_text(&mut argv, "--tag", &s.tag);
            push_value(&mut argv, "--images", &s.images);
            push_value(&mut argv, "--layers", &s.layers);
            push_value(&mut argv, "--layer-size", &s.layer_size);
            push_value(&mut argv, "--chunk-size", &s.chunk_size);
            push_flag(&mut argv, "--monolithic", s.monolithic);
            push_flag(&mut argv, "--single-post", s.single_post);
            push_text(&mut argv, "--manifest-format", &s.manifest_format);
            push_text(&mut argv, "--compression", &s.compression);
            push_value(&mut argv, "--compress-ratio", &s.compress_ratio);
            for replica in &s.replica {
                argv.push("--replica".into());
                argv.push(replica.clone());
            }
        }
        Kind::Pull => {
            if let Some(repo) = &s.repo {
                argv.push("--repo".into());
                argv.push(prefixed_repo(reg, repo));
            }
            push_text(&mut argv, "--tag", &s.tag);
            push_value(&mut argv, "--images", &s.images);
            push_flag(&mut argv, "--all-tags", s.all_tags);
            push_flag(&mut argv, "--unpack", s.unpack);
            push_text(&mut argv, "--verify", &s.verify);
            push_flag(&mut argv, "--no-verify", s.no_verify);
        }
    }
    argv.extend(s.extra_args.iter().cloned());
    Ok(argv)
}

/// The command line of a cell: one of the commands a cell runs, with the flags they take
/// at the top level (the same clap definitions, so a cell is exactly what a person types).
#[derive(Debug, Parser)]
#[command(name = "creb-rs")]
struct CellCli {
    #[command(subcommand)]
    command: Command,

    /// `--quiet`, global as at the top level.
    #[arg(short, long, global = true)]
    quiet: bool,
}

/// What a cell runs.
#[derive(Debug, Subcommand)]
pub enum Command {
    Push(PushArgs),
    Pull(PullArgs),
    Replay(Box<ReplayArgs>),
    Capacity(Box<CapacityArgs>),
}

impl Command {
    /// The output flags of the command.
    pub fn output_mut(&mut self) -> &mut OutputArgs {
        match self {
            Command::Push(a) => &mut a.output,
            Command::Pull(a) => &mut a.output,
            Command::Replay(a) => &mut a.output,
            Command::Capacity(a) => &mut a.replay.output,
        }
    }
}

/// The flag definitions with the environment fallbacks a cell must not see turned off.
fn command_without_env() -> clap::Command {
    let mut cmd = CellCli::command();
    for sub in ["push", "pull", "replay", "capacity"] {
        cmd = cmd.mut_subcommand(sub, |s| {
            s.mut_arg("registry", |a| a.env(None))
                .mut_arg("username", |a| a.env(None))
        });
    }
    cmd
}

/// Parses a cell's command line with the commands' own flag definitions.
pub fn parse(argv: &[String]) -> Result<Command, String> {
    let full = std::iter::once("creb-rs".to_owned()).chain(argv.iter().cloned());
    let matches = command_without_env()
        .try_get_matches_from(full)
        .map_err(|e| clap_message(&e))?;
    let cli = CellCli::from_arg_matches(&matches).map_err(|e| clap_message(&e))?;
    let mut command = cli.command;
    command.output_mut().quiet |= cli.quiet;
    Ok(command)
}

/// The first line of a clap error, without its `error: ` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("invalid flags").trim();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// The registry flags of `reg`, parsed (for preflight and cleanup clients).
pub fn registry_args(reg: &RegistrySpec) -> Result<RegistryArgs, String> {
    let mut argv = vec!["pull".to_owned()];
    argv.extend(registry_flags(reg));
    argv.extend(["--repo".to_owned(), "x".to_owned()]);
    match parse(&argv)? {
        Command::Pull(p) => Ok(p.registry),
        _ => Err("internal: not a pull command line".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> ExperimentFile {
        ExperimentFile::parse(text, Path::new("x.toml"), Path::new("/base")).unwrap()
    }

    const TEXT: &str = r#"
[[registry]]
name = "plain"
url = "http://127.0.0.1:5000"

[[registry]]
name = "auth"
url = "http://127.0.0.1:5001"
username = "bench"
password_env = "BENCH_PW"
repo_prefix = "creb/"

[[experiment]]
name = "r"
kind = "replay"
traces = "t.json"
mode = "delay"
speed = 2.5
limit_requests = "10k"

[[experiment]]
name = "Push"
kind = "push"
layers = 2
layer_size = "64KiB"
images = 3
repeat = 2
seed = "0x10"

[[experiment]]
name = "pull"
kind = "pull"
repo = "push"
images = 3
"#;

    #[test]
    fn argv_carry_every_option_and_no_secret() {
        let f = file(TEXT);
        let cell = Cell {
            experiment: 0,
            registry: 1,
            round: 0,
            rep: 0,
        };
        let argv = cell_argv(&f, &cell, Path::new("/out/r/auth")).unwrap();
        let line = argv.join(" ");
        assert!(
            line.starts_with("replay /base/t.json --registry http://127.0.0.1:5001"),
            "{line}"
        );
        assert!(
            line.contains("--username bench --password-cmd printf %s \"$BENCH_PW\""),
            "{line}"
        );
        assert!(
            line.contains("--mode delay --speed 2.5 --limit-requests 10k"),
            "{line}"
        );
        assert!(line.contains("--repo-prefix creb"), "{line}");
        let Command::Replay(r) = parse(&argv).unwrap() else {
            panic!("not replay")
        };
        assert_eq!(r.speed, 2.5);
        assert_eq!(r.limit_requests, Some(10_000));
        assert_eq!(
            r.output.output_dir.as_deref(),
            Some(Path::new("/out/r/auth"))
        );
        assert!(r.output.quiet);
    }

    #[test]
    fn pushes_get_fresh_seeds_and_prefixed_repositories() {
        let f = file(TEXT);
        let seeds: Vec<u64> = [(0, 0), (0, 1), (1, 0), (1, 1)]
            .iter()
            .map(|&(round, rep)| {
                let cell = Cell {
                    experiment: 1,
                    registry: 1,
                    round,
                    rep,
                };
                let Command::Push(p) =
                    parse(&cell_argv(&f, &cell, Path::new("/o")).unwrap()).unwrap()
                else {
                    panic!("not push")
                };
                assert_eq!(p.repo.as_str(), "creb/push");
                assert_eq!(p.images, 3);
                p.seed
            })
            .collect();
        assert_eq!(seeds, vec![16, 17, 18, 19]);
        let cell = Cell {
            experiment: 2,
            registry: 1,
            round: 0,
            rep: 0,
        };
        let Command::Pull(p) = parse(&cell_argv(&f, &cell, Path::new("/o")).unwrap()).unwrap()
        else {
            panic!("not pull")
        };
        assert_eq!(p.repo.as_str(), "creb/push");
    }

    #[test]
    fn bad_values_fail_with_the_flag_named() {
        let f = file(&TEXT.replace("layer_size = \"64KiB\"", "layer_size = \"64XB\""));
        let cell = Cell {
            experiment: 1,
            registry: 0,
            round: 0,
            rep: 0,
        };
        let e = parse(&cell_argv(&f, &cell, Path::new("/o")).unwrap()).unwrap_err();
        assert!(e.contains("--layer-size"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn registry_args_parse_credentials() {
        let f = file(TEXT);
        let a = registry_args(&f.registries[1]).unwrap();
        assert_eq!(a.auth.username.as_deref(), Some("bench"));
        assert_eq!(
            a.auth.password_cmd.as_deref(),
            Some("printf %s \"$BENCH_PW\"")
        );
        let a = registry_args(&f.registries[0]).unwrap();
        assert_eq!(a.auth.username, None);
    }
}
