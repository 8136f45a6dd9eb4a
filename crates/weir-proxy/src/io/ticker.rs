//! A periodic tick from a timerfd, waited on through tokio's I/O driver. Workers run without
//! tokio's timer: with it, every park of the event loop read the clock and walked the timer
//! wheel, about 1,100 instructions per proxied request (callgrind). Deadlines are the worker's
//! sweep instead, driven by this tick. The load generator paces its sends with it too.

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Ticks every `period` (ticks missed while the thread was busy are merged into one).
pub struct Ticker {
    fd: AsyncFd<Fd>,
}

impl Ticker {
    pub fn new(period: Duration) -> io::Result<Ticker> {
        Ticker::armed(Expiration::Interval(TimeSpec::from_duration(period)))
    }

    /// Ticks once, `after` from now: a precise wait for the few tasks that need one (a
    /// request waiting for its rate limit's token).
    pub fn once(after: Duration) -> io::Result<Ticker> {
        // A zero expiration would disarm the timer: wait a nanosecond at least.
        let after = after.max(Duration::from_nanos(1));
        Ticker::armed(Expiration::OneShot(TimeSpec::from_duration(after)))
    }

    /// Arms the timer again to tick once, `after` from now (a Lua cosocket's timer, reused for
    /// each of its waits: one syscall instead of a new timerfd per wait).
    pub fn rearm_once(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let expiration = Expiration::OneShot(TimeSpec::from_duration(after));
        self.fd
            .get_ref()
            .0
            .set(expiration, TimerSetTimeFlags::empty())?;
        Ok(())
    }

    fn armed(expiration: Expiration) -> io::Result<Ticker> {
        let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK)?;
        timer.set(expiration, TimerSetTimeFlags::empty())?;
        // Deprecated because a wrapped type could close its descriptor while registered; `Fd`
        // owns its descriptor and only this AsyncFd holds it, so that cannot happen (the
        // replacement, `register`, is unsafe).
        #[allow(deprecated)]
        Ok(Ticker {
            fd: AsyncFd::new(Fd(timer))?,
        })
    }

    /// [`Ticker::tick`] polled: ready once the timer has ticked since the last tick taken;
    /// else `cx` is woken when it does.
    pub fn poll_tick(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut ready = match self.fd.poll_read_ready(cx) {
                Poll::Ready(ready) => ready?,
                Poll::Pending => return Poll::Pending,
            };
            match ready.get_inner().0.wait() {
                Ok(()) => return Poll::Ready(Ok(())),
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
    }

    /// Waits for the next tick.
    pub async fn tick(&self) -> io::Result<()> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.get_inner().0.wait() {
                Ok(()) => return Ok(()),
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
