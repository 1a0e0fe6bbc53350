//! `histograms.hlog`: every interval's histograms in the HdrHistogram interval log format
//! (V2 encoding, DEFLATE-compressed, base64), readable by any HdrHistogram tool.
//!
//! One tagged line per (interval, operation, size class, metric) that saw values. Tags are
//! `OP.CLASS.METRIC` — e.g. `blob_get.lt_1mib.latency` — with metrics `latency`, `service`,
//! `lag`, `ttfb` and `error`, all in microseconds. Interval timestamps are offsets from the
//! `StartTime` header, the run's anchor (the shared start of all hosts), so interval *k* of
//! every host starts at the same offset and hosts merge by index.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Serializer, V2Serializer};
use hdrhistogram::{Counter, Histogram};

use crate::metrics::hist::{new_histogram, Recording, SparseHistogram};
use crate::metrics::{Op, SizeClass, Stats, StatsTable};

/// hdrhistogram's V2 encoding, compressed as the crate's `V2DeflateSerializer` compresses it
/// (zlib at the default level, behind the cookie and the compressed length), byte for byte
/// (unit test) — with one compressor kept for every histogram and reset between them. The
/// crate's serializer makes a new one per histogram: a few hundred kilobytes of tables
/// allocated, zeroed and freed for each histogram of each interval (docs/benchmarks.md,
/// step 18).
pub struct LogSerializer {
    v2: V2Serializer,
    plain: Vec<u8>,
    packed: Vec<u8>,
    deflate: flate2::Compress,
}

impl Default for LogSerializer {
    fn default() -> Self {
        LogSerializer {
            v2: V2Serializer::new(),
            plain: Vec::new(),
            packed: Vec::new(),
            deflate: flate2::Compress::new(flate2::Compression::default(), true),
        }
    }
}

impl std::fmt::Debug for LogSerializer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSerializer").finish_non_exhaustive()
    }
}

impl LogSerializer {
    pub fn new() -> LogSerializer {
        LogSerializer::default()
    }
}

impl Serializer for LogSerializer {
    type SerializeError = io::Error;

    fn serialize<T: Counter, W: Write>(
        &mut self,
        h: &Histogram<T>,
        writer: &mut W,
    ) -> io::Result<usize> {
        self.plain.clear();
        let len = self
            .v2
            .serialize(h, &mut self.plain)
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        self.packed.clear();
        self.packed.reserve(len / 2 + 64);
        self.packed
            .extend_from_slice(&V2_COMPRESSED_COOKIE.to_be_bytes());
        self.packed.extend_from_slice(&[0; 4]);
        self.deflate.reset();
        loop {
            let read = usize::try_from(self.deflate.total_in()).unwrap_or(usize::MAX);
            let rest = self.plain.get(read..len).unwrap_or_default();
            let status = self
                .deflate
                .compress_vec(rest, &mut self.packed, flate2::FlushCompress::Finish)
                .map_err(io::Error::other)?;
            if status == flate2::Status::StreamEnd {
                break;
            }
            // The output is full: room for more, then on.
            self.packed.reserve(self.packed.len().max(64));
        }
        let compressed = u32::try_from(self.packed.len() - 8)
            .map_err(|_| io::Error::other("a histogram over 4 GiB compressed"))?;
        self.packed[4..8].copy_from_slice(&compressed.to_be_bytes());
        writer.write_all(&self.packed)?;
        Ok(self.packed.len())
    }
}

/// The histogram metrics of a cell, as tag suffixes.
pub const METRICS: [&str; 5] = ["latency", "service", "lag", "ttfb", "error"];

