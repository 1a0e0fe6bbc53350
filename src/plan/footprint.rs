//! What a replay of a trace needs at a size scale (`trace stats --capacity`): storage,
//! bytes sent and received, computed by the replay's own first pass so the figures are the
//! ones a prewarm and a run meet.

use crate::fast_hash::FastHashMap;
use crate::plan::catalog::{Catalog, ContentOptions, Keep, SizeScale};
use crate::trace::{Interner, Item, Method, Sym, Target, TraceError, TraceInput, TraceReader};

/// The figures of `trace stats --capacity`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Footprint {
    pub size_scale: f64,
    pub max_object_size: Option<u64>,
    /// Distinct blobs the run reads (the prewarm pushes each to every repository reading it).
    pub blobs: usize,
    /// Bytes of those blobs: what the prewarm stores (a registry keeps one copy of a blob).
    pub blob_bytes: u64,
    /// (repository, blob) pairs the prewarm pushes, and their bytes (what it sends).
    pub prewarm_pushes: usize,
    pub prewarm_bytes: u64,
    /// Uploads the run makes, and the bytes it stores and sends with them.
    pub uploads: usize,
    pub upload_bytes: u64,
    /// Bytes the run's successful blob GETs receive.
    pub read_bytes: u64,
    /// Storage after the run: the prewarmed blobs plus the uploads.
    pub storage_bytes: u64,
}

impl Footprint {
    /// Reads `input` once, as a replay's first pass does with its default session gap.
    pub fn of(input: &TraceInput, sizes: SizeScale) -> Result<Footprint, TraceError> {
        let mut reader = TraceReader::open(input, Default::default(), Interner::default())?;
        let mut gets: FastHashMap<Sym, u64> = Default::default();
        let items = (&mut reader).inspect(|item| {
            if let Ok(Item::Record(r)) = item {
                if let (Method::Get, Target::Blob { digest, .. }) = (r.method, &r.target) {
                    if (200..400).contains(&r.status) {
                        *gets.entry(*digest).or_default() += 1;
                    }
                }
            }
        });
        let content = ContentOptions {
            sizes,
            ..ContentOptions::default()
        };
        // Uploads are linked to their pushes as replay's default --session-gap (60 s) does.
        let catalog =
            Catalog::build(items, 60_000, content, Keep::Prewarm)?.seal(reader.into_names());
        // Saturating sums: a trace of many huge objects shows the ceiling, never a figure
        // that wrapped around and disagrees with the others.
        let blob_bytes: u64 = catalog
            .blobs
            .keys()
            .map(|d| catalog.blob_content(*d).size())
            .fold(0, u64::saturating_add);
        let upload_bytes: u64 = catalog
            .uploads()
            .map(|(h, _)| catalog.upload_content(h).size())
            .fold(0, u64::saturating_add);
        let read_bytes = gets
            .iter()
            .map(|(d, n)| n.saturating_mul(catalog.blob_content(*d).size()))
            .fold(0, u64::saturating_add);
        let uploads = catalog.uploads().len();
        Ok(Footprint {
            size_scale: sizes.factor(),
            max_object_size: sizes.max,
            blobs: catalog.blobs.len(),
            blob_bytes,
            prewarm_pushes: catalog.blob_read_count(),
            prewarm_bytes: catalog.prewarm_bytes(),
            uploads,
            upload_bytes,
            read_bytes,
            storage_bytes: blob_bytes.saturating_add(upload_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_agree_with_each_other_at_the_largest_sizes() {
        const TIB: u64 = 1 << 40;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let record = |t: u32, method: &str, uri: &str, status: u16| {
            format!(
                r#"{{"timestamp": "2017-06-20T10:00:{t:02}Z", "http.request.method": "{method}", "http.request.uri": "{uri}", "http.request.remoteaddr": "c", "http.response.status": {status}, "http.response.written": {TIB}}}"#
            )
        };
        let records = [
            record(0, "GET", "v2/a/b/blobs/sha256:aa", 200),
            record(1, "GET", "v2/a/b/blobs/sha256:aa", 200),
            record(2, "GET", "v2/a/b/blobs/sha256:bb", 200),
            record(3, "PUT", "v2/a/b/blobs/uploads/u1?digest=sha256:cc", 201),
        ];
        std::fs::write(&path, format!("[{}]", records.join(",\n"))).unwrap();
        let input = TraceInput { files: vec![path] };
        let c = Footprint::of(&input, SizeScale::default()).unwrap();
        assert_eq!((c.blobs, c.blob_bytes), (2, 2 * TIB));
        assert_eq!(
            c.read_bytes,
            3 * TIB,
            "two reads of one blob, one of the other"
        );
        assert_eq!(c.storage_bytes, c.blob_bytes + c.upload_bytes);
        assert_eq!(
            c.prewarm_bytes, c.blob_bytes,
            "one repository reads each blob"
        );
    }
}
