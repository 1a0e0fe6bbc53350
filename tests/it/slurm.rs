//! The Slurm recipe of `deploy/slurm/` on a real one-node Slurm cluster (Debian's
//! `slurm-wlm` and `munge`, installed by scripts/setup): `munged`, `slurmctld` and `slurmd`
//! started here with their own key, socket, ports and state under a temporary directory,
//! and stopped by the PIDs in their pid files. `deploy/slurm/submit` runs the prewarm job,
//! a 4-task replay array and the merge job; the merged result accounts for every record of
//! the trace exactly once and has the counts of one instance replaying it alone. CI
//! requires it (`CREB_REQUIRE_SLURM=1`); elsewhere it is skipped without Slurm or root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{free_port, run_bin, summary_json, Registry};

const TOOLS: [&str; 6] = [
    "/usr/sbin/munged",
    "/usr/sbin/mungekey",
    "/usr/sbin/slurmctld",
    "/usr/sbin/slurmd",
    "/usr/bin/sbatch",
    "/usr/bin/sinfo",
];

fn required() -> bool {
    std::env::var("CREB_REQUIRE_SLURM").is_ok_and(|v| v == "1")
}

fn output(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a command");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A one-node cluster; its daemons stop when it is dropped.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
}

impl Cluster {
    fn start() -> Option<Cluster> {
        if let Some(missing) = TOOLS.iter().find(|t| !Path::new(t).is_file()) {
            assert!(
                !required(),
                "{missing} is missing (scripts/setup installs slurm-wlm and munge)"
            );
            eprintln!("skipped: {missing} is missing");
            return None;
        }
        // SlurmUser=root: the daemons and the jobs run as the user running the test.
        if output(Command::new("id").arg("-u")) != "0" {
            assert!(!required(), "the Slurm test runs its cluster as root");
            eprintln!("skipped: the Slurm test runs its cluster as root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(p(sub)).unwrap();
        }
        let key = p("munge.key");
        let made = Command::new("/usr/sbin/mungekey")
            .arg("-c")
            .arg("-k")
            .arg(&key)
            .status()
            .unwrap();
        assert!(made.success(), "mungekey");
        let socket = p("munge.sock");
        let munged = Command::new("/usr/sbin/munged")
            .arg("-f")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", p("munged.pid").display()))
            .arg(format!("--log-file={}", p("log/munged.log").display()))
            .arg(format!("--seed-file={}", p("munged.seed").display()))
            .status()
            .unwrap();
        assert!(munged.success(), "munged did not start");
        let host = output(Command::new("hostname").arg("-s"));
        let cpus = output(&mut Command::new("nproc"));
        let conf = p("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=creb\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nAuthInfo=socket={socket}\nCredType=cred/munge\n\
                 SlurmctldPort={ctld}\nSlurmdPort={d}\n\
                 StateSaveLocation={state}\nSlurmdSpoolDir={spool}\n\
                 SlurmctldPidFile={dir}/slurmctld.pid\nSlurmdPidFile={dir}/slurmd.pid\n\
                 SlurmctldLogFile={dir}/log/slurmctld.log\nSlurmdLogFile={dir}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
                 JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
                 MpiDefault=none\nReturnToService=2\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN\n\
                 PartitionName=bench Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8\n",
                socket = socket.display(),
                ctld = free_port(),
                d = free_port(),
                state = p("state").display(),
                spool = p("spool").display(),
                dir = dir.path().display(),
            ),
        )
        .unwrap();
        let cluster = Cluster { dir, conf };
        for daemon in ["/usr/sbin/slurmctld", "/usr/sbin/slurmd"] {
            let started = cluster
                .command(daemon)
                .arg("-f")
                .arg(&cluster.conf)
                .status();
            assert!(started.unwrap().success(), "{daemon} did not start");
        }
        // The node must be idle (not drained, not down) before jobs can run.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = output(cluster.command("/usr/bin/sinfo").args(["-h", "-o", "%T"]));
            if state == "idle" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the node is '{state}', not idle:\n{}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        Some(cluster)
    }