/// The histograms of a cell by metric name.
pub fn cell_histograms<H>(stats: &Stats<H>) -> [(&'static str, Option<&H>); 5] {
    [
        ("latency", Some(&stats.latency)),
        ("service", stats.service.as_ref()),
        ("lag", stats.schedule_lag.as_ref()),
        ("ttfb", stats.ttfb.as_ref()),
        ("error", stats.error_latency.as_ref()),
    ]
}

/// Adds a histogram into a cell's slot for `metric`.
pub fn set_cell_histogram(stats: &mut Stats, metric: &str, h: &SparseHistogram) {
    let slot = match metric {
        "latency" => {
            h.add_to(&mut stats.latency);
            return;
        }
        "service" => &mut stats.service,
        "lag" => &mut stats.schedule_lag,
        "ttfb" => &mut stats.ttfb,
        "error" => &mut stats.error_latency,
        _ => return,
    };
    h.add_to(slot.get_or_insert_with(new_histogram));
}

/// The latency a tag's metric names, as the run's batches keep it.
pub fn batch_metric(metric: &str) -> Option<crate::metrics::uncertainty::Metric> {
    use crate::metrics::uncertainty::Metric;
    Some(match metric {
        "latency" => Metric::Latency,
        "service" => Metric::Service,
        "lag" => Metric::ScheduleLag,
        "ttfb" => Metric::Ttfb,
        "error" => Metric::ErrorLatency,
        _ => return None,
    })
}

pub fn tag_of(op: Op, class: SizeClass, metric: &str) -> String {
    format!("{}.{}.{metric}", op.name(), class.name())
}

/// Splits a tag back into (op, class, metric).
pub fn parse_tag(tag: &str) -> Option<(Op, SizeClass, &str)> {
    let mut parts = tag.splitn(3, '.');
    let op = Op::from_name(parts.next()?)?;
    let class_name = parts.next()?;
    let class = SizeClass::ALL
        .into_iter()
        .find(|c| c.name() == class_name)?;
    let metric = parts.next()?;
    METRICS.contains(&metric).then_some((op, class, metric))
}

/// Writes the log's header: creator comment and StartTime (the anchor).
pub fn write_header(out: &mut impl Write, anchor: SystemTime) -> io::Result<()> {
    let mut serializer = LogSerializer::new();
    IntervalLogWriterBuilder::new()
        .add_comment(concat!(
            "creb-rs ",
            env!("CARGO_PKG_VERSION"),
            " interval log"
        ))
        .add_comment(
            "tags are OP.CLASS.METRIC; values in microseconds; intervals aligned to StartTime",
        )
        .with_start_time(anchor)
        .begin_log_with(out, &mut serializer)
        .map(|_| ())
}

/// Appends the histograms of one interval, kept sparse by the aggregator; each is made
/// dense in `scratch` in turn for the encoder.
pub fn write_interval(
    out: &mut impl Write,
    serializer: &mut LogSerializer,
    start: Duration,
    length: Duration,
    table: &StatsTable<SparseHistogram>,
    scratch: &mut Option<Histogram<u64>>,
) -> io::Result<()> {
    write_table(out, serializer, start, length, table, scratch, tag_of)
}

/// Appends every non-empty histogram of `table`, spanning `start..start + length`, tagged
/// by `tag` (interval logs use [`tag_of`]; `endpoints.hlog` prefixes the endpoint).
pub fn write_table<H: Recording>(
    out: &mut impl Write,
    serializer: &mut LogSerializer,
    start: Duration,
    length: Duration,
    table: &StatsTable<H>,
    scratch: &mut Option<Histogram<u64>>,
    tag: impl Fn(Op, SizeClass, &str) -> String,
) -> io::Result<()> {
    let mut writer = IntervalLogWriterBuilder::new()
        .begin_log_with(out, serializer)
        .map_err(io::Error::other)?;
    for ((op, class), stats) in table.cells() {
        for (metric, h) in cell_histograms(stats) {
            let Some(h) = h.filter(|h| !h.is_empty()) else {
                continue;
            };
            let tag = tag(*op, *class, metric);
            writer
                .write_histogram(h.dense(scratch), start, length, Tag::new(&tag))
                .map_err(|e| io::Error::other(format!("{e:?}")))?;
        }
    }
    Ok(())
}

/// One interval's histograms read back: tag → histogram. Kept sparse: a dense histogram
/// with the standard settings is 188 KB however few values it holds, so a log of an hour
/// of 30 series would need 20 GB dense and needs a few hundred MB sparse.
pub type IntervalHistograms = BTreeMap<String, SparseHistogram>;

/// Appends histograms already keyed by tag (a merge).
pub fn write_tagged(
    out: &mut impl Write,
    serializer: &mut LogSerializer,
    start: Duration,
    length: Duration,
    histograms: &IntervalHistograms,
) -> io::Result<()> {
    let mut writer = IntervalLogWriterBuilder::new()
        .begin_log_with(out, serializer)
        .map_err(io::Error::other)?;
    for (tag, h) in histograms {
        if h.is_empty() {
            continue;
        }
        writer
            .write_histogram(&h.to_dense(), start, length, Tag::new(tag))
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
    }
    Ok(())
}

/// A parsed interval log.
#[derive(Debug, Default)]
pub struct HlogContents {
    /// Seconds since the epoch of the StartTime header.
    pub start_time: Option<Duration>,
    /// Interval index → histograms, given the interval length.
    pub intervals: BTreeMap<u64, IntervalHistograms>,
}

#[derive(Debug, thiserror::Error)]
pub enum HlogError {
    #[error("line at byte {0} is not an interval log entry")]
    Parse(usize),
    #[error("histogram of tag '{tag}' at {start:.3}s cannot be decoded: {reason}")]
    Histogram {
        tag: String,
        start: f64,
        reason: String,
    },
}

/// The HdrHistogram V2 encoding: cookies (base cookie with the word size, 8, in bits 4..8, as
/// hdrhistogram writes and accepts them), and the header before the counts.
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;
const V2_HEADER_LEN: usize = 40;
/// The most an encoded histogram may inflate to. A standard histogram has about 23,000
/// counters of at most 9 LEB128 bytes each: 4 MiB is ample.
const MAX_INFLATED: usize = 4 << 20;

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_be_bytes)
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_be_bytes)
}

