//! The HTML report and the chart files of real result directories — a delay-mode replay of
//! a small generated trace and a push, both against a test registry — checked as text and
//! rendered in headless Chromium (Debian's `chromium`; the tests fail without it, they never
//! skip). Screenshots are kept in `$CARGO_TARGET_TMPDIR/report_html/` for people to look at.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{creb, Registry};
use creb::results::store::load;
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;
use creb::ExitStatus;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);

/// Charts of every result, in report order.
const COMMON_CHARTS: [&str; 5] = [
    "latency-percentiles",
    "throughput",
    "latency-over-time",
    "errors",
    "size-classes",
];
/// Charts only delay mode has.
const DELAY_CHARTS: [&str; 2] = ["service-percentiles", "schedule-lag"];

/// A short delay-mode replay (prewarm, then the run at 2x with 200 ms intervals), replaying
/// the trace's failed requests too so the errors chart has something to show.
async fn delay_result(registry: &Registry, dir: &Path) -> PathBuf {
    let (records, _) = generate(&SynthOptions {
        seed: 5,
        sessions: 40,
        mean_gap_ms: 50.0,
        clients: 6,
        repos: 3,
        layer_size: (256, 64 * 1024),
        chunk: 32 * 1024,
        failed_share: 0.1,
        ..SynthOptions::default()
    });
    let trace = dir.join("trace.json");
    write_file(&trace, &records).unwrap();
    let out = dir.join("delay");
    let status = creb(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--mode",
        "delay",
        "--speed",
        "2",
        "--interval",
        "200ms",
        "--replay-failed",
        // The replayed failures are the point (the errors chart): tolerated.
        "--max-errors",
        "100%",
        "--concurrency",
        "16",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    out
}

async fn push_result(registry: &Registry, dir: &Path) -> PathBuf {
    let out = dir.join("push");
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "report/html",
        "--images",
        "3",
        "--layers",
        "2",
        "--layer-size",
        "64KiB",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    out
}

async fn html_report(result: &Path) -> String {
    let status = creb(&["report", result.to_str().unwrap(), "--format", "html"]).await;
    assert_eq!(status, ExitStatus::Success);
    std::fs::read_to_string(result.join("report.html")).expect("report.html written")
}

fn chromium() -> &'static str {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's `chromium` package (apt-get install chromium), \
         as CI does. The HTML report tests render in a real browser and never skip."
    );
    CHROMIUM
}

/// Runs headless Chromium on `url` with `extra` flags (a fresh profile, no network
/// services), killed after [`CHROMIUM_TIMEOUT`]. Returns stdout.
fn run_chromium(work: &Path, extra: &[String], url: &str) -> String {
    let run = tempfile::tempdir_in(work).unwrap();
    let profile = run.path().join("profile");
    let stdout_path = run.path().join("stdout");
    let stderr_path = run.path().join("stderr");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).unwrap())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + CHROMIUM_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within {CHROMIUM_TIMEOUT:?}: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "chromium failed ({status}): {}",
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    std::fs::read_to_string(&stdout_path).unwrap()
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.canonicalize().unwrap().display())
}

/// Measures every chart as the browser laid it out: a copy of the report with a probe
/// script (the report itself has none) that writes one line per chart into the DOM.
const PROBE: &str = r#"<script>
const lines = [...document.querySelectorAll('svg.chart')].map(svg => {
  const r = svg.getBoundingClientRect();
  const drawn = [...svg.querySelectorAll('path.series')].filter(p => p.getTotalLength() > 0).length;
  return [svg.dataset.chart, Math.round(r.width), Math.round(r.height), drawn,
          svg.querySelectorAll('circle').length, svg.querySelectorAll('rect.bar').length,
          svg.querySelectorAll('text').length].join(' ');
});
const pre = document.createElement('pre');
pre.id = 'probe';
pre.textContent = lines.join('\n');
document.body.appendChild(pre);
</script>"#;

#[derive(Debug)]
struct Rendered {
    chart: String,
    width: u32,
    height: u32,
    lines: u32,
    markers: u32,
    bars: u32,
    texts: u32,
}

fn probe(work: &Path, html: &str, name: &str) -> (String, Vec<Rendered>) {
    let page = work.join(format!("{name}-probe.html"));
    std::fs::write(&page, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let dom = run_chromium(
        work,
        &["--dump-dom".into(), "--window-size=1400,3000".into()],
        &file_url(&page),
    );
    let text = dom
        .split("<pre id=\"probe\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "no probe output in the DOM: {}",
                &dom[..dom.len().min(2000)]
            )
        });
    let rendered = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let n = |i: usize| f[i].parse::<u32>().unwrap();
            Rendered {
                chart: f[0].to_owned(),
                width: n(1),
                height: n(2),
                lines: n(3),
                markers: n(4),
                bars: n(5),
                texts: n(6),
            }
        })
        .collect();
    (dom, rendered)
}

