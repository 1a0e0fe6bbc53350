//! The offline analyses as people read them: `trace stats` (and its `--capacity`), `trace
//! import --stats`, what `trace sample`, `synth` and `validate` wrote or found, `simulate`
//! and `cost`, each rendered from the typed result its analysis computed.

pub mod cost;
pub mod footprint;
pub mod import;
pub mod simulate;
pub mod trace_files;
pub mod trace_stats;
