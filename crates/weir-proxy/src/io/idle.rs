//! Parked connections: a plain keep-alive client connection idle for [`PARK_AFTER`] leaves its
//! task and waits here, as a descriptor in the worker's own epoll set and one small slot
//! (about 60 bytes), instead of a task, a tokio registration and the driver's state (1.4 KB).
//! When the client sends again, the worker gets it back through [`IdleConnections::woken`] and
//! starts a new HTTP/1 task; the idle timeout, counted from when the wait began, closes it
//! here. A stop hands every parked connection back ([`IdleConnections::take_all`]) for its
//! task to drain it like any idle connection.
//!
//! Parking costs three `epoll_ctl` calls per idle period, so it waits for a full second of
//! idleness: a connection that is busy never parks. TLS connections are not parked (their
//! session state lives in the task).

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::cell::RefCell;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

/// How long a connection waits for its next request in its task before it is parked.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// Ready events taken from the epoll set per wake.
const EVENTS_PER_WAKE: usize = 256;

/// A parked connection.
struct Parked {
    io: TcpStream,
    peer: SocketAddr,
    entrypoint: u32,
    /// The idle timeout's end: closed here once the clock passes it.
    expires: Instant,
}

/// A connection the client has written to (or closed) while it was parked.
pub struct Woken {
    pub io: TcpStream,
    pub peer: SocketAddr,
    pub entrypoint: usize,
}

struct EpollFd(Epoll);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0 .0.as_raw_fd()
    }
}

/// One worker's parked connections.
pub struct IdleConnections {
    epoll: AsyncFd<EpollFd>,
    slots: RefCell<Slots>,
}

#[derive(Default)]
struct Slots {
    parked: Vec<Option<Parked>>,
    /// Empty slots in `parked`, reused first.
    free: Vec<u32>,
}

impl IdleConnections {
    /// Needs a running tokio reactor: the epoll set is itself watched by it.
    pub fn new() -> io::Result<IdleConnections> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        // Deprecated for wrapped types that could close their descriptor while registered;
        // `EpollFd` owns its descriptor and only this AsyncFd holds it (as in `io/ticker.rs`).
        #[allow(deprecated)]
        Ok(IdleConnections {
            epoll: AsyncFd::new(EpollFd(epoll))?,
            slots: RefCell::default(),
        })
    }

    /// Parks `io` until the client writes, closes, or `expires` passes. A connection that
    /// cannot be added to the set is closed (it was idle; the client reconnects).
    pub fn park(&self, io: TcpStream, peer: SocketAddr, entrypoint: usize, expires: Instant) {
        let mut slots = self.slots.borrow_mut();
        let index = match slots.free.pop() {
            Some(index) => index,
            None => {
                let Ok(index) = u32::try_from(slots.parked.len()) else {
                    return;
                };
                slots.parked.push(None);
                index
            }
        };
        // One-shot: after its first event the descriptor stays in the set, disabled, until
        // the connection closes (closing removes it), so waking costs no `epoll_ctl`.
        // A connection parked before is still in the set (disabled), so it is re-armed.
        let interest = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLONESHOT;
        let epoll = &self.epoll.get_ref().0;
        let mut event = EpollEvent::new(interest, u64::from(index));
        let added = match epoll.add(io.as_fd(), event) {
            Err(nix::errno::Errno::EEXIST) => epoll.modify(io.as_fd(), &mut event),
            other => other,
        };
        if added.is_err() {
            slots.free.push(index);
            return;
        }
        slots.parked[index as usize] = Some(Parked {
            io,
            peer,
            entrypoint: entrypoint as u32,
            expires,
        });
    }

    /// How many connections are parked.
    pub fn len(&self) -> usize {
        let slots = self.slots.borrow();
        slots.parked.len() - slots.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until parked clients have written, and returns those connections. Clients that
    /// closed while parked are closed here without a task.
    pub async fn woken(&self) -> io::Result<Vec<Woken>> {
        let mut events = [EpollEvent::empty(); EVENTS_PER_WAKE];
        loop {
            let mut ready = self.epoll.readable().await?;
            let n = match ready.get_inner().0.wait(&mut events, EpollTimeout::ZERO) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                ready.clear_ready();
                continue;
            }
            let mut woken = Vec::with_capacity(n);
            let mut slots = self.slots.borrow_mut();
            for event in &events[..n] {
                let Some(parked) = slots.take(event.data() as usize) else {
                    continue;
                };
                let hung_up = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR;
                if !event.events().intersects(hung_up) {
                    woken.push(Woken {
                        io: parked.io,
                        peer: parked.peer,
                        entrypoint: parked.entrypoint as usize,
                    });
                }
            }
            if !woken.is_empty() {
                return Ok(woken);
            }
        }
    }

    /// The sweep: closes connections whose idle timeout has passed.
    pub fn expire(&self, now: Instant) {
        if self.is_empty() {
            return;
        }
        let mut slots = self.slots.borrow_mut();
        for index in 0..slots.parked.len() {
            let due = slots.parked[index]
                .as_ref()
                .is_some_and(|p| now >= p.expires);
            if due {
                slots.take(index);
            }
        }
    }

    /// Every parked connection, taken out of the set (a stop drains them in tasks: closing
    /// them here could cross a request their client has just sent).
    pub fn take_all(&self) -> Vec<Woken> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut slots = self.slots.borrow_mut();
        let epoll = &self.epoll.get_ref().0;
        let mut taken = Vec::with_capacity(slots.parked.len() - slots.free.len());
        for index in 0..slots.parked.len() {
            if let Some(parked) = slots.take(index) {
                // Still armed: an event for a slot reused later would wake the wrong one.
                let _ = epoll.delete(parked.io.as_fd());
                taken.push(Woken {
                    io: parked.io,
                    peer: parked.peer,
                    entrypoint: parked.entrypoint as usize,
                });
            }
        }
        taken
    }
}

impl Slots {
    fn take(&mut self, index: usize) -> Option<Parked> {
        let parked = self.parked.get_mut(index)?.take()?;
        self.free.push(index as u32);
        Some(parked)
    }
}
