//! External programs that give credentials (password commands, credential helpers): run
//! once, with a timeout, their output returned but never logged or put in an error.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// The text without its trailing line ends.
pub(crate) fn strip_newline(mut s: String) -> String {
    while s.ends_with('\n') || s.ends_with('\r') {
        s.pop();
    }
    s
}

/// Runs `program args…` with `input` on stdin; returns stdout, or an error that says how it
/// failed but never what it printed.
pub(crate) async fn run_command(
    program: &str,
    args: &[&str],
    input: Option<&str>,
    timeout: Duration,
) -> Result<(bool, String), String> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot be started: {e}"))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|e| format!("cannot be given its input: {e}"))?;
    }
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| {
            format!(
                "did not finish within {}",
                humantime::format_duration(timeout)
            )
        })?
        .map_err(|e| format!("failed: {e}"))?;
    let stdout = String::from_utf8(output.stdout)
        .map_err(|_| "printed something that is not UTF-8".to_owned())?;
    Ok((output.status.success(), stdout))
}
