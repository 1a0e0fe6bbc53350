//! `trace import`: a registry's access logs turned into a trace in the IBM format, as the
//! FAST'18 traces were made (collect the logs, anonymize, replay). Streaming and of
//! constant memory: lines are read one at a time, and a reorder buffer of a minute of log
//! time puts each request at its start (its log line is written when it ends).
//!
//! Every line is accounted for: imported, skipped with a reason (not an API call, the
//! catalog, not a request line), or malformed (its file and line named; `--strict` fails
//! the import on one).

mod anonymize;
mod distribution;
mod line;
mod nginx;
mod sizes;
mod zot;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

pub use anonymize::Anonymizer;
pub use line::{parse_go_duration, LogRequest, Parsed};
pub use sizes::{LearnedSizes, SizeReport};

use crate::trace::record::{mount_query, Method};
use crate::trace::write::{ArrayWriter, RawRecord, TraceSink};

/// Log time a request may be logged after one that started later: the reorder buffer.
const REORDER_MS: f64 = 60_000.0;
/// Malformed lines named in the report, at most.
const PROBLEMS_KEPT: usize = 20;

/// The end of the User-Agent of creb-rs's own `--sizes-from` HEADs: an import leaves the
/// requests that carry it out (skipped as [`OWN_SIZING`]), so importing a live log again
/// does not import the HEADs the last import sent. The rest of creb-rs's traffic (a push or
/// a replay whose log is imported on purpose) is imported like any client's.
pub const SIZING_MARK: &str = "(trace import --sizes-from)";

/// Why a request is left out: it is one of creb-rs's own `--sizes-from` HEADs.
pub const OWN_SIZING: &str = "creb_rs_sizes_from";

/// The User-Agent `--sizes-from` sends.
pub fn sizing_user_agent() -> String {
    format!("creb-rs/{} {SIZING_MARK}", env!("CARGO_PKG_VERSION"))
}

/// Lines read before a log in which none is a request of the format is refused: a log of
/// another layout is said to be one on its first lines, not after the whole file.
pub const FIRST_LINES: u64 = 1000;

/// The log layouts `trace import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// distribution 2.x / v3 with `log.formatter: json`.
    Distribution,
    /// nginx: `combined` plus `$request_time $upstream_response_time [$msec]`.
    Nginx,
    /// nginx with a JSON `log_format`.
    NginxJson,
    /// zot's JSON log (`"HTTP API"` lines).
    Zot,
}

impl LogFormat {
    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Distribution => "distribution",
            LogFormat::Nginx => "nginx",
            LogFormat::NginxJson => "nginx-json",
            LogFormat::Zot => "zot",
        }
    }
}

/// Settings of an import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub format: LogFormat,
    pub anonymizer: Anonymizer,
    /// Blob sizes asked of the registry the logs came from (`--sizes-from`).
    pub learned: LearnedSizes,
}

/// A line that could not be read, named.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub file: String,
    pub line: u64,
    pub why: String,
}

/// What an import read, wrote and skipped.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImportReport {
    pub format: Option<LogFormat>,
    pub files: Vec<String>,
    pub out: String,
    pub lines: u64,
    pub imported: u64,
    /// Lines that are not requests of the registry API, by reason.
    pub skipped: BTreeMap<String, u64>,
    pub malformed: u64,
    /// The first malformed lines.
    pub problems: Vec<Problem>,
    /// Requests by method, and by status class (`2xx`, `4xx`, …).
    pub methods: BTreeMap<String, u64>,
    pub statuses: BTreeMap<String, u64>,
    pub first: Option<String>,
    pub last: Option<String>,
    pub span_s: f64,
    /// Requests written after one that started later (longer than the reorder buffer).
    pub out_of_order: u64,
    pub anonymized: bool,
    /// Some timestamps are known to the second only (nginx without `$msec`).
    pub second_resolution: u64,
    /// How uploads and mounts were sized.
    pub sizes: SizeReport,
}

