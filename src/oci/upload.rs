//! The ways the protocol lets a client upload a blob: one PUT after a POST, chunks of PATCH,
//! or the body with the POST itself. Vocabulary only; `client/upload.rs` speaks it.

/// How a blob is uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum UploadMode {
    /// POST, then PUT with the whole body.
    Monolithic,
    /// POST, PATCH per chunk, then an empty PUT.
    Chunked { chunk_size: u64 },
    /// POST with `?digest=` and the body; falls back to a PUT when the registry answers 202.
    SinglePost,
}