/// Checks an encoded histogram before its counts are read, and returns it uncompressed.
/// The lengths and bounds in an encoding are the writer's word: read on trust (as
/// hdrhistogram's deserializer reads them, allocating what they say), a 100-byte line
/// claiming a 3.7 GB payload aborted the process (found by `fuzz/` target `hlog`). Only the
/// standard settings are accepted, so a histogram costs what creb-rs's own do.
fn checked_encoding(raw: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    use std::io::Read as _;
    let short = || "shorter than its header".to_owned();
    let decoded = match be_u32(raw, 0).ok_or_else(short)? {
        V2_COMPRESSED_COOKIE => {
            let len = be_u32(raw, 4).ok_or_else(short)? as usize;
            let body = raw.get(8..).unwrap_or_default();
            let body = &body[..len.min(body.len())];
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(body)
                .take(MAX_INFLATED as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("cannot be inflated: {e}"))?;
            if out.len() > MAX_INFLATED {
                return Err(format!("inflates to more than {MAX_INFLATED} bytes"));
            }
            std::borrow::Cow::Owned(out)
        }
        V2_COOKIE => std::borrow::Cow::Borrowed(raw),
        other => return Err(format!("unknown encoding (cookie {other:#010x})")),
    };
    if be_u32(&decoded, 0) != Some(V2_COOKIE) || decoded.len() < V2_HEADER_LEN {
        return Err("not a V2 histogram encoding".into());
    }
    let payload = be_u32(&decoded, 4).ok_or_else(short)? as usize;
    if payload > decoded.len() - V2_HEADER_LEN {
        return Err(format!(
            "announces {payload} bytes of counts, has {}",
            decoded.len() - V2_HEADER_LEN
        ));
    }
    let s = crate::metrics::hist::HISTOGRAM_SETTINGS;
    let (digits, low, high) = (
        be_u32(&decoded, 12).ok_or_else(short)?,
        be_u64(&decoded, 16).ok_or_else(short)?,
        be_u64(&decoded, 24).ok_or_else(short)?,
    );
    if (digits, low, high)
        != (
            u32::from(s.significant_digits),
            s.lowest_discernible,
            s.highest_trackable,
        )
    {
        return Err(format!(
            "written with other histogram settings ({low}..{high}, {digits} digits; creb-rs uses {}..{} {}, {} digits)",
            s.lowest_discernible, s.highest_trackable, s.unit, s.significant_digits
        ));
    }
    if be_u32(&decoded, 8) != Some(0) {
        return Err("has a normalizing index offset, which creb-rs never writes".into());
    }
    Ok(decoded)
}

/// The counts of an encoding [`checked_encoding`] returned (its payload's length checked).
fn counts_of(encoded: &[u8]) -> &[u8] {
    let payload = be_u32(encoded, 4).unwrap_or(0) as usize;
    &encoded[V2_HEADER_LEN..V2_HEADER_LEN + payload]
}

