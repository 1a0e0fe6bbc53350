//! The original text of trace records, for commands that copy records (`trace sample`) or
//! re-examine them (`trace validate --all`).
//!
//! The typed [`TraceReader`](crate::trace::TraceReader) decides *which* records and in what
//! order; [`RawCursor`] fetches the exact bytes of record `number` of file `file` so they can
//! be written out unchanged (every field, including ones the reader does not keep, such as
//! `host`, `http.request.useragent` and the original `id`).
//!
//! Invariants: files are split with the same grammar as the reader (top-level objects,
//! separated by whitespace and commas, inside any number of balanced arrays, an optional
//! UTF-8 byte order mark), so record numbers agree. The cursor reads each file once, in
//! order, holding the objects read ahead of the one asked for until they are asked for —
//! as many as the reader's reorder disorder, so memory stays bounded as long as every
//! record number is eventually taken (callers take every item, selected or not). A file is
//! opened when first needed and closed after its last object is taken. Compression is
//! detected by magic bytes like the reader: gzip (multi-member) and zstd (multi-frame).
//!
//! [`ArrayWriter`] writes objects as one IBM-layout JSON array, gzip-compressed when the
//! output name ends in `.gz`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Buffer between a file (or decoder) and the splitter.
const BUF: usize = 256 * 1024;

/// Opens a trace file and wraps it in the decoder its magic bytes call for.
pub(crate) fn open_decoded(path: &Path) -> io::Result<Box<dyn BufRead + Send>> {
    let mut file = BufReader::with_capacity(BUF, File::open(path)?);
    let head = file.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(
            BUF,
            flate2::bufread::MultiGzDecoder::new(file),
        ))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(BufReader::with_capacity(BUF, ZstdFrames::new(file)))
    } else {
        Box::new(file)
    })
}

/// A zstd stream of any number of frames, skipping skippable frames.
struct ZstdFrames<R> {
    source: R,
    decoder: ruzstd::decoding::FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        ZstdFrames {
            source,
            decoder: ruzstd::decoding::FrameDecoder::new(),
            in_frame: false,
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        use ruzstd::decoding::BlockDecodingStrategy;
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                while self.decoder.can_collect() < buf.len() && !self.decoder.is_finished() {
                    let wanted = buf.len() - self.decoder.can_collect();
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBytes(wanted))
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                if self.decoder.is_finished() && self.decoder.can_collect() == 0 {
                    self.in_frame = false;
                }
                continue;
            }
            if self.source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.decoder.init(&mut self.source) {
                Ok(()) => self.in_frame = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = io::copy(
                        &mut (&mut self.source).take(u64::from(length)),
                        &mut io::sink(),
                    )?;
                    if skipped < u64::from(length) {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "zstd: truncated skippable frame",
                        ));
                    }
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
    }
}

/// Splits a stream into the bytes of its top-level JSON objects.
pub(crate) struct RawObjects<R> {
    src: R,
    /// Stream offset of the next unread byte.
    offset: u64,
}

impl<R: BufRead> RawObjects<R> {
    pub(crate) fn new(src: R) -> Self {
        RawObjects { src, offset: 0 }
    }

    fn invalid(&self, what: String) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("byte {}: {what}", self.offset),
        )
    }

    /// Appends the next object's bytes to `out`; `Ok(false)` at the end of the stream.
    pub(crate) fn next_into(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
        // Between objects.
        loop {
            let buf = self.src.fill_buf()?;
            let Some(&b) = buf.first() else {
                return Ok(false);
            };
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b',' | b'[' | b']' => {
                    let n = buf
                        .iter()
                        .position(|b| {
                            !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b',' | b'[' | b']')
                        })
                        .unwrap_or(buf.len());
                    self.src.consume(n);
                    self.offset += n as u64;
                }
                b'{' => break,
                0xEF if self.offset == 0 => {
                    let mut bom = [0u8; 3];
                    self.src.read_exact(&mut bom)?;
                    self.offset += 3;
                    if bom != [0xEF, 0xBB, 0xBF] {
                        return Err(self.invalid("unexpected byte 0xEF".into()));
                    }
                }
                other => return Err(self.invalid(format!("unexpected byte 0x{other:02X}"))),
            }
        }
        // One object: track nesting outside strings.
        let mut depth = 0u32;
        let mut in_string = false;
        let mut escaped = false;
        loop {
            let buf = self.src.fill_buf()?;
            if buf.is_empty() {
                return Err(self.invalid("end of input inside a record".into()));
            }
            let mut end = None;
            for (i, &b) in buf.iter().enumerate() {
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let n = end.unwrap_or(buf.len());
            out.extend_from_slice(&buf[..n]);
            self.src.consume(n);
            self.offset += n as u64;
            if end.is_some() {
                return Ok(true);
            }
        }
    }
}

/// One file's splitter and the objects read ahead of the ones taken.
struct OpenFile {
    objects: RawObjects<Box<dyn BufRead + Send>>,
    /// Number of the last object read.
    read: u64,
    held: HashMap<u64, Vec<u8>>,
}

/// Fetches records' original text by (file, number). See the module documentation.
pub(crate) struct RawCursor {
    paths: Vec<PathBuf>,
    files: Vec<Option<OpenFile>>,
    /// Files whose every object has been read and taken.
    done: Vec<bool>,
}

impl std::fmt::Debug for RawCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCursor")
            .field("files", &self.paths.len())
            .finish_non_exhaustive()
    }
}

