//! When the kernel received an answer's bytes: receive stamps on plain-HTTP sockets
//! (`SO_TIMESTAMPNS`), read with the bytes (`recvmsg`), and turned into instants on the
//! monotonic clock the rest of the timing uses.
//!
//! A read's stamp is the arrival of the last segment it returns, in the realtime clock. It
//! becomes an instant by its age: the realtime now minus the stamp, taken off the
//! monotonic now read at the same place. A realtime step between the arrival and that read
//! would move the age by the step, so the instant is held between the request's send time
//! and the now it was measured against: an answer is never placed outside its exchange.
//! Why: an answer timed when it is read carries the worker's turn between its arrival and
//! its reading (docs/benchmarks.md, "The hot path", step 25); timed from its arrival, it
//! does not, however many answers a wake-up of the worker handles.

use std::cell::{Cell, RefCell};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use nix::sys::socket::{self, sockopt, ControlMessageOwned, MsgFlags};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Room for one `SCM_TIMESTAMPNS` message (a header and a `timespec`) and some to spare.
const CONTROL_ROOM: usize = 64;

/// Reads with at most this much room go through the thread's scratch buffer (zeroed once)
/// and are copied out; larger ones zero their room in place (`recvmsg` takes initialized
/// bytes: a head and a manifest copy a kilobyte or two where zeroing would write four).
/// The plain-HTTP connections read a long body without stamps up to its last bytes, so
/// the stamped reads of a GET are its head's and its body's end.
pub(crate) const SCRATCH: usize = 16 * 1024;

/// A realtime instant from the kernel, in nanoseconds since the Unix epoch.
pub(crate) type Stamp = u64;

/// What the running task read last: a read's stamp, or the arrival of an answer read for
/// it elsewhere (stress mode's event loop, `src/exec/lane.rs`), already an instant, and
/// whether that came from a stamp.
#[derive(Debug, Clone, Copy)]
enum Last {
    Stamp(Stamp),
    At(Instant, bool),
}

thread_local! {
    /// The stamp of the last read a plain-HTTP connection made on this thread, and the
    /// task it made it for: the client takes it where it times the answer, in the same
    /// task. A read without a stamp leaves none.
    static LAST: Cell<Option<(tokio::task::Id, Last)>> = const { Cell::new(None) };
    /// The last stamp turned into an instant on this thread, that instant (not yet held
    /// inside an exchange) and the monotonic now it was measured against: a GET's head and
    /// end that came in one read are placed by one reading of the clocks, the same.
    static CONVERTED: Cell<Option<(Stamp, Instant, Instant)>> = const { Cell::new(None) };
    /// Where small stamped reads land first ([`SCRATCH`]).
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// Asks the kernel to stamp what `stream` receives; `false` when it cannot (the socket's
/// reads are then timed when they are read).
pub(crate) fn enable(stream: &impl AsFd) -> bool {
    socket::setsockopt(stream, sockopt::ReceiveTimestampns, &true).is_ok()
}

/// Reads what `stream` has (without blocking: `WouldBlock` when it has nothing), up to
/// `room` bytes appended to `into` (which has that much spare capacity), with the realtime
/// arrival of the last segment read, if the kernel stamped it.
pub(crate) fn recv_into(
    stream: &TcpStream,
    into: &mut BytesMut,
    room: usize,
) -> io::Result<(usize, Option<Stamp>)> {
    if room <= SCRATCH {
        return SCRATCH_BUF.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let got = recv_stamped(stream, &mut scratch[..room])?;
            into.extend_from_slice(&scratch[..got.0]);
            Ok(got)
        });
    }
    let len = into.len();
    into.resize(len + room, 0);
    let got = recv_stamped(stream, &mut into[len..]);
    into.truncate(len + got.as_ref().map_or(0, |g| g.0));
    got
}

