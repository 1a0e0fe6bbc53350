//! The process limits a load command needs before it starts: open files for its connections.
//! Every request in flight holds a socket, so `--concurrency N` needs about N descriptors
//! per endpoint besides the few the process keeps open (results, the trace, the spool). A soft
//! limit below that is raised as far as the hard one allows, and said; a hard limit below it
//! refuses the run before anything is sent, with the numbers, rather than letting connections
//! fail part way with "too many open files".

/// Descriptors a run keeps open besides its connections: standard streams, result files, the
/// trace and its spool, the runtime's own (epoll, timerfd, eventfd), the metrics endpoint.
pub const RESERVED: u64 = 64;

/// What [`ensure_open_files`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenFiles {
    /// The soft limit was already enough.
    Enough,
    /// The soft limit was raised from one value to another.
    Raised { from: u64, to: u64 },
}

/// Descriptors needed for `in_flight` requests on each of `endpoints`.
pub fn needed(in_flight: usize, endpoints: usize) -> u64 {
    (in_flight as u64).saturating_mul(endpoints.max(1) as u64) + RESERVED
}

/// Makes sure the process may open `needed` files: raises the soft limit (up to the hard
/// one) when it is lower; refuses when the hard limit is lower, naming `flag` and the numbers.
#[cfg(target_os = "linux")]
pub fn ensure_open_files(needed: u64, flag: &str) -> anyhow::Result<OpenFiles> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    decide(needed, soft, hard, flag)?;
    if soft >= needed {
        return Ok(OpenFiles::Enough);
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .map_err(|e| anyhow::anyhow!("cannot raise the open-file limit from {soft} to {hard}: {e}"))?;
    Ok(OpenFiles::Raised {
        from: soft,
        to: hard,
    })
}

/// Elsewhere nothing is checked.
#[cfg(not(target_os = "linux"))]
pub fn ensure_open_files(_needed: u64, _flag: &str) -> anyhow::Result<OpenFiles> {
    Ok(OpenFiles::Enough)
}

/// The refusal, when even the hard limit is below what is needed.
fn decide(needed: u64, soft: u64, hard: u64, flag: &str) -> anyhow::Result<()> {
    if hard >= needed {
        return Ok(());
    }
    anyhow::bail!(
        "{flag} needs about {needed} open files (a socket per request in flight and {RESERVED} \
         more), but this process may open at most {hard} (ulimit -Hn; soft limit {soft}): \
         lower {flag}, or raise the hard limit (e.g. LimitNOFILE= in a systemd unit, nofile in \
         /etc/security/limits.conf)"
    )
}

/// Raises the limit for a run and says so on stderr unless `quiet`.
pub fn prepare(in_flight: usize, endpoints: usize, flag: &str, quiet: bool) -> anyhow::Result<()> {
    if let OpenFiles::Raised { from, to } = ensure_open_files(needed(in_flight, endpoints), flag)? {
        if !quiet {
            eprintln!(
                "creb-rs: raised the open-file limit from {from} to {to} for {flag} {in_flight}"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hard_limit_below_the_need_is_refused_with_the_numbers() {
        assert_eq!(needed(512, 1), 576);
        assert_eq!(needed(100, 3), 364);
        assert!(decide(576, 256, 1024, "--concurrency").is_ok());
        let e = decide(25_064, 1024, 20_000, "--concurrency")
            .unwrap_err()
            .to_string();
        for part in ["25064", "20000", "--concurrency", "ulimit -Hn"] {
            assert!(e.contains(part), "{e}");
        }
    }
}
