//! The global flags mean the same on every command, checked over a table of every
//! subcommand run as a user runs it (the binary, against a real docker-registry): `--quiet`
//! prints nothing on success, `--color never` and `NO_COLOR` print no escape code even at
//! `-v`, `--json` prints exactly one JSON document (a result summary validates against
//! `schema/summary.schema.json`), and a `--fail-if` that holds exits 3 with its verdict in
//! `summary.json`.

use std::path::{Path, PathBuf};

use crate::common::{run_bin, summary_json, BinOutput, Registry};

const ESC: char = '\u{1b}';

/// What `--json` prints for a command.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Json {
    /// A result summary: validated against `schema/summary.schema.json`.
    Summary,
    /// A JSON document of the command's own (analysis, verdicts, cells).
    Document,
    /// The command has no `--json` (its output is its product, or a file).
    Absent,
}

/// One subcommand as the table runs it. `{out}` in an argument is replaced by a fresh
/// directory per invocation (result directories are never reused).
struct Row {
    name: &'static str,
    args: Vec<String>,
    json: Json,
    /// The command's product is its stdout (completion scripts, manual pages): `--quiet`
    /// silences its notes, not that.
    product_on_stdout: bool,
}

fn row(name: &'static str, args: &[&str], json: Json) -> Row {
    Row {
        name,
        args: args.iter().map(|a| a.to_string()).collect(),
        json,
        product_on_stdout: false,
    }
}

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/summary.schema.json"
    ))
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

struct Scratch {
    dir: tempfile::TempDir,
    next: std::cell::Cell<u32>,
}

impl Scratch {
    fn fresh(&self) -> PathBuf {
        let n = self.next.get();
        self.next.set(n + 1);
        self.dir.path().join(format!("out-{n}"))
    }

    fn run(&self, row: &Row, extra: &[&str], env: &[(&str, &str)]) -> BinOutput {
        let out = self.fresh();
        let mut args: Vec<String> = row
            .args
            .iter()
            .map(|a| a.replace("{out}", out.to_str().unwrap()))
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_bin(&args, None, env);
        assert_eq!(
            r.code, 0,
            "{} {extra:?}: exit {}\n{}",
            row.name, r.code, r.stderr
        );
        r
    }
}

