//! Framing: the top-level JSON objects of a decompressed trace stream, whatever holds them
//! (one array, several arrays, JSON lines, concatenated objects). Between objects only
//! whitespace, commas and balanced array brackets (never one array inside another) are
//! accepted, and a UTF-8 byte order mark at the very start. Each object is read in place
//! from the read buffer — a plain record by [`super::scan`], any other by serde_json — so
//! nothing more than one chunk plus the current object is held.

use std::io::{self, Read};

use super::parse::{json_error, Fields};
use super::scan::Layout;

#[derive(Debug)]
pub(super) enum SplitError {
    Io(io::Error),
    Syntax { offset: u64, reason: String },
}

/// Reads the top-level JSON objects of a byte stream. Between objects it accepts whitespace,
/// commas and array brackets (arrays must balance). Each object is deserialized straight from
/// the read buffer, so its bytes are scanned once; when the buffer ends inside an object the
/// buffer is refilled (and grown, up to `max_record`) and the object parsed again, which
/// happens about once per chunk.
pub(super) struct Splitter<R> {
    src: R,
    buf: Vec<u8>,
    /// Next unread byte.
    pos: usize,
    /// End of valid bytes in `buf`.
    end: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    /// Open top-level `[`.
    arrays: u32,
    max_record: usize,
    /// Bytes read since [`Splitter::take_fresh`] was last called.
    fresh: u64,
    /// The keys of the last object the scanner read.
    layout: Layout,
}

impl<R: Read> Splitter<R> {
    pub(super) fn new(src: R, chunk: usize, max_record: usize) -> Self {
        Splitter {
            src,
            buf: vec![0; chunk.clamp(1, max_record.max(1))],
            pos: 0,
            end: 0,
            base: 0,
            arrays: 0,
            max_record: max_record.max(1),
            fresh: 0,
            layout: Layout::default(),
        }
    }

    pub(super) fn take_fresh(&mut self) -> u64 {
        std::mem::take(&mut self.fresh)
    }

