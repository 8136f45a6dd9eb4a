//! Deadlines without a timer per request, and the worker's coarse clock. A connection arms its
//! [`ConnWatch`] with what it waits for, since when (the coarse clock) and for how long; the
//! worker's sweep, every [`SWEEP_TICK`], fires the watches whose limit has passed and wakes
//! their task. Arming is a few stores, so every wait of an exchange can have a deadline.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the worker sweeps its connections. A deadline fires between its limit and two
/// ticks after it: the arming time is read from a clock that is up to one tick old.
pub const SWEEP_TICK: Duration = Duration::from_millis(100);

/// What a connection is waiting for; the sweep ends `KeepAlive` waits on stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A TLS client's handshake.
    Handshake,
    /// The rest of a request head, the HTTP/2 preface and handshake, or, when stopping, the
    /// grace for a request's first bytes: a stop does not end it, its deadline does.
    RequestHead,
    /// The first bytes of a request, on a keep-alive connection or a new one: the only wait a
    /// stop ends, since nothing is in flight there (the HTTP/1 driver then gives the client a
    /// short grace; the HTTP/2 one sends GOAWAY).
    KeepAlive,
    /// More bytes of the client's request body.
    RequestBody,
    /// The client to take more of the response.
    ClientWrite,
    /// A new upstream connection to be established.
    Connect,
    /// The upstream to take more of the request.
    UpstreamWrite,
    /// The upstream's response head.
    ResponseHead,
    /// More bytes of the upstream's response body.
    ResponseBody,
    /// A byte either way on a TCP router's connection.
    StreamIdle,
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    what: Waiting,
    since: Instant,
    limit: Duration,
}

/// The wait ended because its deadline passed, or the worker is stopping and ended an idle wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired;