fn push_args(registry: &Registry, repo: &str) -> Vec<String> {
    [
        "push",
        "--registry",
        &registry.url,
        "--repo",
        repo,
        "--layers",
        "2",
        "--layer-size",
        "64KiB",
        "--output-dir",
        "{out}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn result_dir(scratch: &Scratch, args: &[String]) -> PathBuf {
    let out = scratch.fresh();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{out}", out.to_str().unwrap()))
        .chain(["--quiet".to_string()])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    out
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn global_flags_mean_the_same_on_every_command() {
    let registry = Registry::start();
    let scratch = Scratch {
        dir: tempfile::tempdir().unwrap(),
        next: std::cell::Cell::new(0),
    };
    let trace = fixture("sample-trace.json");
    let push = push_args(&registry, "conventions/app");
    let first = result_dir(&scratch, &push);
    let second = result_dir(&scratch, &push);
    let (a, b) = (first.to_str().unwrap(), second.to_str().unwrap());
    let experiment = scratch.dir.path().join("bench.toml");
    std::fs::write(
        &experiment,
        format!(
            "[[registry]]\nname = \"local\"\nurl = \"{}\"\n\n[[experiment]]\nname = \"push\"\n\
             kind = \"push\"\nlayers = 1\nlayer_size = \"8KiB\"\n",
            registry.url
        ),
    )
    .unwrap();
    let experiment = experiment.to_str().unwrap();
    let sample = "{out}.json";
    let log = scratch.dir.path().join("registry.log");
    std::fs::write(
        &log,
        r#"{"http.request.method":"GET","http.request.uri":"/v2/a/b/manifests/t","http.request.remoteaddr":"10.0.0.1:5","http.response.duration":"2ms","http.response.status":200,"http.response.written":500,"msg":"response completed","time":"2026-11-24T22:53:52.398Z"}"#,
    )
    .unwrap();
    let log = log.to_str().unwrap();

    let mut rows = vec![
        Row {
            name: "push",
            args: push.clone(),
            json: Json::Summary,
            product_on_stdout: false,
        },
        row(
            "pull",
            &[
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "conventions/app",
                "--output-dir",
                "{out}",
            ],
            Json::Summary,
        ),
        row(
            "replay",
            &[
                "replay",
                &trace,
                "--registry",
                &registry.url,
                "--limit-requests",
                "30",
                // The row holds the output conventions; a failed operation (docker-registry's
                // tag race, now and then) is not what it tests.
                "--max-errors",
                "100%",
                "--output-dir",
                "{out}",
            ],
            Json::Summary,
        ),
        row(
            "capacity",
            &[
                "capacity",
                &trace,
                "--registry",
                &registry.url,
                "--limit-requests",
                "30",
                "--slo",
                "error_rate <= 100%",
                "--max-speed",
                "1",
                "--step",
                "200ms",
                "--step-warmup",
                "0s",
                "--output-dir",
                "{out}",
            ],
            Json::Document,
        ),
        row(
            "merge",
            &["merge", a, "--output-dir", "{out}"],
            Json::Summary,
        ),
        row("report", &["report", a], Json::Summary),
        row("compare", &["compare", a, b], Json::Document),
        row("trace stats", &["trace", "stats", &trace], Json::Document),
        row(
            "trace sample",
            &[
                "trace",
                "sample",
                &trace,
                "--method",
                "first-n",
                "--requests",
                "10",
                "--out",
                sample,
            ],
            Json::Document,
        ),
        row(
            "trace synth",
            &["trace", "synth", "--requests", "50", "--out", sample],
            Json::Document,
        ),
        row(
            "trace validate",
            &["trace", "validate", &trace],
            Json::Document,
        ),
        row(
            "trace import",
            &[
                "trace",
                "import",
                log,
                "--format",
                "distribution",
                "-o",
                sample,
            ],
            Json::Document,
        ),
        row(
            "simulate cache",
            &["simulate", "cache", &trace, "--memory", "1MiB"],
            Json::Document,
        ),
        row(
            "simulate prefetch",
            &["simulate", "prefetch", &trace],
            Json::Document,
        ),
        row("cost", &["cost", a, "--provider", "ecr"], Json::Document),
        row(
            "run",
            &["run", experiment, "--output-dir", "{out}"],
            Json::Document,
        ),
    ];
    for (name, args) in [
        ("completions", vec!["completions", "bash"]),
        ("man", vec!["man"]),
    ] {
        let mut r = row(name, &args, Json::Absent);
        r.product_on_stdout = true;
        rows.push(r);
    }

    // Every subcommand the CLI has is in the table (a new one cannot slip past it).
    let help = run_bin(&["--help"], None, &[]);
    let listed: Vec<&str> = help
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    for command in &listed {
        assert!(
            rows.iter()
                .any(|r| r.name.split(' ').next() == Some(command)),
            "`{command}` has no row in the table"
        );
    }
    assert!(listed.len() >= 12, "{listed:?}");

    let validator = schema();
    for r in &rows {
        // --quiet: nothing at all on success (a product on stdout excepted).
        let q = scratch.run(r, &["--quiet"], &[]);
        assert_eq!(q.stderr, "", "{} --quiet wrote on stderr", r.name);
        if r.product_on_stdout {
            assert!(!q.stdout.is_empty(), "{} --quiet lost its product", r.name);
        } else {
            assert_eq!(q.stdout, "", "{} --quiet wrote on stdout", r.name);
        }

        // No escape code with --color never, nor with NO_COLOR, even with diagnostics on.
        for (extra, env) in [
            (&["--color", "never", "-v"][..], &[][..]),
            (&["-v"][..], &[("NO_COLOR", "1")][..]),
            (&["--color", "auto", "-v"][..], &[("NO_COLOR", "")][..]),
        ] {
            let o = scratch.run(r, extra, env);
            assert!(
                !o.stdout.contains(ESC) && !o.stderr.contains(ESC),
                "{} {extra:?} {env:?} printed an escape code:\n{}",
                r.name,
                o.stderr
            );
        }

        // --json: one document on stdout; a summary matches the schema.
        if r.json != Json::Absent {
            let j = scratch.run(r, &["--json"], &[]);
            let doc: serde_json::Value = serde_json::from_str(&j.stdout)
                .unwrap_or_else(|e| panic!("{} --json: {e}\n{}", r.name, j.stdout));
            if r.json == Json::Summary {
                let errors: Vec<String> = validator
                    .iter_errors(&doc)
                    .map(|e| format!("{e} at {}", e.instance_path))
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{} --json: {}",
                    r.name,
                    errors.join("\n")
                );
            }
        }
    }

    // The check above can fail: --color always does colour the diagnostics.
    let coloured = scratch.run(&rows[0], &["--color", "always", "-v"], &[]);
    assert!(coloured.stderr.contains(ESC), "{}", coloured.stderr);
}

#[test]
fn a_threshold_that_holds_exits_3_with_its_verdict_in_the_summary() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("push");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "thresholds/app",
            "--layers",
            "1",
            "--layer-size",
            "16KiB",
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
            "--fail-if",
            "rps < 1000000000",
            "--fail-if",
            "error_rate > 50%",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("rps < 1000000000"), "{}", r.stderr);
    let summary = summary_json(&out);
    let verdicts = summary["thresholds"].as_array().expect("thresholds");
    assert_eq!(verdicts.len(), 2, "{verdicts:?}");
    assert_eq!(verdicts[0]["expression"], "rps < 1000000000");
    assert_eq!(verdicts[0]["verdict"], "held");
    assert_eq!(verdicts[1]["verdict"], "clear");
    assert!(verdicts[0]["value"].as_f64().unwrap() > 0.0);
    // The report shows them, text and HTML.
    let text = run_bin(&["report", out.to_str().unwrap()], None, &[]);
    assert!(
        text.stdout
            .contains("threshold 'rps < 1000000000': HELD (fails the run), measured"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("threshold 'error_rate > 50%': clear"));
    let html = dir.path().join("report.html");
    let r = run_bin(
        &[
            "report",
            out.to_str().unwrap(),
            "--format",
            "html",
            "-o",
            html.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let html = std::fs::read_to_string(html).unwrap();
    assert!(
        html.contains("Thresholds: 1 of 2 held"),
        "thresholds section missing"
    );
    // Without --format, `-o FILE` names the format by its extension; another is refused and
    // nothing is written.
    let report_to = |name: &str| {
        let file = dir.path().join(name);
        let r = run_bin(
            &[
                "report",
                out.to_str().unwrap(),
                "-o",
                file.to_str().unwrap(),
            ],
            None,
            &[],
        );
        (r, std::fs::read_to_string(&file).ok())
    };
    let (r, page) = report_to("by-extension.html");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(page.unwrap().starts_with("<!DOCTYPE html>"));
    let (r, json) = report_to("by-extension.json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&json.unwrap()).unwrap();
    assert_eq!(json["command"], summary["command"]);
    let (r, csv) = report_to("by-extension.csv");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(csv.unwrap().lines().count() > 1);
    let (r, text) = report_to("by-extension.txt");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(text.unwrap().contains("threshold 'rps < 1000000000'"));
    let (r, nothing) = report_to("by-extension.pdf");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("cannot tell the format") && r.stderr.contains("--format"),
        "{}",
        r.stderr
    );
    assert!(
        nothing.is_none(),
        "nothing is written for an unknown extension"
    );

    // A failed operation outranks a threshold: a dead registry is exit 2, never 3.
    let dead = format!("http://127.0.0.1:{}", crate::common::free_port());
    let r = run_bin(
        &[
            "push",
            "--registry",
            &dead,
            "--repo",
            "x/y",
            "--quiet",
            "--fail-if",
            "rps < 1000000000",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
}

/// The heading each flag of `creb-rs COMMAND --help` is listed under.
fn headings(command: &str) -> std::collections::HashMap<String, String> {
    let help = run_bin(&[command, "--help"], None, &[]);
    assert_eq!(help.code, 0, "{}", help.stderr);
    let mut heading = String::new();
    let mut map = std::collections::HashMap::new();
    for line in help.stdout.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            heading = line.trim_end_matches(':').to_string();
        } else if let Some(flag) = line
            .trim_start()
            .split([' ', ','])
            .find(|w| w.starts_with("--"))
        {
            if line.trim_start().starts_with('-') {
                map.entry(flag.to_string()).or_insert(heading.clone());
            }
        }
    }
    map
}

/// Every command and subcommand of the command line, as argument lists.
fn every_command() -> Vec<Vec<String>> {
    use clap::CommandFactory;
    let mut out = vec![Vec::new()];
    let cli = creb::Cli::command();
    for sub in cli.get_subcommands() {
        out.push(vec![sub.get_name().to_owned()]);
        for verb in sub.get_subcommands() {
            out.push(vec![sub.get_name().to_owned(), verb.get_name().to_owned()]);
        }
    }
    out
}

#[test]
fn h_of_every_command_fits_in_40_lines() {
    let commands = every_command();
    assert!(commands.len() > 15, "{commands:?}");
    for mut command in commands {
        command.push("-h".to_owned());
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let short = run_bin(&args, None, &[]);
        assert_eq!(short.code, 0, "{args:?}: {}", short.stderr);
        let lines = short.stdout.lines().count();
        assert!(lines <= 40, "{args:?} is {lines} lines:\n{}", short.stdout);
        // The rest is in --help.
        let long = run_bin(&[&args[..args.len() - 1], &["--help"]].concat(), None, &[]);
        assert!(long.stdout.lines().count() >= lines, "{args:?}");
    }
}

#[test]
fn the_top_level_help_names_every_verb_of_every_command() {
    use clap::CommandFactory;
    let top = run_bin(&["-h"], None, &[]).stdout;
    let cli = creb::Cli::command();
    for sub in cli.get_subcommands() {
        let line = top
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(sub.get_name()))
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        for verb in sub.get_subcommands() {
            if verb.get_name() == "help" {
                continue;
            }
            assert!(
                line.contains(verb.get_name()),
                "`{}` in the top-level help does not name `{}`: {line}",
                sub.get_name(),
                verb.get_name()
            );
        }
    }
}

#[test]
fn help_groups_flags_by_what_they_do_and_h_is_short() {
    for command in ["push", "pull", "replay"] {
        let h = headings(command);
        let under = |flag: &str| h.get(flag).map(String::as_str).unwrap_or("(absent)");
        assert_eq!(under("--registry"), "Registry & TLS", "{command}");
        assert_eq!(under("--ca-cert"), "Registry & TLS", "{command}");
        assert_eq!(under("--username"), "Authentication", "{command}");
        assert_eq!(under("--concurrency"), "Workload", "{command}");
        assert_eq!(under("--output-dir"), "Output & thresholds", "{command}");
        assert_eq!(under("--fail-if"), "Output & thresholds", "{command}");
        assert_eq!(under("--quiet"), "Options", "{command}");
        assert_eq!(under("--threads"), "Runtime", "{command}");
        // Nothing after the credentials falls under their heading by accident.
        for (flag, heading) in &h {
            if heading == "Authentication" {
                assert!(
                    [
                        "--username",
                        "--password-stdin",
                        "--password-cmd",
                        "--docker-config",
                        "--anonymous",
                        "--credential-timeout"
                    ]
                    .contains(&flag.as_str()),
                    "{command}: {flag} under Authentication"
                );
            }
        }
        let short = run_bin(&[command, "-h"], None, &[]);
        assert!(short.stdout.contains("Examples"), "{command} -h");
    }
    let h = headings("replay");
    assert_eq!(h["--mode"], "Timing");
    assert_eq!(h["--speed"], "Timing");
    assert_eq!(h["--shard"], "Several hosts");
    assert_eq!(h["--route"], "Several endpoints");
    assert_eq!(h["--strict"], "Output & thresholds");
    // Commands that send nothing do not offer --threads.
    for command in ["merge", "report", "compare", "cost"] {
        assert!(!headings(command).contains_key("--threads"), "{command}");
    }
}

/// Runs `args` with a stdout whose reader is gone before the first byte (as in
/// `creb-rs man | head -0`): the exit status and stderr.
fn with_closed_stdout(args: &[&str]) -> (i32, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code().unwrap_or(-1), stderr)
}