/// Parses a whole log; `interval` converts timestamps to indices.
pub fn read(bytes: &[u8], interval: Duration) -> Result<HlogContents, HlogError> {
    let mut contents = HlogContents::default();
    for entry in IntervalLogIterator::new(bytes) {
        match entry {
            Err(hdrhistogram::serialization::interval_log::LogIteratorError::ParseError {
                offset,
            }) => {
                return Err(HlogError::Parse(offset));
            }
            Ok(LogEntry::StartTime(t)) => contents.start_time = Some(t),
            Ok(LogEntry::BaseTime(_)) => {}
            Ok(LogEntry::Interval(ih)) => {
                let tag = ih.tag().map(|t| t.as_str().to_owned()).unwrap_or_default();
                let start = ih.start_timestamp();
                let fail = |reason: String| HlogError::Histogram {
                    tag: tag.clone(),
                    start: start.as_secs_f64(),
                    reason,
                };
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(ih.encoded_histogram())
                    .map_err(|e| fail(e.to_string()))?;
                let encoded = checked_encoding(&raw).map_err(fail)?;
                let index = (start.as_secs_f64() / interval.as_secs_f64().max(1e-9)).round() as u64;
                let slot = contents.intervals.entry(index).or_default();
                slot.entry(tag.clone())
                    .or_default()
                    .add_encoded(counts_of(&encoded))
                    .map_err(fail)?;
            }
        }
    }
    Ok(contents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{new_histogram, HttpStatuses, Outcome, Sample, Timing};
    use tokio::time::Instant;

    fn sample(op: Op, ms: u64) -> Sample {
        let end = Instant::now();
        Sample {
            op,
            outcome: Outcome::Ok,
            size_class: SizeClass::Under1MiB,
            timing: Timing {
                intended: None,
                ready: None,
                sent: end - Duration::from_millis(ms),
                first_byte: None,
                end,
            },
            bytes_sent: 0,
            bytes_received: 10,
            http: HttpStatuses::one(Some(200)),
        }
    }

    #[test]
    fn the_log_s_encoding_is_hdrhistogram_s_byte_for_byte() {
        let mut ours = LogSerializer::new();
        let mut theirs = hdrhistogram::serialization::V2DeflateSerializer::new();
        // Empty, one value, a spread, and a large one that compresses poorly (its output can
        // outgrow the first reservation).
        let mut histograms = vec![new_histogram(), new_histogram()];
        histograms[1].record(1_234).unwrap();
        let mut spread = new_histogram();
        for v in (1..200_000u64).step_by(7) {
            spread.record(v * v % 3_600_000_000).unwrap();
        }
        histograms.push(spread);
        let mut big = new_histogram();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            big.saturating_record_n(x % 3_600_000_000, x % 1_000);
        }
        histograms.push(big);
        // The same serializer, used again, gives the same bytes each time.
        for round in 0..2 {
            for h in &histograms {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let n = ours.serialize(h, &mut a).unwrap();
                theirs.serialize(h, &mut b).unwrap();
                assert_eq!(n, a.len());
                assert!(
                    a == b,
                    "round {round}: {} against {} bytes",
                    a.len(),
                    b.len()
                );
                let back: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
                    .deserialize(&mut std::io::Cursor::new(&a))
                    .unwrap();
                assert_eq!(&back, h);
            }
        }
    }

    #[test]
    fn round_trip_is_exact() {
        let mut t0 = StatsTable::<SparseHistogram>::default();
        let mut t1 = StatsTable::<SparseHistogram>::default();
        for ms in [1, 5, 10, 250] {
            t0.record(&sample(Op::BlobGet, ms));
            t1.record(&sample(Op::ManifestGet, ms * 2));
        }
        let mut out = Vec::new();
        write_header(
            &mut out,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
        .unwrap();
        let mut ser = LogSerializer::new();
        let sec = Duration::from_secs(1);
        let mut scratch = None;
        write_interval(&mut out, &mut ser, Duration::ZERO, sec, &t0, &mut scratch).unwrap();
        write_interval(&mut out, &mut ser, sec * 3, sec, &t1, &mut scratch).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.contains("#[StartTime: 1700000000.000"), "{text}");
        assert!(text.contains("Tag=blob_get.lt_1mib.latency,"), "{text}");
        let back = read(&out, sec).unwrap();
        assert_eq!(back.start_time, Some(Duration::from_secs(1_700_000_000)));
        assert_eq!(back.intervals.len(), 2);
        let h = back.intervals[&0]["blob_get.lt_1mib.latency"].to_dense();
        let mut dense = StatsTable::default();
        t0.add_to(&mut dense);
        let original = &dense.op_total(Op::BlobGet).unwrap().latency;
        assert_eq!(&h, original);
        assert!(back.intervals[&3].contains_key("manifest_get.lt_1mib.latency"));
    }

    #[test]
    fn tags_parse_back() {
        assert_eq!(
            parse_tag("blob_get.1mib_10mib.lag"),
            Some((Op::BlobGet, SizeClass::To10MiB, "lag"))
        );
        assert_eq!(parse_tag("nope.lt_1mib.latency"), None);
        assert_eq!(parse_tag("blob_get.lt_1mib.other"), None);
        let mut s = Stats::default();
        let mut h = new_histogram();
        h.record(5).unwrap();
        let mut sparse = SparseHistogram::default();
        sparse.add_dense(&h);
        set_cell_histogram(&mut s, "lag", &sparse);
        set_cell_histogram(&mut s, "lag", &sparse);
        assert_eq!(s.schedule_lag.unwrap().len(), 2);
    }

    /// A log of one interval line holding `encoded`.
    fn line_of(encoded: &[u8]) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(encoded);
        format!("Tag=blob_get.lt_1mib.latency,0.000,1.000,1.000,{b64}\n").into_bytes()
    }

    fn deflated(v2: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(v2).unwrap();
        let body = z.finish().unwrap();
        let mut out = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn standard_v2() -> Vec<u8> {
        use hdrhistogram::serialization::Serializer as _;
        let mut h = new_histogram();
        h.record(1234).unwrap();
        let mut v2 = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&h, &mut v2)
            .unwrap();
        v2
    }

    /// fuzz/ target `hlog`, out-of-memory: a payload length of ~3.7 GB in the header made the
    /// deserializer allocate it before reading a byte.
    #[test]
    fn fuzz_hlog_oom_huge_payload_length_is_an_error() {
        let one = Duration::from_secs(1);
        assert!(read(&line_of(&deflated(&standard_v2())), one).is_ok());
        assert!(read(&line_of(&standard_v2()), one).is_ok());
        let mut v2 = standard_v2();
        v2[4..8].copy_from_slice(&0xdfff_ff0eu32.to_be_bytes());
        for encoded in [deflated(&v2), v2] {
            let e = read(&line_of(&encoded), one).unwrap_err().to_string();
            assert!(e.contains("announces 3758096142 bytes"), "{e}");
        }
        // A deflate bomb stops at the cap.
        let bomb = deflated(&vec![0u8; MAX_INFLATED + 100]);
        let e = read(&line_of(&bomb), one).unwrap_err().to_string();
        assert!(e.contains("inflates to more than"), "{e}");
    }

    /// Bounds other than creb-rs's would size the counts array (up to u64::MAX, 5 digits).
    #[test]
    fn fuzz_hlog_foreign_settings_are_refused() {
        use hdrhistogram::serialization::Serializer as _;
        let mut h = Histogram::<u64>::new_with_bounds(1, u64::MAX / 2, 5).unwrap();
        h.record(7).unwrap();
        let mut v2 = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&h, &mut v2)
            .unwrap();
        let e = read(&line_of(&v2), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("other histogram settings"), "{e}");
    }

    /// An encoding shifted by a normalizing index offset is refused, not read unshifted.
    #[test]
    fn a_normalizing_index_offset_is_refused() {
        let mut v2 = standard_v2();
        assert!(read(&line_of(&v2), Duration::from_secs(1)).is_ok());
        v2[11] = 1;
        let e = read(&line_of(&v2), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("normalizing index offset"), "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(read(b"Tag=x,0.0,1.0,1.0,AAAA\n", Duration::from_secs(1)).is_err());
        assert!(read(b"not a log at all\n", Duration::from_secs(1)).is_err());
    }
}