impl ImportReport {
    fn skip(&mut self, reason: &str) {
        *self.skipped.entry(reason.to_owned()).or_default() += 1;
    }
}

/// A request waiting in the reorder buffer, ordered by start then arrival.
struct Pending {
    start_ms: i64,
    seq: u64,
    record: RawRecord,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.start_ms, self.seq) == (o.start_ms, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.start_ms, self.seq).cmp(&(o.start_ms, o.seq))
    }
}

/// The path of an API URI in the trace's form (`v2/…`, names anonymized; no query but a
/// mount's `?mount=<digest>&from=<repository>`), or the reason it is not replayable.
fn trace_uri(uri: &str, a: &Anonymizer) -> Result<String, &'static str> {
    let path = uri.split(['?', '#']).next().unwrap_or_default();
    let path = path.trim_start_matches('/');
    let Some(rest) = path.strip_prefix("v2") else {
        return Err("not_api");
    };
    let rest = rest.trim_start_matches('/');
    if rest.is_empty() {
        return Ok("v2/".into());
    }
    if rest.trim_end_matches('/') == "_catalog" {
        return Err("catalog");
    }
    if let Some(repo) = rest.strip_suffix("/tags/list") {
        return Ok(format!("v2/{}/tags/list", a.repository(repo)));
    }
    if let Some(i) = rest.rfind("/blobs/uploads") {
        let (repo, tail) = (
            &rest[..i],
            rest[i + "/blobs/uploads".len()..].trim_matches('/'),
        );
        let repo = a.repository(repo);
        let query = &uri[uri.find('?').unwrap_or(uri.len())..];
        return Ok(if tail.is_empty() {
            match mount_query(query) {
                // A mount keeps what makes it one, named as the trace names them.
                Some((digest, from)) => format!(
                    "v2/{repo}/blobs/uploads/?mount={}&from={}",
                    a.digest(&digest),
                    a.repository(&from)
                ),
                None => format!("v2/{repo}/blobs/uploads/"),
            }
        } else if tail.contains('/') {
            return Err("unsupported_endpoint");
        } else {
            format!("v2/{repo}/blobs/uploads/{}", a.session(tail))
        });
    }
    for marker in ["/manifests/", "/blobs/"] {
        if let Some(i) = rest.rfind(marker) {
            let (repo, name) = (&rest[..i], &rest[i + marker.len()..]);
            if repo.is_empty() || name.is_empty() || name.contains('/') {
                return Err("unsupported_endpoint");
            }
            let name = if marker == "/blobs/" {
                a.digest(name)
            } else {
                a.reference(name)
            };
            return Ok(format!("v2/{}{marker}{name}", a.repository(repo)));
        }
    }
    // Referrers, extensions (`_oci`, `_zot`), anything this format has no record for.
    Err("unsupported_endpoint")
}

/// The record of a request, or the reason it is skipped.
fn record(r: &LogRequest, a: &Anonymizer, seq: u64) -> Result<(i64, RawRecord), &'static str> {
    let method = Method::parse(&r.method).ok_or(if line::is_method(&r.method) {
        "unknown_method"
    } else {
        line::NOT_HTTP
    })?;
    let uri = trace_uri(&r.uri, a)?;
    let start_ms = (r.end_ms - r.duration_s * 1000.0).round() as i64;
    let timestamp = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(start_ms.max(0) as u64),
    )
    .to_string();
    Ok((
        start_ms,
        RawRecord {
            host: a.host(if r.host.is_empty() {
                "registry"
            } else {
                &r.host
            }),
            duration: r.duration_s,
            method: method.as_str(),
            remoteaddr: a.client(&r.remote),
            uri,
            useragent: r.useragent.clone().into(),
            status: r.status,
            written: r.written,
            id: match &r.id {
                Some(id) => a.id(id),
                None => format!("{seq:010x}"),
            },
            timestamp,
            size_unknown: false,
            time_ms: start_ms,
        },
    ))
}