pin_project_lite::pin_project! {
    /// A future under a connection's deadline; see [`ConnWatch::within`].
    pub struct Within<'a, F> {
        watch: &'a ConnWatch,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Result<F::Output, Expired>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let watch = *this.watch;
        if watch.fired.get() {
            watch.armed.set(None);
            return Poll::Ready(Err(Expired));
        }
        match this.fut.poll(cx) {
            Poll::Ready(v) => {
                watch.armed.set(None);
                Poll::Ready(Ok(v))
            }
            Poll::Pending => {
                let mut slot = watch.waker.borrow_mut();
                if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *slot = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// One connection's current deadline and the waker of the task waiting under it.
#[derive(Default)]
pub struct ConnWatch {
    armed: Cell<Option<Armed>>,
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl ConnWatch {
    /// Arms a deadline of `limit` from now and returns `fut` under it: the result is
    /// `Err(Expired)` if the sweep fires first. A new `within` re-arms (each wait its own limit).
    pub fn within<F: Future>(
        &self,
        clock: &Clock,
        what: Waiting,
        limit: Duration,
        fut: F,
    ) -> Within<'_, F> {
        self.fired.set(false);
        self.armed.set(Some(Armed {
            what,
            since: clock.now(),
            limit,
        }));
        Within { watch: self, fut }
    }

    /// The sweep's check: fires an armed deadline that has passed, or, when the worker is
    /// stopping, a keep-alive connection's wait for its next request.
    pub fn check(&self, now: Instant, stopping: bool) {
        let Some(armed) = self.armed.get() else {
            return;
        };
        // `since` may be up to one tick older than the real arming time; waiting one tick
        // more keeps the deadline at or after the configured limit.
        let due =
            now.saturating_duration_since(armed.since) >= armed.limit.saturating_add(SWEEP_TICK);
        let idle = armed.what == Waiting::KeepAlive;
        if due || (stopping && idle) {
            self.fire();
        }
    }

    /// What the connection waits for under its deadline now, if anything.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> Option<Waiting> {
        self.armed.get().map(|armed| armed.what)
    }

    fn fire(&self) {
        self.fired.set(true);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// The worker's clock, read once per sweep tick: deadlines need tick precision, not a clock
/// read per request. Also the `Date` header line, formatted once a second.
pub struct Clock {
    now: Cell<Instant>,
    date_header: Cell<[u8; DATE_HEADER_LEN]>,
    date_second: Cell<u64>,
    /// How far a test has moved this clock ahead of the real one (`testkit`).
    #[cfg(test)]
    skew: Cell<Duration>,
}

/// `date: ` + an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, 29 bytes) + CRLF.
pub const DATE_HEADER_LEN: usize = 6 + 29 + 2;

impl Default for Clock {
    fn default() -> Clock {
        let clock = Clock {
            now: Cell::new(Instant::now()),
            date_header: Cell::new([b' '; DATE_HEADER_LEN]),
            date_second: Cell::new(u64::MAX),
            #[cfg(test)]
            skew: Cell::new(Duration::ZERO),
        };
        clock.tick();
        clock
    }
}

impl Clock {
    pub fn now(&self) -> Instant {
        self.now.get()
    }

    /// The wall clock in Unix seconds as of the last tick (the second the `Date` header
    /// shows): the cache's ages and freshness need seconds, not a clock read per request.
    pub fn unix_seconds(&self) -> u64 {
        self.date_second.get()
    }

    /// The current `Date` header line, ready to append to a head.
    pub fn date_header(&self) -> [u8; DATE_HEADER_LEN] {
        self.date_header.get()
    }

    /// Moves this clock `by` ahead of the real one, for the next tick and every later one
    /// (the `Date` header keeps the wall clock).
    #[cfg(test)]
    pub(crate) fn skip(&self, by: Duration) {
        self.skew.set(self.skew.get() + by);
    }

    /// Reads the clocks; reformats the `Date` value when the second has changed.
    pub fn tick(&self) {
        let now = Instant::now();
        #[cfg(test)]
        let now = now + self.skew.get();
        self.now.set(now);
        let wall = SystemTime::now();
        let second = wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if second != self.date_second.get() {
            let text = httpdate::fmt_http_date(wall);
            let mut line = [b' '; DATE_HEADER_LEN];
            line[..6].copy_from_slice(b"date: ");
            let n = text.len().min(DATE_HEADER_LEN - 8);
            line[6..6 + n].copy_from_slice(&text.as_bytes()[..n]);
            line[DATE_HEADER_LEN - 2..].copy_from_slice(b"\r\n");
            self.date_header.set(line);
            self.date_second.set(second);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_fires_no_earlier_than_the_limit() {
        let watch = ConnWatch::default();
        let start = Instant::now();
        watch.armed.set(Some(Armed {
            what: Waiting::RequestBody,
            since: start,
            limit: Duration::from_secs(2),
        }));
        watch.check(start + Duration::from_secs(2), false);
        assert!(
            !watch.fired.get(),
            "fired at the limit measured from a stale clock"
        );
        watch.check(start + Duration::from_secs(2) + SWEEP_TICK, false);
        assert!(watch.fired.get());
    }

    #[test]
    fn stop_ends_only_idle_waits() {
        let now = Instant::now();
        for (what, fires) in [
            (Waiting::KeepAlive, true),
            (Waiting::RequestHead, false),
            (Waiting::Handshake, false),
            (Waiting::ResponseHead, false),
        ] {
            let watch = ConnWatch::default();
            watch.armed.set(Some(Armed {
                what,
                since: now,
                limit: Duration::from_secs(60),
            }));
            watch.check(now, true);
            assert_eq!(watch.fired.get(), fires, "{what:?}");
        }
    }

    #[test]
    fn date_is_an_imf_fixdate() {
        let clock = Clock::default();
        let line = clock.date_header();
        let line = std::str::from_utf8(&line).unwrap();
        let text = line
            .strip_prefix("date: ")
            .and_then(|l| l.strip_suffix("\r\n"))
            .unwrap();
        assert!(
            text.ends_with(" GMT") && text.as_bytes()[3] == b',',
            "{text}"
        );
        assert!(httpdate::parse_http_date(text).is_ok(), "{text}");
    }
}
