//! Trace ingestion: IBM registry traces (FAST'18 format) streamed from files (JSON array or
//! JSON lines; plain, gzip or zstd), merged across files by timestamp, deduplicated and
//! classified, without ever holding a whole file.
//!
//! - [`record`]: the typed record, URI parsing, interning.
//! - [`reader`]: files → records in timestamp order, with skip reasons and limits.
//! - [`spool`]: the records of the replay's first pass, kept for its second.
//! - [`synth`]: synthetic traces shaped like docker clients, for tests and workloads.
//! - [`mod@write`]: traces written in the IBM layout (JSON array, optionally gzip).

pub(crate) mod decode;
mod parse;
pub mod reader;
pub mod record;
mod scan;
mod split;
pub mod spool;
pub mod synth;
pub mod write;

pub use decode::open_decoded;
pub use reader::{Detailed, Item, ReadOptions, SkipReason, TraceError, TraceInput, TraceReader};
pub use record::{Interner, Kind, Method, Record, SessionId, Sym, Target};
pub use spool::{Spool, SpoolWriter};
