//! Why a layer could not be unpacked, and the error kind each reason is counted under.

use std::io;

use crate::metrics::ErrorKind;

/// Why a layer could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("the layer is not {0}: {1}")]
    Compression(&'static str, String),
    #[error("the layer is not a tar: {0}")]
    NotTar(String),
    #[error("diff_id mismatch: the config says {expected}, the layer's tar is {actual}")]
    DiffId { expected: String, actual: String },
    #[error("entry {0:?} would leave the directory")]
    UnsafePath(String),
    #[error(
        "the layer's tar grows past {bound} bytes ({ratio} times its {compressed} bytes): stopped"
    )]
    Bomb {
        bound: u64,
        ratio: u64,
        compressed: u64,
    },
    #[error("unpacking: {0}")]
    Io(io::Error),
}

impl UnpackError {
    /// The error kind a failed unpack is counted under.
    pub fn kind(&self) -> ErrorKind {
        match self {
            UnpackError::Compression(..) | UnpackError::NotTar(_) => ErrorKind::LayerInvalid,
            UnpackError::DiffId { .. } => ErrorKind::DiffIdMismatch,
            UnpackError::UnsafePath(_) => ErrorKind::UnsafePath,
            UnpackError::Bomb { .. } => ErrorKind::DecompressionBomb,
            UnpackError::Io(_) => ErrorKind::Other,
        }
    }
}