/// Text checks: self-contained, every chart there, nothing unescaped.
fn check_self_contained(html: &str, charts: &[&str]) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    let lower = html.to_ascii_lowercase();
    for banned in [
        "src=\"http",
        "href=\"http",
        "src='http",
        "href='http",
        "url(http",
        "@import",
        "<script",
        "<link",
        "<iframe",
        "<img",
    ] {
        assert!(
            !lower.contains(banned),
            "the report must not contain {banned}"
        );
    }
    for chart in charts {
        assert_eq!(
            html.matches(&format!("data-chart=\"{chart}\"")).count(),
            1,
            "chart {chart} missing or repeated"
        );
    }
    assert_eq!(html.matches("data-chart=").count(), charts.len());
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    assert!(!html.contains("NaN") && !html.contains("inf,") && !html.contains("=\"inf"));
}

fn check_rendered(rendered: &[Rendered], charts: &[&str]) {
    let names: Vec<&str> = rendered.iter().map(|r| r.chart.as_str()).collect();
    let mut want: Vec<&str> = charts.to_vec();
    let mut got = names.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "charts the browser laid out");
    for r in rendered {
        // Charts are 820 units wide, shown at up to 1000 px.
        assert!(r.width >= 800, "{r:?} is too narrow to read");
        let min_height = if r.chart == "size-classes" { 150 } else { 350 };
        assert!(r.height >= min_height, "{r:?} is too flat to read");
        assert!(r.texts >= 8, "{r:?} lacks titles, ticks or labels");
        if r.chart == "size-classes" {
            assert!(r.bars >= 2, "{r:?} has no bars");
        } else {
            assert!(r.lines + r.markers > 0, "{r:?} draws no data");
        }
    }
}

