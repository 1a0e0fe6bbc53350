//! What the workers send the aggregator: the messages of its channel and the [`Recorder`]
//! that sends them (cheap to clone, one per worker or endpoint).

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::attribution::Who;
use super::split::HeaderSplit;
use super::{ErrorKind, Event, HttpStatuses, Op, Outcome, Sample, SizeClass, Timing};

/// What flows to the aggregator.
#[derive(Debug, Clone)]
pub(crate) enum Msg {
    Sample(Wire),
    /// Endpoint `.0` exists (sent when its recorder is made, before any of its samples), so
    /// every interval has a row for it.
    Endpoint(u16),
    Event(Event),
    Session(SessionMsg),
    Offered(Offer),
    /// The interval clock ticked at this instant (taken on the async side, the clock the
    /// samples use).
    Tick(Instant),
    /// Flush everything and stop.
    Stop,
}

/// An operation was due (delay mode: its intended instant) or dispatched (stress) `at`;
/// when it is a member of an image session, it started as a member of `session` then; and
/// image session `closes` gains no further member ([`SessionMsg::Closed`], after the
/// start): one message for all three, or part of a sample's ([`Recorded::then`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offer {
    pub at: Instant,
    pub session: Option<u64>,
    pub closes: Option<u64>,
}

/// A sample as recorded: through which endpoint's client (runs over several endpoints), the
/// `--split-by-header` label its answer gave ([`super::split::HeaderSplit::label`]), and
/// whom its operation was for (attribution).
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub sample: Sample,
    pub endpoint: Option<u16>,
    pub label: Option<u8>,
    pub who: Option<Who>,
    /// The pull session its operation is a member of, which the sample also ends as a
    /// member ([`Recorded::ended`]).
    pub session: Option<u64>,
    /// An operation offered after this one ended, sent in the same message (the aggregator
    /// counts the sample first): stress mode's loops answer one GET and start the next in
    /// the same turn, and one message for both halves what the aggregator takes per GET
    /// (docs/benchmarks.md, "The hot path", step 52).
    pub then: Option<Offer>,
}

impl Recorded {
    pub(super) fn plain(sample: Sample) -> Recorded {
        Recorded {
            sample,
            endpoint: None,
            label: None,
            who: None,
            session: None,
            then: None,
        }
    }

    /// The end of its operation as a member of its pull session: at the sample's end, failed
    /// as it failed, with the bytes it received if it succeeded (a failed member's partial
    /// body is not the image's).
    pub(super) fn ended(&self) -> Option<SessionMsg> {
        let s = &self.sample;
        self.session.map(|id| SessionMsg::Ended {
            id,
            end: s.timing.end,
            error: s.outcome.error(),
            bytes: if s.outcome.is_ok() {
                s.bytes_received
            } else {
                0
            },
            applied: None,
        })
    }
}

/// The process's epoch for [`Packed`] instants, taken at the first use.
static EPOCH: LazyLock<std::time::Instant> = LazyLock::new(std::time::Instant::now);

/// An instant, or none, in eight bytes where an `Instant` takes sixteen: nanoseconds from
/// [`EPOCH`] (negative before it; ±292 years), `i64::MIN` for none. Exact both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packed(i64);

impl Packed {
    const NONE: Packed = Packed(i64::MIN);

    fn of(at: Instant) -> Packed {
        let (at, epoch) = (at.into_std(), *EPOCH);
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        match at.checked_duration_since(epoch) {
            Some(after) => Packed(nanos(after)),
            None => Packed(-nanos(epoch.duration_since(at))),
        }
    }

    fn or_none(at: Option<Instant>) -> Packed {
        at.map_or(Packed::NONE, Packed::of)
    }

    fn instant(self) -> Instant {
        let span = Duration::from_nanos(self.0.unsigned_abs());
        Instant::from_std(if self.0 >= 0 {
            *EPOCH + span
        } else {
            *EPOCH - span
        })
    }

    fn option(self) -> Option<Instant> {
        (self != Packed::NONE).then(|| self.instant())
    }
}

