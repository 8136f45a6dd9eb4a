//! Sub-millisecond send pacing. tokio's timer ticks in milliseconds, which would release a
//! millisecond of requests at once; instead a periodic timerfd ticks every `TICK` and one task
//! wakes the connections whose next send is due.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use weir_proxy::ticker::Ticker;

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
        let ticker = Ticker::new(TICK).map_err(|e| format!("timerfd: {e}"))?;
        loop {
            ticker.tick().await.map_err(|e| format!("timerfd: {e}"))?;
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
