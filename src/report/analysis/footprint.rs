//! `trace stats --capacity` as people read it: what a replay of the trace stores, sends and
//! receives, rendered from its [`Footprint`].

use std::fmt::Write as _;

use crate::plan::footprint::Footprint;
use crate::units::{grouped, ByteSize};

/// The footprint, a few lines under `capacity (…)`.
pub fn render(c: &Footprint) -> String {
    let mut out = String::new();
    let scale = match (c.size_scale < 1.0, c.max_object_size) {
        (false, None) => "sizes as recorded".to_string(),
        (true, None) => format!("sizes ×{}", c.size_scale),
        (false, Some(m)) => format!("sizes capped at {}", ByteSize(m)),
        (true, Some(m)) => format!("sizes ×{}, capped at {}", c.size_scale, ByteSize(m)),
    };
    let _ = writeln!(out, "capacity ({scale})");
    let _ = writeln!(
        out,
        "  prewarm: {} blobs, {} stored; {} pushes, {} sent",
        grouped(c.blobs as u64),
        ByteSize(c.blob_bytes),
        grouped(c.prewarm_pushes as u64),
        ByteSize(c.prewarm_bytes),
    );
    let _ = writeln!(
        out,
        "  run: {} uploads, {} sent and stored; {} received by blob GETs",
        grouped(c.uploads as u64),
        ByteSize(c.upload_bytes),
        ByteSize(c.read_bytes),
    );
    let _ = writeln!(
        out,
        "  registry storage after the run: {}",
        ByteSize(c.storage_bytes)
    );
    out
}