/// A [`Recorded`] as the aggregator's channel carries it, the instants of its timing and of
/// the offer that goes with it [`Packed`]: 176 bytes where a `Recorded` takes 232. The
/// channel keeps the blocks a backlog made it grow to for the rest of the run, so its size
/// is what an aggregator held up (a machine busy beside the run) costs the whole run in
/// resident memory: up to `CHANNEL_CAPACITY` messages (docs/benchmarks.md, "The hot
/// path", step 54).
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    /// `intended`, `ready`, `sent`, `first_byte`, `end`.
    instants: [Packed; 5],
    bytes_sent: u64,
    bytes_received: u64,
    who: Option<Who>,
    session: Option<u64>,
    /// The offer sent with the sample ([`Recorded::then`]): none when `then_at` is none.
    then_at: Packed,
    then_session: Option<u64>,
    then_closes: Option<u64>,
    http: HttpStatuses,
    outcome: Outcome,
    op: Op,
    size_class: SizeClass,
    label: Option<u8>,
    endpoint: Option<u16>,
}

impl From<Recorded> for Wire {
    fn from(r: Recorded) -> Wire {
        let Recorded {
            sample,
            endpoint,
            label,
            who,
            session,
            then,
        } = r;
        let t = sample.timing;
        Wire {
            instants: [
                Packed::or_none(t.intended),
                Packed::or_none(t.ready),
                Packed::of(t.sent),
                Packed::or_none(t.first_byte),
                Packed::of(t.end),
            ],
            bytes_sent: sample.bytes_sent,
            bytes_received: sample.bytes_received,
            who,
            session,
            then_at: Packed::or_none(then.map(|o| o.at)),
            then_session: then.and_then(|o| o.session),
            then_closes: then.and_then(|o| o.closes),
            http: sample.http,
            outcome: sample.outcome,
            op: sample.op,
            size_class: sample.size_class,
            label,
            endpoint,
        }
    }
}

impl From<Wire> for Recorded {
    fn from(w: Wire) -> Recorded {
        let [intended, ready, sent, first_byte, end] = w.instants;
        Recorded {
            sample: Sample {
                op: w.op,
                outcome: w.outcome,
                size_class: w.size_class,
                timing: Timing {
                    intended: intended.option(),
                    ready: ready.option(),
                    sent: sent.instant(),
                    first_byte: first_byte.option(),
                    end: end.instant(),
                },
                bytes_sent: w.bytes_sent,
                bytes_received: w.bytes_received,
                http: w.http,
            },
            endpoint: w.endpoint,
            label: w.label,
            who: w.who,
            session: w.session,
            then: w.then_at.option().map(|at| Offer {
                at,
                session: w.then_session,
                closes: w.then_closes,
            }),
        }
    }
}

/// Progress of an image session whose members are separate operations (an image pull in
/// a trace replay). The aggregator turns a closed session whose members all ended into one
/// `image_pull` sample, from the earliest member start to the last end, and (a session
/// with a layer unpacked, `replay --unpack`) one `image_ready`, to the last layer applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMsg {
    /// A member of session `id` starts; `start` is its intended (or actual) start.
    Started { id: u64, start: Instant },
    /// A member ended: its request at `end`; a layer it read unpacked as `applied` says.
    Ended {
        id: u64,
        end: Instant,
        error: Option<ErrorKind>,
        bytes: u64,
        applied: Option<Applied>,
    },
    /// No further member will start.
    Closed { id: u64 },
}

/// A layer of a pull session unpacked (`replay --unpack`): when its unpack ended, how, and
/// the bytes of its tar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub at: Instant,
    pub error: Option<ErrorKind>,
    pub uncompressed: u64,
}

/// A message the aggregator's channel had no room for when it was put
/// ([`Recorder::offered_now`]), to be sent with [`Recorder::send_unsent`].
#[derive(Debug)]
pub(crate) struct Unsent(Msg);

/// A cheap, cloneable handle that sends measurements to the aggregator.
///
/// Each method puts its message on the channel as it is called, and returns a future that
/// waits only if the channel was full: a future of two words, where an `async fn` holding the
/// message through each call would be over a kilobyte inside every operation's task.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Msg>,
    /// Runs over several endpoints: the endpoint whose client records here.
    endpoint: Option<u16>,
    /// `--split-by-header`: the header whose value labels each sample.
    split: Option<Arc<HeaderSplit>>,
}