/// Reads every line of `files` (plain, gzip or zstd), writes the trace to `out`.
#[allow(clippy::too_many_lines)]
pub fn import(files: &[PathBuf], out: &Path, opts: &ImportOptions) -> anyhow::Result<ImportReport> {
    let mut report = ImportReport {
        format: Some(opts.format),
        files: files.iter().map(|f| f.display().to_string()).collect(),
        out: out.display().to_string(),
        anonymized: opts.anonymizer.is_on(),
        ..ImportReport::default()
    };
    let mut window = Reorder::create(out)?;
    let mut seq = 0u64;
    let mut sizes = sizes::UploadSizes::default();
    let mut requests = 0u64;
    let read = for_each_line(files, opts.format, |file, line_no, parsed| {
        report.lines += 1;
        if report.lines == FIRST_LINES && requests == 0 && !matches!(parsed, Parsed::Request(_)) {
            anyhow::bail!(
                "the first {FIRST_LINES} lines ({}, up to line {line_no}) hold no request in \
                 the {} layout ({} not of it): is --format right?",
                file.display(),
                opts.format.name(),
                report.malformed,
            );
        }
        let request = match parsed {
            Parsed::Request(r) => {
                requests += 1;
                if r.useragent.starts_with("creb-rs/") && r.useragent.ends_with(SIZING_MARK) {
                    report.skip(OWN_SIZING);
                    return Ok(());
                }
                r
            }
            Parsed::Ignored(reason) => {
                report.skip(reason);
                return Ok(());
            }
            Parsed::Malformed(why) => {
                report.malformed += 1;
                if report.problems.len() < PROBLEMS_KEPT {
                    report.problems.push(Problem {
                        file: file.display().to_string(),
                        line: line_no,
                        why,
                    });
                }
                return Ok(());
            }
        };
        let (start_ms, mut record) = match record(&request, &opts.anonymizer, seq) {
            Ok(r) => r,
            Err(reason) => {
                report.skip(reason);
                return Ok(());
            }
        };
        sizes.apply(&request, &mut record, &opts.learned);
        seq += 1;
        report.imported += 1;
        report.second_resolution += u64::from(request.second_resolution);
        *report.methods.entry(record.method.to_owned()).or_default() += 1;
        *report
            .statuses
            .entry(format!("{}xx", record.status / 100))
            .or_default() += 1;
        let pending = Pending {
            start_ms,
            seq,
            record,
        };
        window.push(pending, request.end_ms, &mut report)
    });
    if let Err(e) = read {
        // Nothing half-written stays behind a refused log.
        drop(window);
        let _ = std::fs::remove_file(out);
        return Err(e);
    }
    report.sizes = sizes.report;
    window.finish(&mut report)?;
    Ok(report)
}

/// The reorder window of an import: a request is logged when it ends, the trace is in the
/// order requests start, so each waits until no request still to come can have started
/// before it ([`REORDER_MS`] after the latest end seen), then is written.
struct Reorder<'a> {
    pending: BinaryHeap<Reverse<Pending>>,
    latest_end: f64,
    last_written: i64,
    first_ms: i64,
    last_ms: i64,
    writer: ArrayWriter<TraceSink>,
    out: &'a Path,
}

