//! `simulate cache|prefetch` and `cost`, driven in-process: the FAST'18 qualitative cache
//! result on a synthetic dal-like trace, prefetching on hand-written traces, and cost
//! estimates checked against figures computed by hand (in the comments).

use std::path::{Path, PathBuf};

use clap::Parser;
use creb::analysis::simulate::{simulate_cache_files, simulate_prefetch_files};
use creb::commands::cost::{self, CostArgs};
use creb::commands::simulate::{self, SimulateArgs, SimulateCommand};
use creb::report::analysis::cost::text as cost_text;
use creb::trace::synth::{format_ms, Profile, ProfileGenerator, ProfileOptions, SynthLength};
use creb::trace::write::{write_file, write_file_iter, RawRecord};
use creb::ExitStatus;

#[derive(Debug, Parser)]
struct Sim {
    #[command(subcommand)]
    command: SimulateCommand,
}

#[derive(Debug, Parser)]
struct Cost {
    #[command(flatten)]
    args: CostArgs,
}

fn sim(args: &[&str]) -> SimulateArgs {
    let parsed = Sim::try_parse_from(std::iter::once("simulate").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{e}"));
    SimulateArgs {
        command: parsed.command,
        quiet: false,
    }
}

fn cost_args(args: &[&str]) -> CostArgs {
    Cost::try_parse_from(std::iter::once("cost").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{e}"))
        .args
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

const GIB: u64 = 1 << 30;
const T0: i64 = 1_497_916_800_000; // 2017-06-20T00:00:00Z
const HOUR: i64 = 3_600_000;

/// A synthetic trace with the dal profile (skewed layer popularity, ~93% pulls, layers up to
/// 2 GiB).
fn dal_like_trace(dir: &Path, requests: u64, seed: u64) -> PathBuf {
    let path = dir.join("dal.json");
    let opts = ProfileOptions::new(Profile::Dal, SynthLength::Requests(requests), seed);
    write_file_iter(&path, ProfileGenerator::new(&opts)).unwrap();
    path
}

fn rec(
    t_ms: i64,
    client: &str,
    method: &'static str,
    uri: &str,
    status: u16,
    written: u64,
) -> RawRecord {
    RawRecord {
        host: "00000000".into(),
        duration: 0.01,
        method,
        remoteaddr: client.into(),
        uri: uri.into(),
        useragent: "docker/17.06.0-ce".into(),
        status,
        written,
        id: format!("{t_ms:x}{method}{uri}{client}"),
        timestamp: format_ms(t_ms),
        size_unknown: false,
        time_ms: t_ms,
    }
}

// ---------------------------------------------------------------------------------------
// simulate cache

#[test]
fn flag_definitions_are_consistent() {
    use clap::CommandFactory;
    Sim::command().debug_assert();
    Cost::command().debug_assert();
}

#[test]
fn cache_hit_ratio_grows_with_size_and_the_ssd_tier_lifts_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dal_like_trace(dir.path(), 120_000, 7);
    let sweep = [1.0, 2.0, 5.0, 10.0, 20.0];
    let out = simulate_cache_files(&[trace], None, &sweep, 10.0, 100 << 20, false).unwrap();
    assert!(out.layer_requests > 1000, "{}", out.layer_requests);
    assert!(out.working_set_bytes > 0);
    assert_eq!(out.points.len(), sweep.len());
    let two: Vec<f64> = out
        .points
        .iter()
        .map(|p| p.two_tier.overall.hit_ratio.overall)
        .collect();
    let mem: Vec<f64> = out
        .points
        .iter()
        .map(|p| p.memory_only.overall.hit_ratio.overall)
        .collect();
    eprintln!("two-tier {two:?}\nmemory-only {mem:?}");
    for w in two.windows(2) {
        assert!(w[1] >= w[0], "two-tier hit ratio fell with size: {two:?}");
    }
    for w in mem.windows(2) {
        assert!(
            w[1] >= w[0],
            "memory-only hit ratio fell with size: {mem:?}"
        );
    }
    assert!(two.last().unwrap() > two.first().unwrap());
    for (p, pct) in out.points.iter().zip(sweep) {
        // The memory tier behaves the same with or without the SSD behind it ...
        assert_eq!(
            p.two_tier.overall.counts.memory_hits,
            p.memory_only.overall.counts.memory_hits
        );
        // ... so the second tier can only add hits, and here it does.
        assert!(p.two_tier.overall.hit_ratio.overall > p.memory_only.overall.hit_ratio.overall);
        assert!((p.percent_of_working_set - pct).abs() < 0.01);
        let c = &p.two_tier.overall.counts;
        assert_eq!(c.requests, out.layer_requests);
        assert_eq!(c.bytes, out.layer_request_bytes);
    }
    // The smallest cache fills, and its steady state is no worse than its cold start.
    let small = &out.points[0].two_tier;
    let steady = small.steady_state.as_ref().expect("a 1% cache fills");
    assert!(steady.hit_ratio.overall >= small.cold_start.hit_ratio.overall);
}

#[test]
fn cache_cli_fixed_memory_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dal_like_trace(dir.path(), 20_000, 3);
    let t = trace.to_str().unwrap();
    let json = simulate::render(sim(&["cache", t, "--memory", "256MiB", "--json"])).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["simulation"], "cache");
    let p = &v["points"][0];
    assert_eq!(p["two_tier"]["config"]["memory_bytes"], 256 << 20);
    assert_eq!(p["two_tier"]["config"]["ssd_bytes"], 2560u64 << 20);
    assert_eq!(p["memory_only"]["config"]["ssd_bytes"], 0);
    for key in ["memory", "ssd", "overall"] {
        assert!(p["two_tier"]["overall"]["hit_ratio"][key].is_f64(), "{key}");
        assert!(
            p["two_tier"]["overall"]["byte_hit_ratio"][key].is_f64(),
            "{key}"
        );
    }
    for key in [
        "promotions",
        "demotions",
        "ssd_evictions",
        "dropped",
        "bypassed",
    ] {
        assert!(p["two_tier"]["movements"][key].is_u64(), "{key}");
    }
    assert!(v["working_set_bytes"].as_u64().unwrap() > 0);

    let text = simulate::render(sim(&[
        "cache",
        t,
        "--memory",
        "256MiB",
        "--ssd-factor",
        "0",
    ]))
    .unwrap();
    assert!(
        text.contains("two-tier") && text.contains("256.0 MiB"),
        "{text}"
    );

    // `--memory` and `--sweep` exclude each other; one of them is required.
    assert!(Sim::try_parse_from(["s", "cache", t]).is_err());
    assert!(Sim::try_parse_from(["s", "cache", t, "--memory", "1GiB", "--sweep", "2%"]).is_err());
    assert!(Sim::try_parse_from(["s", "cache", t, "--sweep", "0%"]).is_err());
}

