//! `creb-rs capacity`: the load a registry sustains under the user's objectives, found by
//! an open-model search over a real workload. `search` decides which load to offer next and
//! judges each step; the replay engine ([`crate::replay::Engine`]) runs the steps.

pub mod gate;
pub mod merge;
pub mod run;
pub mod search;

pub use crate::results::capacity::CapacityResult;
pub use crate::results::{CAPACITY_JSON, STEPS_DIR};
pub use gate::Gate;
pub use run::{capacity, CapacityConfig};
pub use search::{judge_step, Next, Outcome, Search, SearchOptions};
