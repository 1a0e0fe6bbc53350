//! The many-hosts recipe of `docs/distributed.md`, on one machine: each "host" is a network
//! namespace with its own address, joined to the root namespace by a veth pair on a bridge;
//! the registry listens on the bridge's address in the root namespace. One prewarm from the
//! root namespace, then N instances of the real binary run their shards concurrently with
//! the same seed and `--start-at`; `merge` must account for every trace record exactly once,
//! and every shard reports its start skew.
//!
//! The addresses are in 10.231.X.0/24, X claimed per test run by creating the bridge
//! `crebbrX` (interface names are unique, so concurrent runs never share a subnet); nothing
//! routes beyond the bridge. Namespaces, veths and the bridge are removed by a guard even
//! when the test fails. Where namespaces cannot be created (no privilege, no `ip`), the test
//! says so and passes — unless `CREB_REQUIRE_NETNS=1` (set by CI), where that is a failure.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;

use crate::common::{link_race_500s, tag_race_500s_in};

const SHARDS: usize = 3;
const SEED: &str = "7";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The test network; everything in it is deleted on drop.
struct Net {
    subnet: u8,
    bridge: String,
    namespaces: Vec<String>,
}

impl Net {
    fn host_addr(&self) -> String {
        format!("10.231.{}.1", self.subnet)
    }

    /// Claims a subnet (by creating its bridge) and adds `n` namespaces to it.
    fn create(n: usize) -> Result<Net, String> {
        let pid = std::process::id() as usize;
        let mut last = String::new();
        for attempt in 0..40 {
            let subnet = (16 + (pid + attempt * 7) % 230) as u8;
            let bridge = format!("crebbr{subnet}");
            if let Err(e) = ip(&["link", "add", &bridge, "type", "bridge"]) {
                if e.contains("exists") {
                    continue;
                }
                return Err(e);
            }
            let mut net = Net {
                subnet,
                bridge,
                namespaces: Vec::new(),
            };
            // Someone else may use this subnet without our naming: leave it to them.
            let used = Command::new("ip")
                .args([
                    "-4",
                    "-o",
                    "addr",
                    "show",
                    "to",
                    &format!("10.231.{subnet}.0/24"),
                ])
                .output()
                .map(|o| !o.stdout.is_empty())
                .unwrap_or(true);
            if used {
                last = format!("10.231.{subnet}.0/24 is in use");
                continue; // dropping `net` deletes the bridge
            }
            net.setup(n)?;
            return Ok(net);
        }
        Err(format!("no free test subnet ({last})"))
    }