#[tokio::test]
async fn run_returns_success() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dal_like_trace(dir.path(), 2_000, 5);
    let t = trace.to_str().unwrap();
    let status = simulate::run(sim(&["cache", t, "--sweep", "5%,10%"]))
        .await
        .unwrap();
    assert_eq!(status, ExitStatus::Success);
    let status = simulate::run(sim(&["prefetch", t, "--sweep"]))
        .await
        .unwrap();
    assert_eq!(status, ExitStatus::Success);
    let status = cost::run(cost_args(&[t, "--provider", "ecr"]))
        .await
        .unwrap();
    assert_eq!(status, ExitStatus::Success);
    assert!(simulate::run(sim(&[
        "cache",
        "/nonexistent/trace.json",
        "--memory",
        "1GiB"
    ]))
    .await
    .is_err());
}

// ---------------------------------------------------------------------------------------
// simulate prefetch

/// Client `pusher` pushes one 10 MiB layer (digest `d1`) and a manifest to `u/r` at `t`;
/// client `puller` pulls the manifest `pull_after` later and then the layer.
fn push_then_pull(t: i64, pull_after: i64) -> Vec<RawRecord> {
    let mb10 = 10 << 20;
    vec![
        rec(t, "pusher", "HEAD", "v2/u/r/blobs/d1", 404, 0),
        rec(t + 1, "pusher", "POST", "v2/u/r/blobs/uploads/", 202, 0),
        rec(
            t + 2,
            "pusher",
            "PATCH",
            "v2/u/r/blobs/uploads/s1",
            202,
            mb10,
        ),
        rec(t + 3, "pusher", "PUT", "v2/u/r/blobs/uploads/s1", 201, 0),
        rec(t + 4, "pusher", "PUT", "v2/u/r/manifests/v2", 201, 1000),
        rec(
            t + pull_after,
            "puller",
            "GET",
            "v2/u/r/manifests/v2",
            200,
            1000,
        ),
        rec(
            t + pull_after + 1,
            "puller",
            "GET",
            "v2/u/r/blobs/d1",
            200,
            mb10,
        ),
        // An unrelated layer: never prefetched.
        rec(
            t + pull_after + 2,
            "puller",
            "GET",
            "v2/u/r/blobs/zz",
            200,
            5,
        ),
    ]
}