impl Recorder {
    /// Sends a sample; waits only if the aggregator is a full channel behind.
    pub fn record(&self, sample: Sample) -> impl Future<Output = ()> + Send + '_ {
        self.record_as(sample, None, None)
    }

    /// A sample with the label its answer gave `--split-by-header` (ignored without one)
    /// and whom its operation was for.
    pub fn record_as(
        &self,
        sample: Sample,
        label: Option<u8>,
        who: Option<Who>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.record_member(sample, label, who, None)
    }

    /// [`Self::record_as`] for an operation that is a member of pull session `session`,
    /// which the sample also ends as a member.
    pub fn record_member(
        &self,
        sample: Sample,
        label: Option<u8>,
        who: Option<Who>,
        session: Option<u64>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.put(Msg::Sample(
            self.recorded(sample, label, who, session).into(),
        ))
    }

    /// The sample [`Self::record_member`] would send, to be sent later, alone or with the
    /// offer of an operation that starts after it ([`Self::offered_now`]).
    pub(crate) fn recorded(
        &self,
        sample: Sample,
        label: Option<u8>,
        who: Option<Who>,
        session: Option<u64>,
    ) -> Recorded {
        Recorded {
            sample,
            endpoint: self.endpoint,
            label: label.filter(|_| self.split.is_some()),
            who,
            session,
            then: None,
        }
    }

    /// `--split-by-header`: the header whose value labels the samples, if any.
    pub fn split(&self) -> Option<&HeaderSplit> {
        self.split.as_deref()
    }

    /// The same aggregator, with every sample also counted for endpoint `index`
    /// ([`super::Aggregator::endpoint`]).
    pub fn for_endpoint(&self, index: usize) -> Recorder {
        let endpoint = u16::try_from(index).unwrap_or(u16::MAX);
        // Made before the run starts, when the channel is empty: a full channel (never at
        // that point) only costs the endpoint its rows in intervals before its first sample.
        let _ = self.tx.try_send(Msg::Endpoint(endpoint));
        Recorder {
            tx: self.tx.clone(),
            endpoint: Some(endpoint),
            split: self.split.clone(),
        }
    }

    /// A recorder whose measurements go nowhere (health probes, which are not workload).
    pub fn discard() -> Recorder {
        let (tx, _) = mpsc::channel(1);
        Recorder {
            tx,
            endpoint: None,
            split: None,
        }
    }

    /// Counts an event.
    pub fn event(&self, event: Event) -> impl Future<Output = ()> + Send + '_ {
        self.put(Msg::Event(event))
    }

    /// Reports session progress.
    pub fn session(&self, msg: SessionMsg) -> impl Future<Output = ()> + Send + '_ {
        self.put(Msg::Session(msg))
    }

    /// An operation was due at `at` (the offered load of the timeline); it starts then as
    /// a member of image session `session` ([`SessionMsg::Started`]), if any, and image
    /// session `closes`, if any, gains no further member ([`SessionMsg::Closed`]).
    pub fn offered(
        &self,
        at: Instant,
        session: Option<u64>,
        closes: Option<u64>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.put(Msg::Offered(Offer {
            at,
            session,
            closes,
        }))
    }
}

