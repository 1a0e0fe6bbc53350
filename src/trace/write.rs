//! Writing traces in the IBM layout: one JSON array, one object per line, gzip-compressed
//! when the file name ends in `.gz`. [`ArrayWriter`] streams objects given as bytes (records
//! copied verbatim) or as [`RawRecord`]s (records made here: synthetic or imported), holding
//! nothing but the object being written.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;

/// Buffer between the writer and the file.
const BUF: usize = 256 * 1024;

/// One record in the IBM field layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RawRecord {
    pub host: String,
    #[serde(rename = "http.request.duration")]
    pub duration: f64,
    #[serde(rename = "http.request.method")]
    pub method: &'static str,
    #[serde(rename = "http.request.remoteaddr")]
    pub remoteaddr: String,
    #[serde(rename = "http.request.uri")]
    pub uri: String,
    #[serde(rename = "http.request.useragent")]
    pub useragent: std::borrow::Cow<'static, str>,
    #[serde(rename = "http.response.status")]
    pub status: u16,
    #[serde(rename = "http.response.written")]
    pub written: u64,
    pub id: String,
    pub timestamp: String,
    /// `creb.size_unknown` (written only when true): the log an upload was imported from
    /// gave no size for it.
    #[serde(
        rename = "creb.size_unknown",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub size_unknown: bool,
    /// Unix ms, for sorting and splitting (not written).
    #[serde(skip)]
    pub time_ms: i64,
}

/// Where a trace file's bytes go: the file, or a gzip stream into it.
#[derive(Debug)]
pub enum TraceSink {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
}

impl TraceSink {
    /// Creates `path`; gzip when its name ends in `.gz`. A name ending in `.zst` is refused
    /// before anything is written: readers take zstd, this writer does not, and plain text
    /// under that name would mislead.
    pub fn create(path: &Path) -> io::Result<TraceSink> {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("zst") || e.eq_ignore_ascii_case("zstd"))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: traces are written plain or gzip-compressed; name it .json or .json.gz",
                    path.display()
                ),
            ));
        }
        let file = BufWriter::with_capacity(BUF, File::create(path)?);
        Ok(if path.extension().is_some_and(|e| e == "gz") {
            TraceSink::Gzip(flate2::write::GzEncoder::new(
                file,
                flate2::Compression::fast(),
            ))
        } else {
            TraceSink::Plain(file)
        })
    }

    /// Ends the compressed stream and flushes everything to the file.
    pub fn finish(self) -> io::Result<()> {
        match self {
            TraceSink::Gzip(gz) => gz.finish()?.flush(),
            TraceSink::Plain(mut w) => w.flush(),
        }
    }
}

impl Write for TraceSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            TraceSink::Plain(w) => w.write(buf),
            TraceSink::Gzip(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            TraceSink::Plain(w) => w.flush(),
            TraceSink::Gzip(w) => w.flush(),
        }
    }
}

/// Writes objects as one JSON array: `[`, then each object on its own line separated by
/// commas, then `]`.
#[derive(Debug)]
pub struct ArrayWriter<W: Write> {
    w: W,
    written: u64,
}

impl ArrayWriter<TraceSink> {
    /// A trace file at `path` (gzip when the name ends in `.gz`).
    pub fn create(path: &Path) -> io::Result<Self> {
        ArrayWriter::new(TraceSink::create(path)?)
    }

    /// Closes the array and flushes everything to disk; returns the objects written.
    pub fn finish(self) -> io::Result<u64> {
        let (sink, n) = self.end()?;
        sink.finish()?;
        Ok(n)
    }
}

impl<W: Write> ArrayWriter<W> {
    /// Starts the array in `w`.
    pub fn new(mut w: W) -> io::Result<Self> {
        w.write_all(b"[")?;
        Ok(ArrayWriter { w, written: 0 })
    }

    fn separate(&mut self) -> io::Result<()> {
        let sep: &[u8] = if self.written == 0 { b"\n" } else { b",\n" };
        self.written += 1;
        self.w.write_all(sep)
    }

    /// Appends one object given as its exact bytes.
    pub fn write(&mut self, object: &[u8]) -> io::Result<()> {
        self.separate()?;
        self.w.write_all(object)
    }

    /// Appends one record, serialized.
    pub fn write_record(&mut self, record: &RawRecord) -> io::Result<()> {
        self.separate()?;
        serde_json::to_writer(&mut self.w, record)?;
        Ok(())
    }

    /// Objects written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Closes the array; returns the sink and the objects written.
    pub fn end(mut self) -> io::Result<(W, u64)> {
        self.w.write_all(b"\n]\n")?;
        Ok((self.w, self.written))
    }
}

/// Writes records as one JSON array (the IBM layout) into `w`.
pub fn write_json_array(w: &mut impl Write, records: &[RawRecord]) -> io::Result<()> {
    write_json_array_iter(w, records.iter().cloned()).map(drop)
}

/// Writes any sequence of records as one JSON array into `w`, streaming; returns how many.
pub fn write_json_array_iter(
    w: &mut impl Write,
    records: impl IntoIterator<Item = RawRecord>,
) -> io::Result<u64> {
    let mut out = ArrayWriter::new(w)?;
    for r in records {
        out.write_record(&r)?;
    }
    Ok(out.end()?.1)
}

/// Writes records to `path`, gzip-compressed when the name ends in `.gz`.
pub fn write_file(path: &Path, records: &[RawRecord]) -> io::Result<()> {
    write_file_iter(path, records.iter().cloned()).map(drop)
}

/// Streams records to `path` as a JSON array, gzip-compressed when the name ends in `.gz`;
/// returns how many were written.
pub fn write_file_iter(
    path: &Path,
    records: impl IntoIterator<Item = RawRecord>,
) -> io::Result<u64> {
    let mut out = ArrayWriter::create(path)?;
    for r in records {
        out.write_record(&r)?;
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn objects_round_trip_plain_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["o.json", "o.json.gz"] {
            let path = dir.path().join(name);
            let mut w = ArrayWriter::create(&path).unwrap();
            w.write(b"{\"a\":1}").unwrap();
            w.write(b"{\"b\":2}").unwrap();
            assert_eq!(w.finish().unwrap(), 2);
            let mut text = String::new();
            super::super::decode::open_decoded(&path)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, "[\n{\"a\":1},\n{\"b\":2}\n]\n");
        }
    }

    #[test]
    fn a_zstd_name_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json.zst");
        let e = ArrayWriter::create(&path).unwrap_err();
        assert!(e.to_string().contains(".json.gz"), "{e}");
        assert!(!path.exists());
    }

    #[test]
    fn an_empty_array_is_still_an_array() {
        let mut out = Vec::new();
        assert_eq!(write_json_array_iter(&mut out, []).unwrap(), 0);
        assert_eq!(out, b"[\n]\n");
    }
}
