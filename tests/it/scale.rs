//! IBM scale on a test rig, against a real docker-registry: `--size-scale` and
//! `--max-object-size` give every host the same scaled sizes (shards prewarmed by one
//! process and read by others verify every digest), the scale is in meta.json, the
//! warnings and the report; `trace stats --capacity` names the bytes the run then moves;
//! `--digest-cache` is reused by the run phase and found stale when it is; `--check-space`
//! refuses a prewarm larger than the free space.

use crate::common::{run_bin, summary_json, Registry};

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn scaled_sizes_agree_across_shards_and_are_recorded_everywhere() {
    let registry = Registry::start();
    let scratch = tempfile::tempdir().unwrap();
    let dir = |name: &str| scratch.path().join(name).to_str().unwrap().to_owned();
    let scale = ["--size-scale", "0.01", "--max-object-size", "64KiB"];
    let common = |phase: &'static str| {
        let mut a = vec![
            "replay",
            TRACE,
            "--registry",
            &registry.url,
            "--phase",
            phase,
            "--seed",
            "11",
            "--mode",
            "stress",
            "--concurrency",
            "4",
        ];
        a.extend(scale);
        a
    };
    let mut a = common("prewarm");
    let prewarm_dir = dir("prewarm");
    a.extend(["--output-dir", &prewarm_dir]);
    let r = run_bin(&a, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The prewarm pushed scaled blobs: what trace stats --capacity says it would.
    let mut stats = vec!["trace", "stats", TRACE, "--json", "--capacity"];
    stats.extend(scale);
    let s = run_bin(&stats, None, &[]);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let capacity: serde_json::Value = serde_json::from_str(&s.stdout).unwrap();
    let capacity = &capacity["capacity"];
    let prewarmed = summary_json(std::path::Path::new(&prewarm_dir));
    // It sends the trace's blobs, scaled, and small configs and manifests of its own.
    let sent = n(&prewarmed["totals"]["bytes_sent"]);
    let blobs = n(&capacity["prewarm_bytes"]);
    assert!(
        sent >= blobs && sent < blobs + 256 * 1024,
        "{sent} against {blobs}"
    );
    assert!(blobs <= n(&capacity["prewarm_pushes"]) * 64 * 1024);

    // Two shards, two processes, read what the prewarm pushed: every digest verifies.
    let mut shards = Vec::new();
    for i in 0..2 {
        let shard = format!("{i}/2");
        let out = dir(&format!("shard-{i}"));
        let mut a = common("run");
        a.extend(["--shard", &shard, "--output-dir", &out]);
        let r = run_bin(&a, None, &[]);
        let s = summary_json(std::path::Path::new(&out));
        registry.assert_exit_but_tag_races(r.code, &s, &format!("shard {shard}: {}", r.stderr));
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(
            said.contains("sizes are scaled by 0.01 and capped at 64.0 KiB"),
            "{said}"
        );
        shards.push(out);
    }
    let merged = dir("merged");
    let mut m = vec!["merge"];
    m.extend(shards.iter().map(String::as_str));
    m.extend(["--output-dir", &merged]);
    let r = run_bin(&m, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let summary = summary_json(std::path::Path::new(&merged));
    registry.assert_no_errors_but_tag_races(&summary, "merged shards");
    // The run received exactly the scaled bytes trace stats --capacity promised.
    assert_eq!(
        n(&summary["operations"]["blob_get"]["bytes_received"]),
        n(&capacity["read_bytes"]),
        "{summary}"
    );
    assert!(
        summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "sizes_scaled"),
        "{summary}"
    );
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(scratch.path().join("merged/meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["config"]["sizes"]["ppb"], 10_000_000, "{meta}");
    assert_eq!(meta["config"]["sizes"]["max"], 65_536, "{meta}");
    let html = run_bin(
        &["report", &merged, "--format", "html", "--quiet"],
        None,
        &[],
    );
    assert_eq!(html.code, 0, "{}", html.stderr);
    let page = std::fs::read_to_string(scratch.path().join("merged/report.html")).unwrap();
    assert!(
        page.contains("sizes ×0.01 ≤ 64.0 KiB"),
        "the header shows the scale"
    );

    // `cost` of the result says its bytes are not the trace's.
    let cost = run_bin(&["cost", &merged, "--provider", "ecr"], None, &[]);
    assert_eq!(cost.code, 0, "{}", cost.stderr);
    assert!(cost.stdout.contains("sizes were scaled"), "{}", cost.stdout);

    // Another scale is another workload: merge refuses to mix them.
    let other = dir("other");
    let mut a = common("run");
    a.retain(|x| *x != "0.01");
    a.insert(
        a.iter().position(|x| *x == "--size-scale").unwrap() + 1,
        "0.02",
    );
    a.extend(["--shard", "1/2", "--output-dir", &other]);
    let r = run_bin(&a, None, &[]);
    // Nothing was prewarmed at this scale: its reads fail (exit 1), its result is written.
    assert_eq!(r.code, 1, "{}", r.stderr);
    let r = run_bin(
        &["merge", &shards[0], &other, "--output-dir", &dir("mixed")],
        None,
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stderr);
}

/// `replay TRACE --phase PHASE --seed SEED --mode stress --digest-cache CACHE` into `out`.
fn replay_cached(
    registry: &str,
    phase: &str,
    seed: &str,
    cache: &str,
    out: &std::path::Path,
) -> crate::common::BinOutput {
    let out = out.to_str().unwrap();
    let mut args = vec!["replay", TRACE, "--registry", registry, "--phase", phase];
    args.extend(["--seed", seed, "--mode", "stress", "--digest-cache", cache]);
    args.extend(["--output-dir", out]);
    run_bin(&args, None, &[])
}

#[test]
fn the_digest_cache_is_reused_and_found_stale() {
    let registry = Registry::start();
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("digests.cache");
    let cache_arg = cache.to_str().unwrap().to_owned();
    let replay = |phase: &str, out: &str| {
        let out = scratch.path().join(out);
        replay_cached(&registry.url, phase, "12", &cache_arg, &out)
    };
    // Nothing is hashed before the first upload: the prewarm hashes what it sends, then
    // the run's uploads, and writes every digest to the cache as it learns it.
    let r = replay("prewarm", "prewarm");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(": 0 computed over 0 B")
            && r.stderr
                .contains(", 0 from the cache (0 of them checked), "),
        "{}",
        r.stderr
    );
    let meta = read_json(&scratch.path().join("prewarm/meta.json"));
    let deferred = n(&meta["preparation"]["digests"]["deferred"]);
    assert!(deferred > 100, "{meta}");
    assert!(
        r.stdout.contains(" computed while sending, "),
        "{}",
        r.stdout
    );
    assert!(cache.is_file());

    // The run phase computes nothing: every digest comes from the cache.
    let r = replay("run", "run");
    let summary = summary_json(&scratch.path().join("run"));
    registry.assert_exit_but_tag_races(r.code, &summary, &format!("run: {}", r.stderr));
    assert!(
        r.stderr.contains("digests") && r.stderr.contains(": 0 computed over 0 B"),
        "{}",
        r.stderr
    );
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(scratch.path().join("run/meta.json")).unwrap(),
    )
    .unwrap();
    let prep = &meta["preparation"];
    assert_eq!(prep["digests"]["computed"], 0, "{meta}");
    assert!(n(&prep["digests"]["cached"]) > 100, "{meta}");
    assert!(
        prep["read_s"].is_number() && prep["digest_s"].is_number(),
        "{meta}"
    );

    // A cache whose digests are wrong is found stale, set aside and rewritten; the run
    // computes every digest and has no error.
    let mut bytes = std::fs::read(&cache).unwrap();
    let header = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    for entry in bytes[header..].chunks_exact_mut(108) {
        entry[44] ^= 0xff;
    }
    std::fs::write(&cache, &bytes).unwrap();
    let r = replay("run", "stale");
    assert!(r.stderr.contains("stale"), "{}", r.stderr);
    let summary = summary_json(&scratch.path().join("stale"));
    registry.assert_exit_but_tag_races(r.code, &summary, "stale cache");
    // Rewritten right: the next run takes everything from it again.
    let r = replay("run", "again");
    let summary = summary_json(&scratch.path().join("again"));
    registry.assert_exit_but_tag_races(r.code, &summary, &format!("again: {}", r.stderr));
    assert!(r.stderr.contains(": 0 computed over 0 B"), "{}", r.stderr);
}

