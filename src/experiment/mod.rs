//! Experiments across registries (`creb-rs run`), the parts that know nothing of flags: the
//! experiment file read into typed specs ([`config`]) and the checkpoint that records every
//! cell of a run as it ends, so a run that lasts weeks can resume ([`checkpoint`]). Turning
//! a cell into the command line that runs it is the command layer's
//! (`commands::run::cells`); the comparison page is the report's (`report::comparison`).

pub mod checkpoint;
pub mod config;