fn screenshot(work: &Path, html_path: &Path, name: &str) -> PathBuf {
    let keep = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report_html");
    std::fs::create_dir_all(&keep).unwrap();
    let png = keep.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    run_chromium(
        work,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1400,3000".into(),
        ],
        &file_url(html_path),
    );
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 20_000,
        "screenshot {} is {size} bytes",
        png.display()
    );
    png
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_replay_report_is_self_contained_and_renders_every_chart() {
    let work = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let result = delay_result(&registry, work.path()).await;
    let html = html_report(&result).await;

    let charts: Vec<&str> = COMMON_CHARTS.iter().chain(&DELAY_CHARTS).copied().collect();
    check_self_contained(&html, &charts);
    // Latency over time: one line per operation (its p99), no medians beside them.
    let over_time = &html[html.find("data-chart=\"latency-over-time\"").unwrap()..];
    let over_time = &over_time[..over_time.find("</svg>").unwrap()];
    assert!(over_time.contains(" p99"), "no p99 line");
    assert!(
        !over_time.contains(" p50"),
        "medians in the latency-over-time chart"
    );
    // Header, accounting, checks and the delay-mode columns.
    for needle in [
        "delay (open)",
        "Trace accounting",
        "records = replayed + folded + skipped: balanced",
        "Self-checks",
        "canary wake-up",
        "service p99",
        "lag p99",
        "Resolved configuration",
        "config hash",
        &registry.url,
        // Who costs most: the trace's repositories and clients, linked from the navigation.
        "<a href=\"#attribution\">",
        "<section id=\"attribution\"><h2>Who costs most</h2>",
        "id=\"by-repository\"",
        "id=\"by-client\"",
    ] {
        assert!(html.contains(needle), "report lacks {needle:?}");
    }
    let summary = crate::common::summary_json(&result);
    if summary["totals"]["errors"].as_u64().unwrap() > 0 {
        assert!(html.contains("Errors and events") && html.contains("http_404"));
    }

    let (dom, rendered) = probe(work.path(), &html, "delay");
    assert_eq!(dom.matches("data-chart=").count(), charts.len());
    assert!(
        dom.matches("<path").count() >= 10,
        "too few lines in the DOM"
    );
    check_rendered(&rendered, &charts);
    screenshot(work.path(), &result.join("report.html"), "delay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_report_renders_and_charts_export_as_svg_and_png() {
    let work = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let result = push_result(&registry, work.path()).await;
    let chart_dir = work.path().join("charts");
    let status = creb(&[
        "report",
        result.to_str().unwrap(),
        "--format",
        "html",
        "--charts",
        chart_dir.to_str().unwrap(),
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let html = std::fs::read_to_string(result.join("report.html")).unwrap();
    // A push without a failure has no errors chart: a chart of nothing is left out.
    assert_eq!(load(&result).unwrap().summary.totals.errors, 0);
    let charts: Vec<&str> = COMMON_CHARTS
        .iter()
        .copied()
        .filter(|c| *c != "errors")
        .collect();
    assert!(
        !html.contains("data-chart=\"errors\""),
        "an empty errors chart"
    );
    check_self_contained(&html, &charts);
    assert!(html.contains("push (closed, in-flight="), "model label");
    for absent in DELAY_CHARTS {
        assert!(!html.contains(absent), "{absent} is for delay mode only");
    }
    let (_, rendered) = probe(work.path(), &html, "push");
    check_rendered(&rendered, &charts);
    screenshot(work.path(), &result.join("report.html"), "push");

    // One SVG and one PNG per chart, with the chart's name.
    let mut names: Vec<String> = std::fs::read_dir(&chart_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = charts
        .iter()
        .flat_map(|c| [format!("{c}.png"), format!("{c}.svg")])
        .collect();
    want.sort();
    assert_eq!(names, want);
    for &c in &charts {
        let svg = std::fs::read_to_string(chart_dir.join(format!("{c}.svg"))).unwrap();
        assert!(svg.starts_with("<?xml") && svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains(&format!("data-chart=\"{c}\"")));
        let png = std::fs::read(chart_dir.join(format!("{c}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{c}.png");
        assert!(png.len() > 10_000, "{c}.png is only {} bytes", png.len());
    }

    // The standalone SVGs load as images in a browser (a malformed one would not).
    let page = chart_dir.join("index.html");
    let imgs: String = charts
        .iter()
        .map(|c| format!("<img data-chart=\"{c}\" src=\"{c}.svg\">"))
        .collect();
    std::fs::write(
        &page,
        format!(
            "<!DOCTYPE html><html><body>{imgs}<script>window.addEventListener('load', () => {{ \
             const p = document.createElement('pre'); p.id = 'probe'; \
             p.textContent = [...document.images].map(i => i.dataset.chart + ' ' + i.naturalWidth).join('\\n'); \
             document.body.appendChild(p); }});</script></body></html>"
        ),
    )
    .unwrap();
    let dom = run_chromium(work.path(), &["--dump-dom".into()], &file_url(&page));
    for c in &charts {
        assert!(
            dom.contains(&format!("{c} 820")),
            "{c}.svg did not load: {dom}"
        );
    }

    // In-process, the same function the flag calls.
    let set = load(&result).unwrap();
    let again = work.path().join("again");
    let files = creb::report::html::write_charts(&set, &again).unwrap();
    assert_eq!(files.len(), charts.len() * 2);
    assert!(files.iter().all(|f| f.starts_with(&again) && f.exists()));
}

#[tokio::test]
async fn text_from_results_is_escaped() {
    let work = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let result = push_result(&registry, work.path()).await;
    let mut set = load(&result).unwrap();
    let evil = "<script>alert('x')</script>";
    set.summary.registry = format!("http://example.invalid/{evil}");
    set.summary.warnings.push(creb::results::Warning {
        kind: "odd\"kind".into(),
        message: format!("message {evil} & more"),
    });
    set.meta.config = serde_json::json!({ "note": evil });
    set.summary.by_repository[0].name = evil.to_owned();
    let html = creb::report::html::render(&set).unwrap();
    assert!(
        !html.contains(evil),
        "raw markup from results reached the page"
    );
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("odd&quot;kind"));
    assert!(html.contains("2 warnings") || html.contains("1 warning"));
}

/// A capacity search's page (`report OUT --format html` where OUT holds capacity.json) of a
/// synthetic dal trace against docker-registry: self-contained, the answer, both curves laid out by the browser with data drawn (the
/// latency percentiles and the achieved rate against the offered load), and the steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_report_renders_its_curves() {
    let work = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    // A synthetic trace of dal's characterization: 600 records, about 2.3 a second.
    let trace = work.path().join("dal.json");
    let status = creb(&[
        "trace",
        "synth",
        "--profile",
        "dal",
        "--requests",
        "600",
        "--max-object-size",
        "256KiB",
        "-o",
        trace.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let out = work.path().join("capacity");
    let status = creb(&[
        "capacity",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--slo",
        "error_rate < 50%",
        "--slo",
        "p99(image_pull) < 10s",
        "--speed",
        "16",
        "--step",
        "500ms",
        "--step-warmup",
        "100ms",
        "--max-speed",
        "64",
        "--concurrency",
        "32",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let html = html_report(&out).await;
    let charts = ["capacity-latency", "capacity-throughput"];
    check_self_contained(&html, &charts);
    // The page says what capacity.json says (the answer itself depends on the machine).
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("capacity.json")).unwrap()).unwrap();
    let answer = match c["capacity"]["speed"].as_f64() {
        Some(speed) => format!("{speed:.3}×"),
        None => "no load sustained".into(),
    };
    let limited = format!("limited by {}", c["limited_by"].as_str().unwrap());
    let first_outcome = format!(">{}<", c["steps"][0]["outcome"].as_str().unwrap());
    // Sessions beside operations, and the latency objective drawn as a line.
    for needle in [
        "Answer",
        &answer,
        &limited,
        &first_outcome,
        "blob_get p50",
        "image_pull p50",
        "objective: p99(image_pull) &lt; 10s",
    ] {
        assert!(html.contains(needle), "no {needle:?} in the page");
    }
    assert!(
        c["steps"][0]["percentiles"].get("image_pull").is_some(),
        "{}",
        c["steps"][0]
    );
    // The workload's operations only: an upload's PATCHes are in each step's own report.
    assert!(
        !html.contains("upload_patch p50"),
        "request-level lines in the curve"
    );
    let (_, rendered) = probe(work.path(), &html, "capacity");
    check_rendered(&rendered, &charts);
    screenshot(work.path(), &out.join("report.html"), "capacity");
}