impl RawCursor {
    pub(crate) fn new(paths: &[PathBuf]) -> Self {
        RawCursor {
            paths: paths.to_vec(),
            files: paths.iter().map(|_| None).collect(),
            done: vec![false; paths.len()],
        }
    }

    /// The text of record `number` (1-based) of file `file`. Each record can be taken once.
    pub(crate) fn take(&mut self, file: u32, number: u64) -> io::Result<Vec<u8>> {
        let fi = file as usize;
        let path = self.paths.get(fi).cloned().unwrap_or_default();
        let fail = |what: String| io::Error::other(format!("{}: {what}", path.display()));
        if self.done.get(fi).copied().unwrap_or(true) {
            return Err(fail(format!("record {number} was already read")));
        }
        if self.files[fi].is_none() {
            self.files[fi] = Some(OpenFile {
                objects: RawObjects::new(open_decoded(&path)?),
                read: 0,
                held: HashMap::new(),
            });
        }
        let Some(open) = self.files[fi].as_mut() else {
            return Err(fail("not open".into()));
        };
        let text = if let Some(text) = open.held.remove(&number) {
            text
        } else {
            if number <= open.read {
                return Err(fail(format!("record {number} was already read")));
            }
            loop {
                let mut text = Vec::new();
                if !open.objects.next_into(&mut text)? {
                    return Err(fail(format!("record {number} not found")));
                }
                open.read += 1;
                if open.read == number {
                    break text;
                }
                open.held.insert(open.read, text);
            }
        };
        // Close the file once nothing is held and nothing is left: look one object ahead.
        if open.held.is_empty() {
            let mut next = Vec::new();
            if open.objects.next_into(&mut next)? {
                open.read += 1;
                open.held.insert(open.read, next);
            } else {
                self.files[fi] = None;
                self.done[fi] = true;
            }
        }
        Ok(text)
    }
}

/// Where an [`ArrayWriter`] writes.
enum Sink {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
}

impl Sink {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => w,
        }
    }
}

/// Writes objects as one JSON array, one object per line; gzip when the path ends in `.gz`.
pub(crate) struct ArrayWriter {
    sink: Sink,
    written: u64,
}

impl std::fmt::Debug for ArrayWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayWriter")
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl ArrayWriter {
    pub(crate) fn create(path: &Path) -> io::Result<Self> {
        let file = BufWriter::with_capacity(BUF, File::create(path)?);
        let sink = if path.extension().is_some_and(|e| e == "gz") {
            Sink::Gzip(flate2::write::GzEncoder::new(
                file,
                flate2::Compression::fast(),
            ))
        } else {
            Sink::Plain(file)
        };
        let mut w = ArrayWriter { sink, written: 0 };
        w.sink.writer().write_all(b"[")?;
        Ok(w)
    }

    /// Appends one object (its exact bytes).
    pub(crate) fn write(&mut self, object: &[u8]) -> io::Result<()> {
        let sep: &[u8] = if self.written == 0 { b"\n" } else { b",\n" };
        let w = self.sink.writer();
        w.write_all(sep)?;
        w.write_all(object)?;
        self.written += 1;
        Ok(())
    }

    /// Closes the array and flushes everything to disk.
    pub(crate) fn finish(mut self) -> io::Result<u64> {
        self.sink.writer().write_all(b"\n]\n")?;
        match self.sink {
            Sink::Gzip(gz) => gz.finish()?.flush()?,
            Sink::Plain(mut w) => w.flush()?,
        }
        Ok(self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(text: &str) -> io::Result<Vec<String>> {
        let mut r = RawObjects::new(text.as_bytes());
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            if !r.next_into(&mut buf)? {
                return Ok(out);
            }
            out.push(String::from_utf8(buf).unwrap());
        }
    }

    #[test]
    fn splits_like_the_reader() {
        let a = r#"{"a": "br{ace}s \" and \\", "b": {"c": [1, {"d": "}"}]}}"#;
        let b = r#"{"e": "\\\\\"}"}"#;
        let text = format!("\u{feff} [\n{a}, {b}]\n[{{}}]\n{a}\n");
        assert_eq!(objects(&text).unwrap(), [a, b, "{}", a]);
        assert!(objects("[{\"a\": 1").is_err());
        assert!(objects("[x]").is_err());
        assert!(objects("").unwrap().is_empty());
    }

    #[test]
    fn cursor_takes_in_any_order_and_closes_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, "[{\"n\":1},{\"n\":2},{\"n\":3}]").unwrap();
        let mut c = RawCursor::new(std::slice::from_ref(&path));
        assert_eq!(c.take(0, 2).unwrap(), b"{\"n\":2}");
        assert_eq!(c.take(0, 1).unwrap(), b"{\"n\":1}");
        assert!(c.take(0, 1).is_err());
        assert_eq!(c.take(0, 3).unwrap(), b"{\"n\":3}");
        assert!(c.files[0].is_none() && c.done[0]);
        assert!(c.take(0, 4).is_err());
    }

    #[test]
    fn writer_round_trips_plain_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["o.json", "o.json.gz"] {
            let path = dir.path().join(name);
            let mut w = ArrayWriter::create(&path).unwrap();
            w.write(b"{\"a\":1}").unwrap();
            w.write(b"{\"b\":2}").unwrap();
            assert_eq!(w.finish().unwrap(), 2);
            let mut text = String::new();
            open_decoded(&path)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, "[\n{\"a\":1},\n{\"b\":2}\n]\n");
        }
    }
}