impl<'a> Reorder<'a> {
    /// The window in front of a new trace file `out`.
    fn create(out: &'a Path) -> anyhow::Result<Reorder<'a>> {
        let sink =
            TraceSink::create(out).with_context(|| format!("cannot create {}", out.display()))?;
        let writer =
            ArrayWriter::new(sink).with_context(|| format!("cannot write {}", out.display()))?;
        Ok(Reorder {
            pending: BinaryHeap::new(),
            latest_end: f64::MIN,
            last_written: i64::MIN,
            first_ms: i64::MAX,
            last_ms: i64::MIN,
            writer,
            out,
        })
    }

    /// Takes in a request that ended at `end_ms`, and writes every one the window holds
    /// that nothing still to come can precede.
    fn push(&mut self, p: Pending, end_ms: f64, report: &mut ImportReport) -> anyhow::Result<()> {
        self.latest_end = self.latest_end.max(end_ms);
        self.pending.push(Reverse(p));
        while let Some(Reverse(p)) = self.pending.peek() {
            if (p.start_ms as f64) >= self.latest_end - REORDER_MS {
                break;
            }
            let Some(Reverse(p)) = self.pending.pop() else {
                break;
            };
            self.emit(p, report)?;
        }
        Ok(())
    }

    fn emit(&mut self, p: Pending, report: &mut ImportReport) -> anyhow::Result<()> {
        if p.start_ms < self.last_written {
            report.out_of_order += 1;
        }
        self.last_written = self.last_written.max(p.start_ms);
        self.first_ms = self.first_ms.min(p.start_ms);
        self.last_ms = self.last_ms.max(p.start_ms);
        self.writer
            .write_record(&p.record)
            .with_context(|| format!("cannot write {}", self.out.display()))
    }

    /// Writes what the window still holds, ends the file, and says what time it spans.
    fn finish(mut self, report: &mut ImportReport) -> anyhow::Result<()> {
        while let Some(Reverse(p)) = self.pending.pop() {
            self.emit(p, report)?;
        }
        let out = self.out;
        let (sink, _) = self
            .writer
            .end()
            .with_context(|| format!("cannot write {}", out.display()))?;
        sink.finish()
            .with_context(|| format!("cannot write {}", out.display()))?;
        let (first_ms, last_ms) = (self.first_ms, self.last_ms);
        if first_ms <= last_ms {
            let at = |ms: i64| {
                humantime::format_rfc3339_millis(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64),
                )
                .to_string()
            };
            report.first = Some(at(first_ms));
            report.last = Some(at(last_ms));
            report.span_s = (last_ms - first_ms) as f64 / 1000.0;
        }
        Ok(())
    }
}