impl Recorder {
    /// Puts `msg` on the channel now when it has room (no future of `send`, whose state
    /// would take the message in and out again); else the future returned waits for room,
    /// through a boxed `send` (the rare path). The aggregator outlives every worker; a send
    /// error can only happen after it finished, when nothing is reported any more.
    fn put(&self, msg: Msg) -> impl Future<Output = ()> + Send + '_ {
        let waiting = self
            .put_now(msg)
            .map(|Unsent(msg)| Box::pin(self.tx.send(msg)));
        async move {
            if let Some(send) = waiting {
                let _ = send.await;
            }
        }
    }

    /// Puts `msg` on the channel when it has room; else gives it back, for
    /// [`Self::send_unsent`] to send before anything that must come after it.
    fn put_now(&self, msg: Msg) -> Option<Unsent> {
        match self.tx.try_send(msg) {
            Err(mpsc::error::TrySendError::Full(msg)) => Some(Unsent(msg)),
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => None,
        }
    }

    /// [`Self::offered`] without waiting: the message back when the channel is full. The
    /// dispatcher's way, which makes an operation's task without holding the operation in
    /// a future of its own on the way. With `after`, a sample of an operation that ended
    /// before this one started, one message carries both.
    pub(crate) fn offered_now(
        &self,
        at: Instant,
        session: Option<u64>,
        closes: Option<u64>,
        after: Option<Recorded>,
    ) -> Option<Unsent> {
        let offer = Offer {
            at,
            session,
            closes,
        };
        self.put_now(match after {
            Some(recorded) => Msg::Sample(
                Recorded {
                    then: Some(offer),
                    ..recorded
                }
                .into(),
            ),
            None => Msg::Offered(offer),
        })
    }

    /// A sample made by [`Self::recorded`], sent without waiting: the message back when the
    /// channel is full.
    pub(crate) fn recorded_now(&self, recorded: Recorded) -> Option<Unsent> {
        self.put_now(Msg::Sample(recorded.into()))
    }

    /// [`Self::session`] without waiting: `false` when the channel is full and the message
    /// was not sent.
    pub(crate) fn session_now(&self, msg: SessionMsg) -> bool {
        self.put_now(Msg::Session(msg)).is_none()
    }

    /// Sends a message the channel had no room for, waiting for room.
    pub(crate) async fn send_unsent(&self, unsent: Unsent) {
        let _ = self.tx.send(unsent.0).await;
    }

    /// The recorder of a new aggregator's channel.
    pub(super) fn new(tx: mpsc::Sender<Msg>, split: Option<Arc<HeaderSplit>>) -> Recorder {
        Recorder {
            tx,
            endpoint: None,
            split,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    #[test]
    fn a_message_goes_out_when_called_and_waits_only_for_a_full_channel() {
        let (tx, mut rx) = mpsc::channel(1);
        let recorder = Recorder::new(tx, None);
        let mut cx = Context::from_waker(Waker::noop());
        // Room: on the channel before the future is polled, which is ready at once.
        let first = recorder.event(Event::Failover);
        assert!(matches!(rx.try_recv(), Ok(Msg::Event(Event::Failover))));
        assert_eq!(pin!(first).poll(&mut cx), Poll::Ready(()));
        // The second fills the channel; the third waits until the aggregator takes one.
        assert_eq!(
            pin!(recorder.event(Event::Failover)).poll(&mut cx),
            Poll::Ready(())
        );
        let mut third = pin!(recorder.event(Event::EndpointDown));
        assert_eq!(third.as_mut().poll(&mut cx), Poll::Pending);
        assert!(matches!(rx.try_recv(), Ok(Msg::Event(Event::Failover))));
        assert_eq!(third.as_mut().poll(&mut cx), Poll::Ready(()));
        assert!(matches!(rx.try_recv(), Ok(Msg::Event(Event::EndpointDown))));
        // Without waiting: a message for a full channel comes back, and goes out in its
        // place once there is room.
        assert!(recorder.session_now(SessionMsg::Closed { id: 1 }));
        assert!(!recorder.session_now(SessionMsg::Closed { id: 9 }));
        let unsent = recorder.offered_now(Instant::now(), None, Some(2), None);
        let unsent = unsent.expect("the channel is full");
        let mut send = pin!(recorder.send_unsent(unsent));
        assert_eq!(send.as_mut().poll(&mut cx), Poll::Pending);
        assert!(matches!(
            rx.try_recv(),
            Ok(Msg::Session(SessionMsg::Closed { id: 1 }))
        ));
        assert_eq!(send.as_mut().poll(&mut cx), Poll::Ready(()));
        assert!(matches!(
            rx.try_recv(),
            Ok(Msg::Offered(Offer {
                closes: Some(2),
                ..
            }))
        ));
        // After the aggregator is gone, nothing waits.
        drop(rx);
        assert_eq!(
            pin!(recorder.event(Event::Failover)).poll(&mut cx),
            Poll::Ready(())
        );
    }

    #[test]
    fn a_sample_crosses_the_channel_as_it_was_recorded_in_fewer_bytes() {
        // Instants on both sides of the epoch and on it, to the nanosecond, and every
        // optional one present and absent; with an offer after it and without.
        let now = Instant::from_std(*EPOCH);
        let before = now - Duration::new(0, 123_456_789);
        let after = now + Duration::new(0, 1);
        let mut sample = Sample::session(Op::ManifestGet, Outcome::Ok, before, 5, 1_024);
        sample.timing.end = after;
        let who = Who {
            repository: Some(Arc::from("library/nginx")),
            client: None,
        };
        let bare = Recorded::plain(sample);
        let full = Recorded {
            sample: Sample {
                timing: Timing {
                    intended: Some(before),
                    ready: Some(now),
                    first_byte: Some(after),
                    ..sample.timing
                },
                outcome: Outcome::Error(ErrorKind::Timeout),
                ..sample
            },
            endpoint: Some(3),
            label: Some(1),
            who: Some(who),
            session: Some(7),
            then: Some(Offer {
                at: before,
                session: None,
                closes: Some(u64::MAX),
            }),
        };
        for r in [bare, full] {
            let back = Recorded::from(Wire::from(r.clone()));
            assert_eq!(format!("{back:?}"), format!("{r:?}"));
        }
        // What the channel holds per message (it keeps up to CHANNEL_CAPACITY of them
        // after a backlog): a message grown past this is a run's memory grown with it.
        assert!(
            std::mem::size_of::<Msg>() <= 176,
            "{}",
            std::mem::size_of::<Msg>()
        );
    }
}