/// A digest the cache holds wrongly, which its sample check (the smallest entries) misses:
/// the registry refuses the upload by its digest, and the cache is found stale by name and
/// emptied, so the next run computes every digest afresh.
#[test]
fn a_cached_digest_the_registry_refuses_marks_the_cache_stale() {
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("digests.cache");
    let prewarm = |registry: &Registry, out: &str| {
        let out = scratch.path().join(out);
        replay_cached(
            &registry.url,
            "prewarm",
            "14",
            cache.to_str().unwrap(),
            &out,
        )
    };
    let first = Registry::start();
    let r = prewarm(&first, "first");
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Every digest altered but those of the smallest entries, which the load checks: the
    // content the prewarm sends first is hashed as it goes, the rest is sent by the cache's
    // digests.
    let mut bytes = std::fs::read(&cache).unwrap();
    let header = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    let size = |e: &[u8]| u64::from_le_bytes(e[32..40].try_into().unwrap());
    let mut sizes: Vec<u64> = bytes[header..].chunks_exact(108).map(size).collect();
    sizes.sort_unstable();
    let kept = sizes[32.min(sizes.len() - 1)];
    for entry in bytes[header..].chunks_exact_mut(108) {
        if size(entry) > kept {
            entry[44] ^= 0xff;
        }
    }
    std::fs::write(&cache, &bytes).unwrap();

    let fresh = Registry::start();
    let r = prewarm(&fresh, "second");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("--digest-cache") && r.stderr.contains("digests.cache"),
        "the error names the cache: {}",
        r.stderr
    );
    let summary = summary_json(&scratch.path().join("second"));
    let stale = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["kind"] == "digest_cache_stale");
    assert!(stale, "{summary}");
    assert_eq!(
        std::fs::read(&cache).unwrap().len(),
        header,
        "emptied to its header"
    );
}

fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The entries of a digest cache file (after its header line).
fn cache_entries(path: &std::path::Path) -> usize {
    let bytes = std::fs::read(path).unwrap_or_default();
    let header = bytes.iter().position(|b| *b == b'\n').map_or(0, |p| p + 1);
    bytes.len().saturating_sub(header) / 108
}

/// A prewarm stopped after its first uploads leaves every digest it learned in the cache:
/// the next prewarm takes them (and hashes only what it sends), the run after it computes
/// nothing; a cache whose entries were altered is found stale and its digests computed.
#[test]
fn a_stopped_prewarm_leaves_the_digests_it_learned() {
    let registry = Registry::start();
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("digests.cache");
    let cache_arg = cache.to_str().unwrap().to_owned();
    let args = |phase: &str, out: &str| -> Vec<String> {
        [
            "replay",
            TRACE,
            "--registry",
            &registry.url,
            "--phase",
            phase,
            "--seed",
            "13",
            "--prewarm-concurrency",
            "1",
            "--digest-cache",
            &cache_arg,
            "--output-dir",
            scratch.path().join(out).to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run =
        |a: Vec<String>| run_bin(&a.iter().map(String::as_str).collect::<Vec<_>>(), None, &[]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args(args("prewarm", "stopped"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while cache_entries(&cache) < 5 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "no digest learned in 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the prewarm ended first"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let learned = cache_entries(&cache);
    assert!(learned >= 5, "{learned}");

    // Taken, checked, and the rest hashed while sent.
    let r = run(args("prewarm", "again"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let prep = &read_json(&scratch.path().join("again/meta.json"))["preparation"];
    assert_eq!(n(&prep["digests"]["cached"]), learned as u64, "{prep}");
    assert_eq!(prep["digests"]["computed"], 0, "{prep}");
    assert!(prep["digests"]["stale"].is_null(), "{prep}");
    assert!(cache_entries(&cache) > learned);
    let r = run(args("run", "run"));
    let summary = summary_json(&scratch.path().join("run"));
    registry.assert_exit_but_tag_races(r.code, &summary, &format!("run: {}", r.stderr));
    let prep = &read_json(&scratch.path().join("run/meta.json"))["preparation"];
    assert_eq!(prep["digests"]["computed"], 0, "{prep}");

    // Every entry altered: the run finds the cache stale and computes its digests.
    let mut bytes = std::fs::read(&cache).unwrap();
    let header = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    for entry in bytes[header..].chunks_exact_mut(108) {
        entry[45] ^= 0x10;
    }
    std::fs::write(&cache, &bytes).unwrap();
    let r = run(args("run", "stale"));
    assert!(r.stderr.contains("stale"), "{}", r.stderr);
    let summary = summary_json(&scratch.path().join("stale"));
    registry.assert_exit_but_tag_races(r.code, &summary, "stale cache");
    let prep = &read_json(&scratch.path().join("stale/meta.json"))["preparation"];
    assert!(n(&prep["digests"]["computed"]) > 100, "{prep}");
}

#[test]
fn check_space_refuses_a_prewarm_larger_than_the_free_space() {
    let registry = Registry::start();
    let prewarm = |dir: &str| {
        run_bin(
            &[
                "replay",
                TRACE,
                "--registry",
                &registry.url,
                "--phase",
                "prewarm",
                "--check-space",
                dir,
            ],
            None,
            &[],
        )
    };
    // procfs has no free space at all.
    let r = prewarm("/proc");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("has 0 B free (--check-space)") && r.stderr.contains("--size-scale"),
        "{}",
        r.stderr
    );
    // With room, it says the figure and goes on.
    let scratch = tempfile::tempdir().unwrap();
    let r = prewarm(scratch.path().to_str().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("the prewarm pushes"), "{}", r.stderr);
}