#[test]
fn prefetch_hits_a_pull_that_follows_a_push() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    write_file(&path, &push_then_pull(T0, 60_000)).unwrap();
    let json = simulate::render(sim(&["prefetch", path.to_str().unwrap(), "--json"])).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let r = &v["results"][0];
    assert_eq!(r["lookup_retention_s"], 3600);
    assert_eq!(r["layer_gets"], 2);
    assert_eq!(r["hits"], 1);
    assert_eq!(r["hit_ratio"], 0.5);
    assert_eq!(r["triggers"], 1);
    assert_eq!(r["prefetched"], 1);
    assert_eq!(r["prefetched_bytes"], 10 << 20);
    assert_eq!(r["prefetch_ratio"], 1.0);
    assert_eq!(r["peak_cache_bytes"], 10 << 20);
    assert_eq!(r["pushed_layers"], 1);
}

#[test]
fn prefetch_sweep_applies_the_papers_retentions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    // The pull comes 2 h after the push: only lookup retentions of 12 h and 1 d see it.
    let mut records = push_then_pull(T0, 2 * HOUR);
    // A second image pulled 30 min after its push, and its layer again 3 h after that:
    // the second GET needs a cache retention over 3 h.
    let t = T0 + 10 * HOUR;
    records.extend([
        rec(t, "p2", "HEAD", "v2/u/s/blobs/e1", 404, 0),
        rec(t + 1, "p2", "POST", "v2/u/s/blobs/uploads/", 202, 0),
        rec(t + 2, "p2", "PUT", "v2/u/s/blobs/uploads/s2", 201, 2048),
        rec(t + 3, "p2", "PUT", "v2/u/s/manifests/latest", 201, 900),
        rec(
            t + HOUR / 2,
            "c2",
            "GET",
            "v2/u/s/manifests/latest",
            200,
            900,
        ),
        rec(t + HOUR / 2 + 1, "c2", "GET", "v2/u/s/blobs/e1", 200, 2048),
        rec(
            t + HOUR / 2 + 3 * HOUR,
            "c3",
            "GET",
            "v2/u/s/blobs/e1",
            200,
            2048,
        ),
    ]);
    write_file(&path, &records).unwrap();
    let out = simulate_prefetch_files(
        &[path],
        &simulate::prefetch_configs(&match sim(&["prefetch", "x", "--sweep"]).command {
            SimulateCommand::Prefetch(a) => a,
            SimulateCommand::Cache(_) => unreachable!(),
        }),
        false,
    )
    .unwrap();
    assert_eq!(out.results.len(), 9);
    for r in &out.results {
        let lookup_h = r.lookup_retention_s / 3600;
        let cache_h = r.cache_retention_s / 3600;
        let first = u64::from(lookup_h >= 12);
        let second = 1 + u64::from(cache_h >= 12);
        assert_eq!(
            r.hits,
            first + second,
            "lookup {lookup_h} h, cache {cache_h} h"
        );
        assert_eq!(r.layer_gets, 4);
    }
}

// ---------------------------------------------------------------------------------------
// cost

fn write_summary(dir: &Path, duration_s: f64, sent: u64, received: u64) -> PathBuf {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let summary = serde_json::json!({
        "schema_version": 1,
        "command": "pull",
        "duration_s": duration_s,
        "totals": { "requests": 30, "ok": 30, "errors": 0, "bytes_sent": sent,
                    "bytes_received": received, "http_requests": 40 },
        "operations": {
            "blob_get": { "count": 20 },
            "manifest_get": { "count": 10 },
            "blob_upload": { "count": 2 },
            "upload_patch": { "count": 4 },
            "image_pull": { "count": 10 }
        }
    });
    std::fs::write(run.join("summary.json"), summary.to_string()).unwrap();
    run
}