    fn setup(&mut self, n: usize) -> Result<(), String> {
        let host = format!("{}/24", self.host_addr());
        ip(&["addr", "add", &host, "dev", &self.bridge])?;
        ip(&["link", "set", &self.bridge, "up"])?;
        for i in 0..n {
            let ns = format!("creb{}-{i}", self.subnet);
            let _ = ip(&["netns", "del", &ns]); // a leftover of a killed run
            ip(&["netns", "add", &ns])?;
            self.namespaces.push(ns.clone());
            let (outer, inner) = (
                format!("cv{}h{i}", self.subnet),
                format!("cv{}n{i}", self.subnet),
            );
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &self.bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            let addr = format!("10.231.{}.{}/24", self.subnet, 10 + i);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end, and with it the pair.
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// A `docker-registry` listening on one address; killed on drop.
struct AddrRegistry {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl AddrRegistry {
    fn start(addr: &str) -> AddrRegistry {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind((addr, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port on the bridge address")
            .port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {addr}:{port}\n  secret: creb-rs-test-http-secret\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let bin = std::env::var("CREB_REGISTRY_BIN").unwrap_or_else(|_| "docker-registry".into());
        let child = Command::new(&bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect((addr, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen on {addr}:{port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        AddrRegistry {
            child,
            url: format!("http://{addr}:{port}"),
            dir,
        }
    }
}

impl Drop for AddrRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real binary, in network namespace `netns` if given, without the caller's
/// credentials in its environment.
fn creb_command(netns: Option<&str>) -> Command {
    let bin = env!("CARGO_BIN_EXE_creb-rs");
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, bin]);
            c
        }
        None => Command::new(bin),
    };
    cmd.env_remove("CREB_USERNAME")
        .env_remove("CREB_PASSWORD")
        .env_remove("CREB_REGISTRY")
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for every child, killing all of them past the deadline.
fn wait_all(mut children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let deadline = Instant::now() + limit;
    loop {
        let mut running = false;
        for c in &mut children {
            if c.try_wait().unwrap().is_none() {
                running = true;
            }
        }
        if !running {
            break;
        }
        if Instant::now() > deadline {
            for c in &mut children {
                let _ = c.kill();
            }
            panic!("the shards did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn netns_unavailable(reason: &str) {
    if std::env::var("CREB_REQUIRE_NETNS").is_ok_and(|v| v == "1") {
        panic!("CREB_REQUIRE_NETNS=1 but network namespaces cannot be used: {reason}");
    }
    eprintln!(
        "SKIPPED: the multi-host test needs network namespaces (root with CAP_NET_ADMIN and iproute2): {reason}"
    );
}

#[test]
fn shards_in_network_namespaces_cover_the_trace_exactly_once() {
    if Command::new("ip").arg("-V").output().is_err() {
        return netns_unavailable("`ip` (Debian package iproute2) is not installed");
    }
    let net = match Net::create(SHARDS) {
        Ok(net) => net,
        Err(e) => return netns_unavailable(&e),
    };
    let dir = tempfile::tempdir().unwrap();
    let trace: PathBuf = dir.path().join("trace.json");
    let (records, _) = generate(&SynthOptions {
        seed: 21,
        sessions: 90,
        mean_gap_ms: 30.0,
        clients: 15,
        repos: 4,
        layer_size: (256, 24 * 1024),
        chunk: 8 * 1024,
        duplicate_share: 0.02,
        failed_share: 0.03,
        ..SynthOptions::default()
    });
    write_file(&trace, &records).unwrap();
    let total = records.len() as u64;
    let registry = AddrRegistry::start(&net.host_addr());
    let trace_arg = trace.to_str().unwrap();

    // Prewarm once, from the root namespace.
    let prewarm = dir.path().join("prewarm");
    let out = wait_all(
        vec![creb_command(None)
            .args([
                "replay",
                trace_arg,
                "--registry",
                &registry.url,
                "--phase",
                "prewarm",
            ])
            .args([
                "--seed",
                SEED,
                "--quiet",
                "--output-dir",
                prewarm.to_str().unwrap(),
            ])
            .spawn()
            .unwrap()],
        Duration::from_secs(120),
    );
    assert!(
        out[0].status.success(),
        "{}",
        String::from_utf8_lossy(&out[0].stderr)
    );

    // Every shard in its own namespace, all starting at the same instant.
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 4.0;
    let start_arg = format!("{start_at:.3}");
    let mut children = Vec::new();
    let mut dirs = Vec::new();
    for (i, ns) in net.namespaces.iter().enumerate() {
        let out_dir = dir.path().join(format!("shard-{i}"));
        let shard = format!("{i}/{SHARDS}");
        children.push(
            creb_command(Some(ns))
                .args([
                    "replay",
                    trace_arg,
                    "--registry",
                    &registry.url,
                    "--phase",
                    "run",
                ])
                .args(["--mode", "stress", "--concurrency", "4"])
                .args(["--shard", &shard, "--seed", SEED, "--start-at", &start_arg])
                .args(["--quiet", "--output-dir", out_dir.to_str().unwrap()])
                .spawn()
                .unwrap(),
        );
        dirs.push(out_dir);
    }
    let outputs = wait_all(children, Duration::from_secs(180));
    let mut shard_records = 0;
    // docker-registry's link race (`Registry::tag_race_500s`) is the one error tolerated: a
    // real error of that registry, counted, never a fault of the run; a shard that met it
    // exits 1, as any run with a failed operation does.
    let mut races = 0;
    for (i, out) in outputs.iter().enumerate() {
        let summary = json(&dirs[i].join("summary.json"));
        let errors = n(&summary["totals"]["errors"]);
        assert!(
            out.status.success() || (out.status.code() == Some(1) && errors > 0),
            "shard {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            errors,
            link_race_500s(&summary),
            "shard {i}: {}",
            summary["errors"]
        );
        races += errors;
        assert_eq!(n(&summary["shard"]["index"]), i as u64);
        shard_records += n(&summary["trace"]["records"]);
        let meta = json(&dirs[i].join("meta.json"));
        let skew = meta["start_skew_ms"]
            .as_f64()
            .unwrap_or_else(|| panic!("shard {i} reports no start skew: {meta}"));
        eprintln!(
            "shard {i} in {}: start skew {skew:+.2} ms",
            net.namespaces[i]
        );
        assert!(skew.abs() < 1000.0, "shard {i} started {skew} ms off");
    }
    assert_eq!(
        shard_records, total,
        "the shards together read every record once"
    );
    let log = std::fs::read_to_string(registry.dir.path().join("registry.log")).unwrap();
    assert!(races <= tag_race_500s_in(&log), "{races} 500s:\n{log}");

    let merged = dir.path().join("merged");
    let mut merge = creb_command(None);
    merge
        .arg("merge")
        .args(&dirs)
        .args(["--output-dir", merged.to_str().unwrap()]);
    let out = wait_all(vec![merge.spawn().unwrap()], Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out[0].stdout);
    assert!(
        out[0].status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out[0].stderr)
    );
    assert!(
        stdout.contains("start skew"),
        "the per-host table: {stdout}"
    );

    let s = json(&merged.join("summary.json"));
    let t = &s["trace"];
    let skipped: u64 = t["skipped"].as_object().unwrap().values().map(n).sum();
    assert_eq!(n(&t["records"]), total, "every record of the trace, once");
    assert_eq!(
        n(&t["records"]),
        n(&t["replayed"]) + n(&t["folded"]) + skipped,
        "{t}"
    );
    assert_eq!(n(&t["replayed"]), n(&s["totals"]["requests"]));
    assert!(n(&t["replayed"]) > 0);
    assert_eq!(n(&s["totals"]["errors"]), races);
    let meta = json(&merged.join("meta.json"));
    let hosts = meta["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), SHARDS);
    assert!(
        hosts.iter().all(|h| h["start_skew_ms"].is_number()),
        "{meta}"
    );
    drop(registry);
    drop(net);
}

/// The Kubernetes recipe takes the shard from the Indexed Job's completion index, and the
/// page that explains it exists with each of its steps.
#[test]
fn the_kubernetes_and_ssh_recipes_are_complete() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let job = std::fs::read_to_string(root.join("deploy/k8s/creb-rs-indexed-job.yaml")).unwrap();
    for needle in [
        "completionMode: Indexed",
        "--shard-from-env=JOB_COMPLETION_INDEX/8",
        "completions: 8",
        "parallelism: 8",
        "--phase=run",
        "--start-at=$(START_AT)",
        "shard-$(JOB_COMPLETION_INDEX)",
    ] {
        assert!(job.contains(needle), "indexed job lacks {needle}");
    }
    let prewarm =
        std::fs::read_to_string(root.join("deploy/k8s/creb-rs-prewarm-job.yaml")).unwrap();
    assert!(prewarm.contains("--phase=prewarm") && prewarm.contains("ReadWriteMany"));
    // Both jobs replay the same workload.
    for flag in ["--seed=42", "/trace/trace.json.gz"] {
        assert!(
            job.contains(flag) && prewarm.contains(flag),
            "{flag} differs"
        );
    }
    assert!(root.join("deploy/k8s/creb-rs-collect-pod.yaml").exists());
    let doc = std::fs::read_to_string(root.join("docs/distributed.md")).unwrap();
    for needle in [
        "--phase prewarm",
        "--phase run",
        "--shard $i/$N",
        "--start-at $START",
        "creb-rs merge",
        "chronyc tracking",
        "clock_skew",
        "start_in_past",
        "JOB_COMPLETION_INDEX",
        "CREB_REQUIRE_NETNS",
    ] {
        assert!(doc.contains(needle), "docs/distributed.md lacks {needle}");
    }
}
