//! Experiments across registries (`creb-rs run`), the parts that know nothing of flags: the
//! experiment file read into typed specs ([`config`]), its cells and where their results go
//! ([`cells`]), and the checkpoint that records every cell of a run as it ends, so a run
//! that lasts weeks can resume ([`checkpoint`]). The runner that goes through the rounds is
//! [`crate::runner`]; turning a cell into the command line that runs it is the command
//! layer's (`commands::run::cells`); the comparison page is the report's
//! (`report::comparison`).

pub mod cells;
pub mod checkpoint;
pub mod config;