#[test]
fn cost_of_a_result_directory_on_ecr() {
    let dir = tempfile::tempdir().unwrap();
    // One hour of a pull benchmark: 1 GiB received, 2 GiB sent.
    let run = write_summary(dir.path(), 3600.0, 2 * GIB, GIB);
    let e = cost::compute(&cost_args(&[run.to_str().unwrap(), "--provider", "ecr"])).unwrap();
    assert_eq!(e.workload.source, "result");
    assert_eq!(
        (e.workload.read_requests, e.workload.write_requests),
        (30, 4)
    );
    // A month is 730 h, so 730 GB of egress: 100 GB free + 630 GB × $0.09 = $56.70;
    // storage: 2 GB × $0.10 = $0.20; total $56.90.
    assert!(close(e.projection.scale_factor, 730.0));
    assert!(
        close(e.monthly.egress.cost, 56.70),
        "{}",
        e.monthly.egress.cost
    );
    assert!(close(e.monthly.storage.cost, 0.20));
    assert_eq!(e.monthly.requests.cost, 0.0);
    assert!(close(e.monthly.total, 56.90));

    // --scale-to 200TiB: 204,800 GB a month: $912.60 + $3,481.60 + $7,168 + $2,560
    // = $14,122.20, plus storage $0.20 (not scaled); requests scale by 204,800.
    let e = cost::compute(&cost_args(&[
        run.to_str().unwrap(),
        "--provider",
        "ecr",
        "--scale-to",
        "200TiB",
    ]))
    .unwrap();
    assert!(close(e.projection.scale_factor, 204_800.0));
    assert!(close(e.monthly_usage.read_requests, 30.0 * 204_800.0));
    assert!(close(e.monthly.total, 14_122.40), "{}", e.monthly.total);
    let tiers: Vec<f64> = e.monthly.egress.tiers.iter().map(|t| t.gb).collect();
    assert_eq!(tiers, vec![100.0, 10_140.0, 40_960.0, 102_400.0, 51_200.0]);

    // --months 12: twelve monthly bills.
    let e = cost::compute(&cost_args(&[
        run.to_str().unwrap(),
        "--provider",
        "ecr",
        "--months",
        "12",
        "--region",
        "eu-west-1",
    ]))
    .unwrap();
    assert!(close(e.total, 12.0 * 56.90));
}

/// A workload of exactly one 730-hour month, as trace files.
fn month_trace(dir: &Path, egress: u64, stored_extra: u64) -> PathBuf {
    let path = dir.join("month.json");
    let end = T0 + 730 * HOUR;
    // The egress as one blob read once, or as several when one would be beyond the size
    // any record may claim (1 TiB).
    let blobs = egress.div_ceil(1 << 40).max(1);
    assert_eq!(egress % blobs, 0);
    let mut records: Vec<_> = (0..blobs)
        .map(|i| {
            let uri = format!("v2/u/r/blobs/big{i}");
            rec(T0, "c", "GET", &uri, 200, egress / blobs)
        })
        .collect();
    if stored_extra > 0 {
        records.push(rec(
            T0 + 1,
            "c",
            "PUT",
            "v2/u/r/blobs/uploads/s9",
            201,
            stored_extra,
        ));
    }
    records.push(rec(end, "c", "GET", "v2/", 200, 0));
    write_file(&path, &records).unwrap();
    path
}

#[test]
fn cost_on_azure_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    // 50 GB egress, 150 GB stored (50 GB fetched + 100 GB uploaded), over one month.
    let t = month_trace(dir.path(), 50 * GIB, 100 * GIB);
    let t = t.to_str().unwrap();
    let e = cost::compute(&cost_args(&[t, "--provider", "acr-standard"])).unwrap();
    assert_eq!(e.workload.source, "trace");
    assert!(close(e.monthly_usage.storage_gb, 150.0));
    assert!(close(e.monthly_usage.egress_gb, 50.0));
    // Fee: $0.667/day × 730/24 days = $20.2879167. Storage: 150 GB − 100 included = 50 GB
    // × $0.003/GB/day × 30.4166667 days = $4.5625. Egress: 50 GB within the free 100 GB.
    assert!(close(e.monthly.fees.cost, 0.667 * 730.0 / 24.0));
    assert!(close(e.monthly.storage.cost, 4.5625));
    assert_eq!(e.monthly.egress.cost, 0.0);
    assert!(close(e.monthly.total, 24.850_416_67), "{}", e.monthly.total);

    // Basic includes 10 GB: 140 GB billable × $0.09125 = $12.775; fee $0.167 × 30.4166667
    // = $5.0795833; total $17.8545833.
    let e = cost::compute(&cost_args(&[t, "--provider", "acr-basic"])).unwrap();
    assert!(close(e.monthly.storage.billable_gb, 140.0));
    assert!(close(e.monthly.total, 17.854_583_33), "{}", e.monthly.total);

    // Premium includes 500 GB: storage free; fee $1.667 × 30.4166667 = $50.7045833.
    let e = cost::compute(&cost_args(&[t, "--provider", "acr-premium"])).unwrap();
    assert_eq!(e.monthly.storage.cost, 0.0);
    assert!(close(e.monthly.total, 50.704_583_33));
}