#[test]
fn a_closed_stdout_ends_every_command_quietly_with_status_0() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.json");
    let synth = run_bin(
        &[
            "trace",
            "synth",
            "--profile",
            "dal",
            "--requests",
            "2k",
            "-o",
            trace.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(synth.code, 0, "{}", synth.stderr);
    let t = trace.to_str().unwrap();
    for args in [
        vec!["man"],
        vec!["completions", "bash"],
        vec!["--help"],
        vec!["trace", "stats", t],
        vec!["trace", "stats", t, "--json"],
        vec!["simulate", "cache", t, "--sweep", "1%,2%"],
    ] {
        let (code, stderr) = with_closed_stdout(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}

/// A flag given to a command that does not take it, but others do, is said to be theirs:
/// `push --verify` once got clap's nearest spelling, `--version`, in its tip and its usage.
#[test]
fn a_flag_of_other_commands_is_said_to_be_theirs() {
    let r = run_bin(
        &[
            "push",
            "--registry",
            "http://127.0.0.1:9",
            "--repo",
            "a/b",
            "--layers",
            "1",
        ]
        .iter()
        .chain(&["--layer-size", "1KiB", "--verify", "none"])
        .copied()
        .collect::<Vec<_>>(),
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("'--verify' is a flag of `capacity`, `pull`, `replay`, not of `push`"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("--version"), "{}", r.stderr);
    let r = run_bin(
        &["trace", "stats", "t.json", "--sizes-from", "x"],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("is a flag of `trace import`, not of `trace stats`"),
        "{}",
        r.stderr
    );
    // The command's own flag before its name: where it goes, not that it is "not" its own.
    let r = run_bin(
        &[
            "--threads",
            "1",
            "replay",
            "t.json",
            "--registry",
            "http://127.0.0.1:9",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("'--threads' is a flag of `replay`: give it after `replay`"),
        "{}",
        r.stderr
    );
    // A misspelling no command takes keeps clap's tip.
    let r = run_bin(&["pull", "--registy", "http://127.0.0.1:9"], None, &[]);
    assert!(r.stderr.contains("--registry"), "{}", r.stderr);
}