/// Reads every line of `files` (plain, gzip or zstd) in order, giving `f` each non-empty
/// line as `format` parses it, with its file and line number.
fn for_each_line(
    files: &[PathBuf],
    format: LogFormat,
    mut f: impl FnMut(&Path, u64, Parsed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for file in files {
        let input = crate::trace::open_decoded(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let mut input = std::io::BufReader::with_capacity(256 * 1024, input);
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            let n = input
                .read_until(b'\n', &mut buf)
                .with_context(|| format!("{}: cannot read line {}", file.display(), line_no + 1))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let text = String::from_utf8_lossy(&buf);
            let line = text.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            let parsed = match format {
                LogFormat::Distribution => distribution::parse(line),
                LogFormat::Nginx => nginx::parse_combined(line),
                LogFormat::NginxJson => nginx::parse_json(line),
                LogFormat::Zot => zot::parse(line),
            };
            f(file, line_no, parsed)?;
        }
    }
    Ok(())
}

/// The blobs whose sizes `--sizes-from` asks the registry for: (repository, digest) of
/// every upload completed and every mount made in `files`, names as logged, each digest
/// once.
pub fn sized_objects(
    files: &[PathBuf],
    format: LogFormat,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for_each_line(files, format, |_, _, parsed| {
        if let Parsed::Request(r) = parsed {
            if let Some((repo, digest)) = sizes::sized_object(&r) {
                if seen.insert(digest.clone()) {
                    out.push((repo, digest));
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An nginx line of a GET of `name` that ended at `end_s` (Unix seconds) after `took_s`.
    fn nginx(name: &str, end_s: f64, took_s: f64) -> String {
        format!(
            "127.0.0.1 - - [25/Nov/2026:06:28:49 +0000] \"GET /v2/a/b/manifests/{name} HTTP/1.1\" \
             200 527 \"-\" \"docker/24.0\" {took_s:.3} {took_s:.3} {end_s:.3}\n"
        )
    }

    #[test]
    fn requests_are_written_in_the_order_they_started_within_the_reorder_window() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        // Seconds after 2026-11-25T00:00:00Z, as `$msec` logs them.
        let t = |s: f64| 1_795_564_800.0 + s;
        let lines = [
            nginx("first", t(1_000.0), 5.0),  // started at 995
            nginx("third", t(1_000.1), 0.01), // 1000.09
            nginx("second", t(1_001.0), 4.0), // 997
            nginx("fourth", t(1_100.0), 0.0), // 1100, past the window: the three go
            nginx("long", t(1_300.0), 310.0), // 990: "third" was written already
            nginx("last", t(1_300.5), 0.0),   // 1300.5
        ];
        std::fs::write(&log, lines.concat()).unwrap();
        let out = dir.path().join("trace.json");
        let opts = ImportOptions {
            format: LogFormat::Nginx,
            anonymizer: Anonymizer::off(),
            learned: sizes::LearnedSizes::default(),
        };
        let report = import(&[log], &out, &opts).unwrap();
        let trace: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let names: Vec<&str> = trace
            .iter()
            .map(|r| {
                r["http.request.uri"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
            })
            .collect();
        // In the order they started, but "long", which lasted longer than the window: it is
        // written as soon as it is seen, after a later start, and counted so.
        assert_eq!(
            names,
            ["first", "second", "third", "long", "fourth", "last"]
        );
        assert_eq!((report.imported, report.out_of_order), (6, 1));
        assert_eq!(report.first.as_deref(), Some("2026-11-25T00:16:30.000Z"));
        assert_eq!(report.last.as_deref(), Some("2026-11-25T00:21:40.500Z"));
        assert!((report.span_s - 310.5).abs() < 1e-9, "{report:?}");
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1.5s"), Some(1.5));
        assert_eq!(parse_go_duration("1m2.5s"), Some(62.5));
        assert!((parse_go_duration("850µs").unwrap() - 0.00085).abs() < 1e-12);
        assert!((parse_go_duration("1.04028ms").unwrap() - 0.00104028).abs() < 1e-12);
        assert_eq!(parse_go_duration("0"), Some(0.0));
        assert_eq!(parse_go_duration("12"), None);
        assert_eq!(parse_go_duration("ms"), None);
    }

    #[test]
    fn api_uris_keep_their_shape_and_lose_their_names() {
        let a = Anonymizer::keyed(b"k");
        let off = Anonymizer::off();
        assert_eq!(trace_uri("/v2/", &a).unwrap(), "v2/");
        assert_eq!(trace_uri("/v2/_catalog?n=10", &a), Err("catalog"));
        assert_eq!(trace_uri("/debug/health", &a), Err("not_api"));
        assert_eq!(trace_uri("/", &a), Err("not_api"));
        assert_eq!(
            trace_uri("/v2/acme/app/referrers/sha256:00", &a),
            Err("unsupported_endpoint")
        );
        assert_eq!(
            trace_uri(
                "/v2/acme/app/blobs/uploads/1f2e?_state=x&digest=sha256:00",
                &off
            )
            .unwrap(),
            "v2/acme/app/blobs/uploads/1f2e"
        );
        let m = trace_uri("/v2/acme/web/app/manifests/v1.2", &a).unwrap();
        assert!(!m.contains("acme") && !m.contains("v1.2"), "{m}");
        let parts: Vec<&str> = m.split('/').collect();
        assert_eq!(parts.len(), 6, "{m}");
        assert_eq!(parts[4], "manifests");
        let t = trace_uri("/v2/acme/web/app/tags/list?n=100", &a).unwrap();
        assert!(
            t.ends_with("/tags/list") && t.starts_with(&m[..20]),
            "{t} {m}"
        );
        let d = "sha256:aaaa";
        let blob = trace_uri(&format!("/v2/acme/app/blobs/{d}"), &a).unwrap();
        let by_digest = trace_uri(&format!("/v2/acme/app/manifests/{d}"), &a).unwrap();
        assert_eq!(blob.rsplit('/').next(), by_digest.rsplit('/').next());
    }
}