#[test]
fn cost_on_google_and_docker_hub_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    // 2,048 GB egress, 2,058.5 GB stored (the fetched blob plus 10.5 GB uploaded).
    let t = month_trace(dir.path(), 2048 * GIB, 21 * GIB / 2);
    let t = t.to_str().unwrap();
    let e = cost::compute(&cost_args(&[t, "--provider", "gcr"])).unwrap();
    // Egress: 1,024 GB × $0.12 = $122.88 + 1,024 GB × $0.11 = $112.64 → $235.52.
    // Storage: (2,058.5 − 0.5) GB × $0.10 = $205.80. Total $441.32.
    assert!(close(e.monthly.egress.cost, 235.52));
    assert!(close(e.monthly.storage.cost, 205.80));
    assert!(close(e.monthly.total, 441.32), "{}", e.monthly.total);

    // Docker Hub Pro: $9 a month whatever the volume; three months $27.
    let e = cost::compute(&cost_args(&[t, "--provider", "dockerhub", "--months", "3"])).unwrap();
    assert!(close(e.monthly.total, 9.0));
    assert!(close(e.total, 27.0));
    assert!(!e.provider.caveats.is_empty());
}

#[test]
fn cost_with_a_pricing_file() {
    let dir = tempfile::tempdir().unwrap();
    let pricing = dir.path().join("pricing.toml");
    std::fs::write(
        &pricing,
        r#"
[providers.mine]
name = "An in-house registry"
currency = "EUR"
as_of = "2026-11"
region = "here"
sources = ["internal"]
[providers.mine.storage]
per_gb_month = 0.5
included_gb = 1
[providers.mine.egress]
tiers = [{ up_to_gb = 10, per_gb = 0.0 }, { up_to_gb = 20, per_gb = 1.0 }, { per_gb = 0.5 }]
[providers.mine.requests]
per_million_reads = 2.0
per_million_writes = 10.0
[providers.mine.fees]
per_month = 3.0
"#,
    )
    .unwrap();
    let t = month_trace(dir.path(), 25 * GIB, 0);
    let args = |p: &str| {
        cost_args(&[
            t.to_str().unwrap(),
            "--provider",
            p,
            "--pricing",
            pricing.to_str().unwrap(),
        ])
    };
    let e = cost::compute(&args("mine")).unwrap();
    // Egress 25 GB: 10 free, 10 × 1.0 = 10, 5 × 0.5 = 2.5 → 12.5. Storage 25 GB − 1
    // included = 24 × 0.5 = 12. Requests: 2 reads → 2e-6 × 2.0 = 0.000004. Fee 3.
    // Total 27.500004.
    assert_eq!(e.provider.currency, "EUR");
    assert!(close(e.monthly.egress.cost, 12.5));
    assert!(close(e.monthly.storage.cost, 12.0));
    assert!(close(e.monthly.requests.cost, 0.000_004));
    assert!(close(e.monthly.total, 27.500_004));
    // The file replaces the built-in table.
    let err = cost::compute(&args("ecr")).unwrap_err();
    assert!(
        format!("{err:#}").contains("unknown provider `ecr`"),
        "{err:#}"
    );
}

#[test]
fn cost_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let t = month_trace(dir.path(), GIB, 0);
    let t = t.to_str().unwrap();
    let err = cost::compute(&cost_args(&[t, "--provider", "ecr", "--region", "mars"])).unwrap_err();
    assert!(format!("{err:#}").contains("no region `mars`"), "{err:#}");
    let err = cost::compute(&cost_args(&[t, "--provider", "nope"])).unwrap_err();
    assert!(format!("{err:#}").contains("acr-basic"), "{err:#}");
    assert!(Cost::try_parse_from(["cost", t, "--provider", "ecr", "--months", "0"]).is_err());
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[providers.x]\nname = 1\n").unwrap();
    let err = cost::compute(&cost_args(&[
        t,
        "--provider",
        "x",
        "--pricing",
        bad.to_str().unwrap(),
    ]))
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("not a valid pricing table"),
        "{err:#}"
    );
}

#[test]
fn cost_text_and_json_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_summary(dir.path(), 3600.0, 2 * GIB, GIB);
    let e = cost::compute(&cost_args(&[run.to_str().unwrap(), "--provider", "ecr"])).unwrap();
    let text = cost_text(&e);
    for needle in [
        "storage",
        "egress",
        "requests",
        "fees",
        "total per month",
        "56.90",
        "as of",
    ] {
        assert!(text.contains(needle), "{needle} missing in\n{text}");
    }
    let v = serde_json::to_value(&e).unwrap();
    assert!(close(v["monthly"]["total"].as_f64().unwrap(), 56.90));
    assert_eq!(v["provider"]["key"], "ecr");
    assert_eq!(v["projection"]["basis"], "measured_rate");
    assert!(v["monthly"]["egress"]["tiers"].as_array().unwrap().len() == 5);
}