    /// Drops `buf[..keep]`, grows the buffer if it is full, and reads until it is full or
    /// the input ends. Returns false if nothing more could be read.
    fn refill(&mut self, keep: usize) -> Result<bool, SplitError> {
        if keep > 0 {
            self.buf.copy_within(keep..self.end, 0);
            self.end -= keep;
            self.pos = self.pos.saturating_sub(keep);
            self.base += keep as u64;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= self.max_record {
                return Err(SplitError::Syntax {
                    offset: self.base + self.end as u64,
                    reason: format!("record larger than {} bytes", self.max_record),
                });
            }
            let grown = self.buf.len().saturating_mul(2).min(self.max_record);
            self.buf.resize(grown, 0);
        }
        let before = self.end;
        while self.end < self.buf.len() {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => break,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SplitError::Io(e)),
            }
        }
        self.fresh += (self.end - before) as u64;
        Ok(self.end > before)
    }

    fn syntax(&self, at: usize, reason: impl Into<String>) -> SplitError {
        SplitError::Syntax {
            offset: self.base + at as u64,
            reason: reason.into(),
        }
    }

    /// Reads the next object and hands it to `f` with its stream offset and bytes.
    /// `Ok(None)` at the end of input.
    #[allow(clippy::too_many_lines)]
    pub(super) fn next_with<T>(
        &mut self,
        f: impl FnOnce(u64, &[u8], Fields<'_>) -> T,
    ) -> Result<Option<T>, SplitError> {
        // Between objects.
        loop {
            if self.pos == self.end {
                if !self.refill(self.pos)? {
                    if self.arrays > 0 {
                        return Err(self.syntax(self.pos, "end of input inside an array"));
                    }
                    return Ok(None);
                }
                continue;
            }
            match self.buf[self.pos] {
                b' ' | b'\t' | b'\n' | b'\r' | b',' => self.pos += 1,
                b'[' if self.arrays > 0 => {
                    // A trace is records side by side; `[[` is some other JSON, and a deep
                    // one would otherwise read as a trace with no record at all.
                    return Err(self.syntax(
                        self.pos,
                        "an array inside an array: a trace holds records (JSON objects) in \
                         one array, in several side by side, or one per line",
                    ));
                }
                b'[' => {
                    self.arrays += 1;
                    self.pos += 1;
                }
                b']' => {
                    if self.arrays == 0 {
                        return Err(self.syntax(self.pos, "`]` without an open array"));
                    }
                    self.arrays -= 1;
                    self.pos += 1;
                }
                b'{' => break,
                0xEF if self.base + self.pos as u64 == 0 => {
                    // A UTF-8 byte order mark at the very start.
                    while self.end - self.pos < 3 {
                        if !self.refill(self.pos)? {
                            return Err(self.syntax(self.pos, "unexpected byte 0xEF"));
                        }
                    }
                    if self.buf[self.pos..self.pos + 3] != [0xEF, 0xBB, 0xBF] {
                        return Err(self.syntax(self.pos, "unexpected byte 0xEF"));
                    }
                    self.pos += 3;
                }
                b => {
                    return Err(self.syntax(
                        self.pos,
                        format!("expected `{{` of a record, found {}", describe_byte(b)),
                    ))
                }
            }
        }
        // An object: what a trace holds read by the scanner, anything else (or an object
        // the buffer cuts) by serde_json.
        let start = self.pos;
        if let Some((raw, len)) = super::scan::object(&self.buf[start..self.end], &mut self.layout)
        {
            let value = f(self.base + start as u64, &self.buf[start..start + len], raw);
            self.pos = start + len;
            return Ok(Some(value));
        }
        loop {
            let start = self.pos;
            let mut objects = serde_json::Deserializer::from_slice(&self.buf[start..self.end])
                .into_iter::<Fields<'_>>();
            match objects.next() {
                Some(Ok(raw)) => {
                    let len = objects.byte_offset();
                    let value = f(self.base + start as u64, &self.buf[start..start + len], raw);
                    self.pos = start + len;
                    return Ok(Some(value));
                }
                Some(Err(e)) if !e.is_eof() => {
                    let (at, reason) = json_error(&self.buf[start..self.end], &e);
                    return Err(self.syntax(start + at, reason));
                }
                // The buffer ends inside the object.
                _ => {
                    if !self.refill(start)? {
                        return Err(self.syntax(self.end, "end of input inside a record"));
                    }
                }
            }
        }
    }
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("`{}`", b as char)
    } else {
        format!("byte 0x{b:02X}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object of `text` found by a splitter reading `chunk` bytes at a time.
    fn split(text: &[u8], chunk: usize, max: usize) -> Result<Vec<(u64, Vec<u8>)>, SplitError> {
        let mut s = Splitter::new(text, chunk, max);
        let mut out = Vec::new();
        while let Some(found) = s.next_with(|offset, bytes, _| (offset, bytes.to_vec()))? {
            out.push(found);
        }
        Ok(out)
    }

    #[test]
    fn splitter_finds_objects_across_any_chunk_boundary() {
        let objects = [
            r#"{"a": "br{ace}s \" and \\", "b": {"c": [1, {"d": "}"}]}}"#,
            r#"{"e": "\\\\\"}"}"#,
            "{}",
        ];
        let text = format!(" [\n{}, {}]\n[{}]\n", objects[0], objects[1], objects[2]);
        for chunk in 1..24 {
            let found = split(text.as_bytes(), chunk, 1 << 20).unwrap();
            let found: Vec<(u64, String)> = found
                .into_iter()
                .map(|(o, b)| (o, String::from_utf8(b).unwrap()))
                .collect();
            assert_eq!(found.len(), 3, "chunk {chunk}");
            for ((offset, body), want) in found.iter().zip(objects) {
                assert_eq!(body, want, "chunk {chunk}");
                assert_eq!(&text[*offset as usize..][..want.len()], want);
            }
        }
        let Err(SplitError::Syntax { reason, .. }) = split(text.as_bytes(), 4, 32) else {
            panic!("a 50-byte record with a 32-byte cap")
        };
        assert_eq!(reason, "record larger than 32 bytes");
        assert!(matches!(
            split(b"]", 4, 32),
            Err(SplitError::Syntax { offset: 0, .. })
        ));
        assert!(split(b"", 4, 32).unwrap().is_empty());
        // Deeply nested arrays are not a trace with no record: they are said to be no trace.
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        let Err(SplitError::Syntax { offset, reason }) = split(deep.as_bytes(), 4, 32) else {
            panic!("nested arrays accepted")
        };
        assert_eq!(offset, 1);
        assert!(reason.contains("an array inside an array"), "{reason}");
    }
}
