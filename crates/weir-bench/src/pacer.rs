//! Sub-millisecond send pacing. tokio's timer ticks in milliseconds, which would release a
//! millisecond of requests at once; instead a periodic timerfd ticks every `TICK` and one task
//! wakes the connections whose next send is due.

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

/// Pacing resolution: a send leaves at most this much before its schedule.
pub const TICK: Duration = Duration::from_micros(50);

#[derive(Default)]
struct Slot {
    due: Option<Instant>,
    waker: Option<Waker>,
}

/// One slot per connection: when it next wants to send and how to wake it.
pub struct Pacer {
    slots: RefCell<Vec<Slot>>,
}

struct Tick(TimerFd);

impl AsRawFd for Tick {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl Pacer {
    pub fn new(connections: usize) -> Rc<Pacer> {
        Rc::new(Pacer {
            slots: RefCell::new((0..connections).map(|_| Slot::default()).collect()),
        })
    }

    /// Resolves once `due` is less than one tick away.
    pub fn until(self: &Rc<Self>, slot: usize, due: Instant) -> Until {
        Until {
            pacer: self.clone(),
            slot,
            due,
        }
    }

    /// Drives the pacing: run it as a task for as long as connections are sending.
    pub async fn run(self: Rc<Self>) -> Result<(), String> {
        let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK)
            .map_err(|e| format!("timerfd: {e}"))?;
        timer
            .set(
                Expiration::Interval(TimeSpec::from_duration(TICK)),
                TimerSetTimeFlags::empty(),
            )
            .map_err(|e| format!("timerfd: {e}"))?;
        // Deprecated because a wrapped type could close its fd while registered; `Tick` owns
        // its fd and only this AsyncFd holds it, so that cannot happen (the replacement,
        // `register`, is unsafe, which this crate forbids).
        #[allow(deprecated)]
        let fd = AsyncFd::new(Tick(timer)).map_err(|e| format!("timerfd: {e}"))?;
        loop {
            let mut ready = fd.readable().await.map_err(|e| e.to_string())?;
            match ready.get_inner().0.wait() {
                Ok(()) => {}
                Err(nix::errno::Errno::EAGAIN) => {
                    ready.clear_ready();
                    continue;
                }
                Err(e) => return Err(format!("timerfd: {e}")),
            }
            let horizon = Instant::now() + TICK;
            for slot in self.slots.borrow_mut().iter_mut() {
                if slot.due.is_some_and(|due| due <= horizon) {
                    slot.due = None;
                    if let Some(waker) = slot.waker.take() {
                        waker.wake();
                    }
                }
            }
        }
    }
}

pub struct Until {
    pacer: Rc<Pacer>,
    slot: usize,
    due: Instant,
}

impl Future for Until {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.due <= Instant::now() + TICK {
            return Poll::Ready(());
        }
        let mut slots = self.pacer.slots.borrow_mut();
        let slot = &mut slots[self.slot];
        slot.due = Some(self.due);
        if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            slot.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}