    /// A Slurm command of this cluster.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for name in ["slurmctld.log", "slurmd.log", "munged.log"] {
            let text =
                std::fs::read_to_string(self.dir.path().join("log").join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            all.push_str(&format!("== {name}\n"));
            for l in tail.into_iter().rev() {
                all.push_str(l);
                all.push('\n');
            }
        }
        all
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for name in ["slurmd.pid", "slurmctld.pid", "munged.pid"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.path().join(name)) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn a_job_array_replays_the_trace_and_the_merge_has_every_record_once() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let registry = Registry::start();
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("run");
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let flags = "--mode stress --concurrency 4";
    let submitted = cluster
        .command(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/slurm/submit"))
        .env("CREB", env!("CARGO_BIN_EXE_creb-rs"))
        .env("TRACE", trace)
        .env("REGISTRY", &registry.url)
        .env("OUT", &out)
        .env("SHARDS", "4")
        .env("SEED", "7")
        .env("START_LEAD", "5")
        .env("CREB_FLAGS", flags)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&submitted.stdout);
    assert!(
        submitted.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    assert!(said.contains("(4 tasks)"), "{said}");

    let merged = out.join("merged");
    let deadline = Instant::now() + Duration::from_secs(240);
    while !merged.join("report.html").is_file() {
        let queue = output(
            cluster
                .command("/usr/bin/squeue")
                .args(["-h", "-o", "%i %T %r"]),
        );
        if queue.is_empty() && !merged.join("report.html").is_file() {
            // Everything ended and there is no merged result: show why.
            let mut logs = String::new();
            for entry in std::fs::read_dir(out.join("logs")).into_iter().flatten() {
                let path = entry.unwrap().path();
                logs.push_str(&format!(
                    "== {}\n{}\n",
                    path.display(),
                    std::fs::read_to_string(&path).unwrap_or_default()
                ));
            }
            panic!(
                "the jobs ended without a merged result:\n{logs}{}",
                cluster.logs()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the jobs did not finish: {queue}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Every task wrote its shard, from the one shared start the prewarm job set.
    let start_at = std::fs::read_to_string(out.join("start-at")).unwrap();
    let start_at = humantime::parse_rfc3339(start_at.trim()).expect("RFC 3339");
    for i in 0..4 {
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("shard-{i}")).join("meta.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(meta["shard"]["index"], i, "{meta}");
        assert_eq!(meta["shard"]["count"], 4, "{meta}");
        let task_start = humantime::parse_rfc3339_weak(meta["start_at"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {meta}"));
        assert_eq!(task_start, start_at, "{meta}");
    }
    let s = summary_json(&merged);
    let t = &s["trace"];
    let skipped: u64 = t["skipped"].as_object().unwrap().values().map(n).sum();
    assert_eq!(
        n(&t["records"]),
        n(&t["replayed"]) + n(&t["folded"]) + skipped,
        "{t}"
    );
    registry.assert_no_errors_but_tag_races(&s, "merged shards");
    assert!(std::fs::read_to_string(merged.join("report.txt"))
        .unwrap()
        .contains("start skew"));

    // One instance replaying the whole trace alone: the same records, the same operations.
    let single = scratch.path().join("single");
    let mut args = vec![
        "replay",
        trace,
        "--registry",
        &registry.url,
        "--phase",
        "run",
        "--seed",
        "7",
        "--output-dir",
        single.to_str().unwrap(),
        "--quiet",
    ];
    args.extend(flags.split(' '));
    let r = run_bin(&args, None, &[]);
    let alone = summary_json(&single);
    registry.assert_exit_but_tag_races(r.code, &alone, &format!("one instance: {}", r.stderr));
    assert_eq!(alone["trace"]["records"], t["records"]);
    assert_eq!(alone["trace"]["replayed"], t["replayed"]);
    let ops = |s: &serde_json::Value| -> Vec<(String, u64)> {
        s["operations"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), n(&v["count"])))
            .collect()
    };
    assert_eq!(ops(&s), ops(&alone), "the shards together and one instance");
    assert_eq!(s["totals"]["requests"], alone["totals"]["requests"]);
    drop(registry);
    drop(cluster);
}
