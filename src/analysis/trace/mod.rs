//! Trace characterization, sampling and validation: the work behind `creb-rs trace stats`,
//! `trace sample` and `trace validate` (synthetic traces are `crate::trace::synth`).

pub mod import;
pub mod sample;
pub mod stats;
pub mod validate;

pub use sample::{
    sample as sample_trace, sample_records, Records, SampleError, SampleMethod, SampleReport,
};
pub use stats::{compute_stats, StatsOptions, TraceStats};
pub use validate::{validate as validate_trace, Validation};
