//! The executor: planned operations become requests, at the right time, with at most
//! `concurrency` in flight.
//!
//! - **stress (closed model)**: each of `concurrency` slots starts the next operation when
//!   its previous one completes; no intended times — latency is service time at that level.
//! - **delay (open model)**: operation *k* is due at `anchor + offset_k` — an instant computed
//!   from the plan, never from when a timer fired. The dispatcher sleeps until then, waits for
//!   a slot if all are busy (that wait is schedule lag, and it is inside the latency), and
//!   passes the intended instant to the client, which records latency from it, service time
//!   from the send, and the lag between them. With `max_lateness`, an operation that could
//!   not start within that bound is dropped and counted, never silently skipped.
//!
//! One dispatcher owns the schedule; operations run as tasks in a `JoinSet` whose results it
//! reaps as it goes, so nothing grows with the number of operations. A manifest PUT waits for
//! the uploads of its push. On shutdown the dispatcher stops, in-flight operations get a
//! grace period, and whatever was planned but not run is counted as `interrupted`.
//!
//! With several endpoints ([`Targets`]) the dispatcher picks each operation's endpoint by
//! the [`Router`](crate::route::Router) and the endpoints' [`Health`](crate::route::health::Health): the first candidate that is up, or — with
//! failover off — a failure of kind `endpoint_down` recorded on the endpoint it was meant
//! for, without a request. Each endpoint's client records through its own recorder, so the
//! per-endpoint numbers add up to the totals.

pub mod bounded;
pub mod canary;
pub mod cleanup;
mod deps;
mod dispatch;
mod executor;
mod lane;
mod options;
pub(crate) mod pacer;
pub mod prewarm;
pub mod pull;
pub mod push;
pub mod replicate;
mod session_unpack;
pub mod sizes;
mod targets;
mod task;
pub mod unpack;
mod verified;

pub use executor::Executor;
pub use options::{ExecOptions, ExecReport, Mode, Phase};
pub use targets::Targets;
