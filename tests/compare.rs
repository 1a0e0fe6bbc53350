//! `creb-rs compare` with repetitions: medians, spread (min–max) and whether a difference
//! is within the run-to-run noise, from real result directories; one run a side says that
//! it cannot tell noise.

mod common;

use common::{run_bin, Registry};

#[test]
fn repetitions_give_medians_spread_and_a_noise_verdict() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let mut sides = [Vec::new(), Vec::new()];
    for i in 0..3 {
        for (s, side) in sides.iter_mut().enumerate() {
            let out = dir.path().join(format!("{s}-{i}"));
            let r = run_bin(
                &[
                    "push",
                    "--registry",
                    &registry.url,
                    "--repo",
                    "compare/app",
                    "--images",
                    "3",
                    "--layers",
                    "2",
                    "--layer-size",
                    "32KiB",
                    "--output-dir",
                    out.to_str().unwrap(),
                    "--quiet",
                ],
                None,
                &[],
            );
            assert_eq!(r.code, 0, "{}", r.stderr);
            side.push(out.to_str().unwrap().to_owned());
        }
    }
    let (a, b) = (sides[0].join(","), sides[1].join(","));
    let text = run_bin(&["compare", &a, &b], None, &[]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    for part in [
        "3 runs",
        "median p99 ms A/B",
        "spread (min–max)",
        "within the noise",
    ] {
        assert!(
            text.stdout.contains(part),
            "'{part}' not in:\n{}",
            text.stdout
        );
    }
    let json = run_bin(&["compare", &a, &b, "--json"], None, &[]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let c: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(c["runs"], serde_json::json!([3, 3]));
    let push = c["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "image_push")
        .expect("image_push compared");
    let spread = &push["p99_spread"][0];
    let (min, median, max) = (
        spread["min"].as_f64().unwrap(),
        spread["median"].as_f64().unwrap(),
        spread["max"].as_f64().unwrap(),
    );
    assert!(min <= median && median <= max, "{spread}");
    assert_eq!(push["p99_ms"][0].as_f64().unwrap(), median);
    assert!(push["p99_within_noise"].is_boolean(), "{push}");
    assert_eq!(push["count"], serde_json::json!([3, 3]));

    // One run a side: the deltas, and a word that noise is unknown.
    let single = run_bin(&["compare", &sides[0][0], &sides[1][0]], None, &[]);
    assert_eq!(single.code, 0, "{}", single.stderr);
    assert!(
        single.stdout.contains("no measure of noise"),
        "{}",
        single.stdout
    );
    let json = run_bin(
        &["compare", &sides[0][0], &sides[1][0], "--json"],
        None,
        &[],
    );
    let c: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(c["operations"][0]["p99_within_noise"].is_null());
}