/// Reads what `stream` has into `into` (without blocking), with the stamp of the last
/// segment read.
pub(crate) fn recv_stamped(
    stream: &impl AsRawFd,
    into: &mut [u8],
) -> io::Result<(usize, Option<Stamp>)> {
    let mut control = [0u8; CONTROL_ROOM];
    let mut iov = [IoSliceMut::new(into)];
    let msg = socket::recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut control),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let mut stamp = None;
    if let Ok(messages) = msg.cmsgs() {
        for m in messages {
            if let ControlMessageOwned::ScmTimestampns(ts) = m {
                let (secs, nanos) = (ts.tv_sec(), ts.tv_nsec());
                if let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u64::try_from(nanos)) {
                    stamp = secs
                        .checked_mul(1_000_000_000)
                        .and_then(|s| s.checked_add(nanos));
                }
            }
        }
    }
    Ok((msg.bytes, stamp))
}

/// The realtime clock now, in nanoseconds since the Unix epoch (0 before it). Read through
/// the C library (its vDSO call), which every tool that runs creb-rs under it follows.
pub(crate) fn realtime_now() -> Stamp {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Notes `stamp` as the arrival of what the running task has just read (`None`: what it
/// read has no stamp).
pub(crate) fn note(stamp: Option<Stamp>) {
    let last = tokio::task::try_id().zip(stamp.map(Last::Stamp));
    LAST.with(|l| l.set(last));
}

/// Notes `at` as the arrival of the answer the running task is given (read for it by
/// stress mode's event loop), `stamped` when it came from the kernel's stamp.
pub(crate) fn note_at(at: Instant, stamped: bool) {
    let last = tokio::task::try_id().map(|task| (task, Last::At(at, stamped)));
    LAST.with(|l| l.set(last));
}

/// Forgets what the running task read last: an exchange about to be sent is timed by its
/// own reads only.
pub(crate) fn forget() {
    LAST.with(|l| l.set(None));
}

/// When what the running task read last arrived, as an instant between `sent` and the
/// now it reads (that now when the read had no stamp, or was another task's); and whether
/// it was stamped.
pub(crate) fn last_arrival(sent: Instant) -> (Instant, bool) {
    let last = LAST
        .with(Cell::get)
        .filter(|&(task, _)| tokio::task::try_id() == Some(task));
    let stamp = match last {
        None => return (Instant::now(), false),
        Some((_, Last::At(at, stamped))) => return (at.max(sent), stamped),
        Some((_, Last::Stamp(stamp))) => stamp,
    };
    if let Some((converted, at, then)) = CONVERTED.with(Cell::get) {
        if converted == stamp {
            return (at.max(sent).min(then), true);
        }
    }
    let (now, real_now) = (Instant::now(), realtime_now());
    if let Some(at) = age_before(stamp, now, real_now) {
        CONVERTED.with(|c| c.set(Some((stamp, at, now))));
        return (at.max(sent).min(now), true);
    }
    (arrived_at(Some(stamp), sent, now, real_now), true)
}

/// `stamp` (a realtime arrival) as its age at `real_now` taken off `now` (the monotonic
/// now read with it); `None` when it has no age (a stamp after the realtime now: the clock
/// stepped back) or the monotonic clock has no instant that early.
fn age_before(stamp: Stamp, now: Instant, real_now: Stamp) -> Option<Instant> {
    now.checked_sub(Duration::from_nanos(real_now.checked_sub(stamp)?))
}

/// The instant `stamp` (a realtime arrival) stands for: its age at `real_now`, taken off
/// `now` (the monotonic now read with it), held between `sent` and `now`. Without a stamp,
/// `now`.
pub(crate) fn arrived_at(
    stamp: Option<Stamp>,
    sent: Instant,
    now: Instant,
    real_now: Stamp,
) -> Instant {
    let Some(stamp) = stamp else { return now };
    // A stamp after the realtime now (the clock stepped back): no age to go by.
    if stamp > real_now {
        return now;
    }
    age_before(stamp, now, real_now)
        .map_or(sent, |at| at.max(sent))
        .min(now)
}

/// A connected pair whose first socket stamps what it receives, returned once a segment it
/// received came stamped (for tests). The kernel turns stamping on for the whole system by
/// deferred work when the first socket asks, and a segment received before that carries no
/// stamp; held, the pair keeps it on for other sockets too. Bounded: 100 probes, 10 ms apart.
#[cfg(test)]
pub(crate) async fn stamping_pair() -> (TcpStream, TcpStream) {
    use tokio::io::AsyncWriteExt;
    let (client, mut server) = tests::pair().await;
    assert!(enable(&client));
    for _ in 0..100 {
        server.write_all(b"x").await.unwrap();
        client.readable().await.unwrap();
        let mut buf = BytesMut::new();
        if let (1, Some(_)) = recv_into(&client, &mut buf, 64).unwrap() {
            return (client, server);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the kernel stamps nothing a socket receives");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A connected pair of sockets on loopback.
    pub(super) async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn bytes_read_late_are_stamped_with_their_arrival() {
        let (client, mut server) = stamping_pair().await;
        // Through the scratch buffer, then in place.
        for room in [64, SCRATCH * 2] {
            server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
            let written = realtime_now();
            // The bytes wait in the socket while the reader is busy elsewhere.
            std::thread::sleep(Duration::from_millis(60));
            client.readable().await.unwrap();
            let mut buf = BytesMut::from(&b"kept"[..]);
            buf.reserve(room);
            let (n, stamp) = recv_into(&client, &mut buf, room).unwrap();
            assert_eq!(n, 19);
            assert_eq!(&buf[..], b"keptHTTP/1.1 200 OK\r\n\r\n");
            let stamp = stamp.expect("the kernel stamps what it receives");
            let age = Duration::from_nanos(realtime_now() - stamp);
            assert!(
                age >= Duration::from_millis(60),
                "stamped as it was read: {age:?}"
            );
            let since_write = Duration::from_nanos(stamp.saturating_sub(written));
            assert!(
                since_write < Duration::from_millis(30),
                "{since_write:?} after it was written"
            );
        }
    }

    #[tokio::test]
    async fn a_socket_with_nothing_to_read_would_block() {
        let (client, _server) = pair().await;
        assert!(enable(&client));
        let mut buf = BytesMut::with_capacity(SCRATCH * 2);
        for room in [16, SCRATCH * 2] {
            let err = recv_into(&client, &mut buf, room).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
            assert!(buf.is_empty(), "nothing read, nothing added");
        }
    }

    #[tokio::test]
    async fn one_reads_stamp_is_one_instant_however_often_it_is_asked() {
        // In a task of its own: a stamp is the running task's.
        tokio::spawn(async {
            let ms = Duration::from_millis;
            let sent = Instant::now() - ms(100);
            note(Some(realtime_now() - 30_000_000));
            let (head, stamped) = last_arrival(sent);
            assert!(stamped);
            let age = head.elapsed();
            assert!(age >= ms(30) && age < ms(60), "30 ms ago: {age:?}");
            std::thread::sleep(ms(5));
            assert_eq!(
                last_arrival(sent),
                (head, true),
                "the same read, the same instant"
            );
            let later = Instant::now() - ms(10);
            assert_eq!(last_arrival(later).0, later, "held inside a later exchange");
            note(Some(realtime_now() - 1_000_000));
            let (next, _) = last_arrival(sent);
            assert!(next > head + ms(25), "another read, another instant");
            forget();
            assert!(!last_arrival(sent).1, "nothing read: no stamp");
        })
        .await
        .unwrap();
    }

    #[test]
    fn an_arrival_is_its_age_before_now_held_inside_its_exchange() {
        let sent = Instant::now();
        let now = sent + Duration::from_millis(100);
        let real_now = realtime_now();
        let stamp = |ago_ms: u64| Some(real_now - ago_ms * 1_000_000);
        assert_eq!(
            arrived_at(stamp(30), sent, now, real_now),
            now - Duration::from_millis(30)
        );
        // Older than the exchange (the clock stepped forward since): its send time.
        assert_eq!(arrived_at(stamp(500), sent, now, real_now), sent);
        // After the realtime now (the clock stepped back), or no stamp: now.
        let later = Some(real_now + 5_000_000);
        assert_eq!(arrived_at(later, sent, now, real_now), now);
        assert_eq!(arrived_at(None, sent, now, real_now), now);
    }
}
