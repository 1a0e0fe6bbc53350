//! How the executor runs (the workload model, the in-flight cap, lateness and grace) and
//! what it reports back for the accounting and the validity checks.

use std::time::Duration;

/// The two workload models (never mixed in one result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// As fast as possible with `--concurrency` in flight (closed model).
    Stress,
    /// At the trace's timing, scaled by `--speed` (open model).
    Delay,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Stress => "stress",
            Mode::Delay => "delay",
        }
    }

    pub fn model(self) -> &'static str {
        match self {
            Mode::Stress => "closed",
            Mode::Delay => "open",
        }
    }
}

/// The phases of a replay: what a run of it carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Prewarm, then run, each with its own results.
    All,
    /// Only push what the run will read.
    Prewarm,
    /// Only replay (the registry was prewarmed before).
    Run,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::All => "all",
            Phase::Prewarm => "prewarm",
            Phase::Run => "run",
        }
    }
}

/// How to execute.
#[derive(Debug, Clone, Copy)]
pub struct ExecOptions {
    pub mode: Mode,
    pub concurrency: usize,
    /// Delay mode: drop operations that cannot start within this bound of their intended time.
    pub max_lateness: Option<Duration>,
    /// After a shutdown request, how long in-flight operations may take to finish.
    pub grace: Duration,
    /// Wait for the anchor and, in delay mode, for due times on a timerfd (microseconds)
    /// instead of tokio's timer (whole milliseconds, rounded up). Off under a paused test
    /// clock, which only tokio's timer follows.
    pub precise_timer: bool,
    /// Stress mode: answers may be gathered per wake-up of the runtime's workers
    /// ([`crate::net::gather`]; `--gather` turns it on).
    pub gather: bool,
}

/// What the executor did, for the accounting and validity checks.
#[derive(Debug, Clone, Default)]
pub struct ExecReport {
    /// Operations carried out (successful or not).
    pub replayed: u64,
    /// Records folded into carried-out operations.
    pub folded: u64,
    /// Records of operations dropped because they would start later than `max_lateness`.
    pub late: u64,
    /// Records of operations not carried out because of shutdown.
    pub interrupted: u64,
    /// Time the dispatcher waited for a free slot (the in-flight cap was binding).
    pub cap_wait: Duration,
    /// From the anchor to the last completion.
    pub duration: Duration,
    /// The most slots held at once (operations in flight), never above the concurrency.
    pub max_in_flight: usize,
    /// What gathering answers did, when the run allowed it.
    pub gathered: Option<crate::net::gather::Used>,
    /// What stress mode's event loops carried, when the run's manifest GETs went on them.
    pub looped: Option<Looped>,
    /// How late stress mode's event loops came to their turns past the ticks they asked
    /// for (µs; [`crate::exec::canary::TurnCanary`]), when they ran: the runtime's canary
    /// stopped as they started.
    pub wake_lateness: Option<hdrhistogram::Histogram<u64>>,
    /// How long the answers stress mode's event loops recorded waited to be read: from
    /// each one's arrival (the kernel's receive stamp) to the loop's turn that read it (µs;
    /// answers without a stamp are not in it), when the loops ran.
    pub answer_wait: Option<hdrhistogram::Histogram<u64>>,
    /// Why the run stopped before its end, when a part of the executor failed (an event
    /// loop that could no longer wait for its connections): it stopped as a stop would.
    pub failure: Option<String>,
}

/// What stress mode's event loops carried (`exec/lane.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Looped {
    /// The loops, each on a thread of its own with its share of the slots.
    pub loops: usize,
    /// The manifest GETs sent on them (an answer a loop did not take was still decided
    /// by the client).
    pub manifest_gets: u64,
}
