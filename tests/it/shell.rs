//! The shell side of creb-rs, with the real tools: the bash completion script loads and
//! registers itself, the zsh one parses (`zsh -n`), the fish one parses where fish is
//! installed, and every manual page renders with man-db (`man -l`) without a warning.

use std::path::Path;
use std::process::Command;

use crate::common::run_bin;

fn tool(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn completion(dir: &Path, shell: &str) -> std::path::PathBuf {
    let r = run_bin(&["completions", shell], None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.len() > 1000, "{shell}: {}", r.stdout);
    let path = dir.join(format!("creb-rs.{shell}"));
    std::fs::write(&path, &r.stdout).unwrap();
    path
}

#[test]
fn bash_completions_load_and_complete_subcommands_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let script = completion(dir.path(), "bash");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Loaded into a shell, it registers for creb-rs, and completing `creb-rs re` and
    // `creb-rs replay --con` and `creb-rs trace st` offer what exists.
    let probe = format!(
        "source {}; complete -p creb-rs; \
         COMP_WORDS=(creb-rs re); COMP_CWORD=1; COMP_LINE='creb-rs re'; COMP_POINT=10; \
         _creb__rs creb-rs re creb-rs; echo \"subcommands: ${{COMPREPLY[*]}}\"; \
         COMP_WORDS=(creb-rs replay --con); COMP_CWORD=2; COMP_LINE='creb-rs replay --con'; \
         COMP_POINT=20; _creb__rs creb-rs --con replay; echo \"flags: ${{COMPREPLY[*]}}\"; \
         COMP_WORDS=(creb-rs trace st); COMP_CWORD=2; COMP_LINE='creb-rs trace st'; \
         COMP_POINT=16; _creb__rs creb-rs st trace; echo \"trace: ${{COMPREPLY[*]}}\"",
        script.display()
    );
    let out = Command::new("bash").args(["-c", &probe]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("complete -") && text.contains("creb-rs"),
        "{text}"
    );
    assert!(text.contains("replay") && text.contains("report"), "{text}");
    assert!(
        text.contains("flags: --connect-timeout --concurrency"),
        "{text}"
    );
    assert!(text.contains("trace: stats"), "{text}");
}

#[test]
fn zsh_and_fish_completions_parse() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        tool("zsh"),
        "zsh is not installed (scripts/setup installs it)"
    );
    let script = completion(dir.path(), "zsh");
    let check = Command::new("zsh").arg("-n").arg(&script).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // fish is optional here; its script is generated either way.
    let script = completion(dir.path(), "fish");
    if tool("fish") {
        let check = Command::new("fish")
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    completion(dir.path(), "powershell");
}

/// What `man -l` says on stderr when it renders `page`: troff's warnings.
fn man_warnings(page: &Path) -> String {
    assert!(
        tool("man"),
        "man is not installed (scripts/setup installs man-db)"
    );
    let out = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .env("MAN_DISABLE_SECCOMP", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "man -l {} failed", page.display());
    assert!(
        !out.stdout.is_empty(),
        "{} rendered nothing",
        page.display()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn every_manual_page_renders_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("creb-rs.1");
    let r = run_bin(&["man"], None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(&top, &r.stdout).unwrap();
    assert_eq!(man_warnings(&top), "", "creb-rs.1");
    assert!(
        r.stdout.contains("Exit status"),
        "the exit statuses are in the page"
    );

    let pages = dir.path().join("pages");
    let r = run_bin(&["man", "--dir", pages.to_str().unwrap()], None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut names: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for expected in [
        "creb-rs.1",
        "creb-rs-replay.1",
        "creb-rs-trace-stats.1",
        "creb-rs-simulate-cache.1",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    for name in &names {
        assert_eq!(man_warnings(&pages.join(name)), "", "{name}");
    }
}
