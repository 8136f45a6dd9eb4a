//! Parked connections: a keep-alive client connection idle for [`PARK_AFTER`] leaves its
//! task and waits here, as a descriptor in the worker's own epoll set and one small slot
//! (about 60 bytes), instead of a task, a tokio registration and the driver's state (1.4 KB).
//! When the client sends again, the worker gets it back through [`IdleConnections::woken`] and
//! starts a new task for it; the idle timeout, counted from when the wait began, closes it
//! here. A stop hands every parked connection back ([`IdleConnections::take_all`]) for its
//! task to drain it like any idle connection.
//!
//! A TLS connection parks with its session: the tokio-rustls stream boxed in a slot of its own
//! (rustls keeps its keys and its 4 KB record buffer, which the buffered API cannot free).
//! Its socket stays registered with tokio as well, so the stream the task served goes on
//! unchanged; unwrapping it to leave the reactor would need a stream type of weir's own on the
//! hot path, which cost 2.4% more instructions per TLS request for 0.25 KB per parked one.
//!
//! An HTTP/2 connection (plain or over TLS) parks the same way with its codec's state boxed
//! beside its socket: the HPACK tables, windows, settings and stream ids it must keep, its
//! buffers already given back (`Connection::release_idle_buffers`). Its idle timeout does not
//! just close it: the connection is handed back ([`IdleConnections::take_due`]) for a task to
//! send GOAWAY as an idle HTTP/2 connection's timeout does.
//!
//! Parking costs three `epoll_ctl` calls per idle period, so it waits for a full second of
//! idleness: a connection that is busy never parks.

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::cell::RefCell;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

/// How long a connection waits for its next request in its task before it is parked.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// Ready events taken from the epoll set per wake.
const EVENTS_PER_WAKE: usize = 256;

/// A parked connection: its socket, or its boxed TLS session and socket.
struct Parked<Io> {
    io: Io,
    peer: SocketAddr,
    entrypoint: u32,
    /// The idle timeout's end: closed here once the clock passes it.
    expires: Instant,
}

/// A connection the client has written to (or closed) while it was parked.
pub struct Woken {
    pub io: WokenIo,
    pub peer: SocketAddr,
    pub entrypoint: usize,
}

pub enum WokenIo {
    Plain(TcpStream),
    Tls(Box<ParkedTls>),
    H2(Box<ParkedH2>),
}

/// A client's TLS connection, as the drivers serve it.
pub type ParkedTls = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// An idle HTTP/2 connection: its stream and the codec's state (HPACK tables, windows,
/// settings), its buffers given back.
pub struct ParkedH2 {
    pub io: H2Io,
    pub codec: weir_h2::Connection,
    /// Handed back because its idle timeout passed: its task says GOAWAY.
    pub timed_out: bool,
}

pub enum H2Io {
    Plain(TcpStream),
    /// Boxed apart: inline, its 1.2 KB would size every parked cleartext connection.
    Tls(Box<ParkedTls>),
}

/// Marks a TLS slot's index in an epoll event's data.
const TLS_SLOT: u64 = 1 << 32;
/// Marks an HTTP/2 slot's index.
const H2_SLOT: u64 = 2 << 32;
/// The index bits of an event's data.
const INDEX: u64 = u32::MAX as u64;

struct EpollFd(Epoll);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0 .0.as_raw_fd()
    }
}

/// One worker's parked connections.
pub struct IdleConnections {
    epoll: AsyncFd<EpollFd>,
    slots: RefCell<Slots<TcpStream>>,
    tls_slots: RefCell<Slots<Box<ParkedTls>>>,
    h2_slots: RefCell<Slots<Box<ParkedH2>>>,
    /// HTTP/2 connections whose idle timeout passed, for the sweep to give a task.
    due: RefCell<Vec<Woken>>,
}

struct Slots<Io> {
    parked: Vec<Option<Parked<Io>>>,
    /// Empty slots in `parked`, reused first.
    free: Vec<u32>,
}

impl<Io> Default for Slots<Io> {
    fn default() -> Self {
        Slots {
            parked: Vec::new(),
            free: Vec::new(),
        }
    }
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
            tls_slots: RefCell::default(),
            h2_slots: RefCell::default(),
            due: RefCell::default(),
        })
    }

    /// Parks `io` until the client writes, closes, or `expires` passes. A connection that
    /// cannot be added to the set is closed (it was idle; the client reconnects).
    pub fn park(&self, io: TcpStream, peer: SocketAddr, entrypoint: usize, expires: Instant) {
        let parked = Parked::new(io, peer, entrypoint, expires);
        self.park_in(&mut self.slots.borrow_mut(), parked, 0);
    }

    /// Parks a TLS connection as `park` does, its session kept.
    pub fn park_tls(
        &self,
        io: Box<ParkedTls>,
        peer: SocketAddr,
        entrypoint: usize,
        expires: Instant,
    ) {
        forget_task(io.get_ref().0);
        let parked = Parked::new(io, peer, entrypoint, expires);
        self.park_in(&mut self.tls_slots.borrow_mut(), parked, TLS_SLOT);
    }

    /// Parks an idle HTTP/2 connection as `park` does, its codec's state kept.
    pub fn park_h2(
        &self,
        io: Box<ParkedH2>,
        peer: SocketAddr,
        entrypoint: usize,
        expires: Instant,
    ) {
        if let H2Io::Tls(stream) = &io.io {
            forget_task(stream.get_ref().0);
        }
        let parked = Parked::new(io, peer, entrypoint, expires);
        self.park_in(&mut self.h2_slots.borrow_mut(), parked, H2_SLOT);
    }

    fn park_in<Io: Descriptor>(&self, slots: &mut Slots<Io>, parked: Parked<Io>, tag: u64) {
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
        let fd = parked.io.descriptor();
        // One-shot: after its first event the descriptor stays in the set, disabled, until
        // the connection closes (closing removes it), so waking costs no `epoll_ctl`.
        // A connection parked before is still in the set (disabled), so it is re-armed.
        let interest = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLONESHOT;
        let epoll = &self.epoll.get_ref().0;
        let mut event = EpollEvent::new(interest, tag | u64::from(index));
        let added = match epoll.add(fd, event) {
            Err(nix::errno::Errno::EEXIST) => epoll.modify(fd, &mut event),
            other => other,
        };
        if added.is_err() {
            slots.free.push(index);
            return;
        }
        slots.parked[index as usize] = Some(parked);
    }

    /// How many connections are parked.
    pub fn len(&self) -> usize {
        self.slots.borrow().len() + self.tls_slots.borrow().len() + self.h2_slots.borrow().len()
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
            let mut tls_slots = self.tls_slots.borrow_mut();
            let mut h2_slots = self.h2_slots.borrow_mut();
            for event in &events[..n] {
                let index = (event.data() & INDEX) as usize;
                let taken = match event.data() & !INDEX {
                    0 => slots.take(index).map(|p| p.woken(WokenIo::Plain)),
                    TLS_SLOT => tls_slots.take(index).map(|p| p.woken(WokenIo::Tls)),
                    _ => h2_slots.take(index).map(|p| p.woken(WokenIo::H2)),
                };
                let Some(taken) = taken else {
                    continue;
                };
                let hung_up = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR;
                if !event.events().intersects(hung_up) {
                    woken.push(taken);
                }
            }
            if !woken.is_empty() {
                return Ok(woken);
            }
        }
    }

    /// The sweep: closes connections whose idle timeout has passed; HTTP/2 ones wait in
    /// [`take_due`](Self::take_due) for their GOAWAY.
    pub fn expire(&self, now: Instant) {
        if self.is_empty() {
            return;
        }
        self.slots.borrow_mut().expire(now, drop);
        self.tls_slots.borrow_mut().expire(now, drop);
        let epoll = &self.epoll.get_ref().0;
        let mut due = self.due.borrow_mut();
        self.h2_slots.borrow_mut().expire(now, |mut parked| {
            // Out of the set: it is armed, and its slot may be reused.
            let _ = epoll.delete(parked.io.descriptor());
            parked.io.timed_out = true;
            due.push(parked.woken(WokenIo::H2));
        });
    }

    /// The HTTP/2 connections whose idle timeout passed while parked.
    pub fn take_due(&self) -> Vec<Woken> {
        std::mem::take(&mut *self.due.borrow_mut())
    }

    /// Every parked connection, taken out of the set (a stop drains them in tasks: closing
    /// them here could cross a request their client has just sent).
    pub fn take_all(&self) -> Vec<Woken> {
        if self.is_empty() {
            return Vec::new();
        }
        let epoll = &self.epoll.get_ref().0;
        let mut taken = self.take_due();
        taken.reserve(self.len());
        // Still armed: an event for a slot reused later would wake the wrong one.
        let mut slots = self.slots.borrow_mut();
        slots.take_each(|parked| {
            let _ = epoll.delete(parked.io.as_fd());
            taken.push(parked.woken(WokenIo::Plain));
        });
        let mut tls_slots = self.tls_slots.borrow_mut();
        tls_slots.take_each(|parked| {
            let _ = epoll.delete(parked.io.descriptor());
            taken.push(parked.woken(WokenIo::Tls));
        });
        let mut h2_slots = self.h2_slots.borrow_mut();
        h2_slots.take_each(|parked| {
            let _ = epoll.delete(parked.io.descriptor());
            taken.push(parked.woken(WokenIo::H2));
        });
        taken
    }
}

/// What a parked connection's socket is watched by.
trait Descriptor {
    fn descriptor(&self) -> BorrowedFd<'_>;
}

impl Descriptor for TcpStream {
    fn descriptor(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
}

impl Descriptor for Box<ParkedTls> {
    fn descriptor(&self) -> BorrowedFd<'_> {
        self.get_ref().0.as_fd()
    }
}

impl Descriptor for Box<ParkedH2> {
    fn descriptor(&self) -> BorrowedFd<'_> {
        match &self.io {
            H2Io::Plain(socket) => socket.as_fd(),
            H2Io::Tls(stream) => stream.get_ref().0.as_fd(),
        }
    }
}

/// A parked socket that stays registered with tokio: its registration holds the waker of the
/// task that last read it, and through it the ended task and the pages around it (12 KB per
/// connection in a release build); a no-op waker takes its place.
fn forget_task(socket: &tokio::net::TcpStream) {
    let mut no_task = Context::from_waker(Waker::noop());
    let _ = socket.poll_read_ready(&mut no_task);
    let _ = socket.poll_write_ready(&mut no_task);
}

impl<Io> Parked<Io> {
    fn new(io: Io, peer: SocketAddr, entrypoint: usize, expires: Instant) -> Parked<Io> {
        Parked {
            io,
            peer,
            entrypoint: entrypoint as u32,
            expires,
        }
    }

    fn woken(self, io: impl FnOnce(Io) -> WokenIo) -> Woken {
        Woken {
            io: io(self.io),
            peer: self.peer,
            entrypoint: self.entrypoint as usize,
        }
    }
}

impl<Io> Slots<Io> {
    fn len(&self) -> usize {
        self.parked.len() - self.free.len()
    }

    fn take(&mut self, index: usize) -> Option<Parked<Io>> {
        let parked = self.parked.get_mut(index)?.take()?;
        self.free.push(index as u32);
        Some(parked)
    }

    fn take_each(&mut self, mut each: impl FnMut(Parked<Io>)) {
        for index in 0..self.parked.len() {
            if let Some(parked) = self.take(index) {
                each(parked);
            }
        }
    }

    /// Takes the connections whose idle timeout has passed, each to `expired`.
    fn expire(&mut self, now: Instant, mut expired: impl FnMut(Parked<Io>)) {
        for index in 0..self.parked.len() {
            let due = self.parked[index]
                .as_ref()
                .is_some_and(|p| now >= p.expires);
            if due {
                if let Some(parked) = self.take(index) {
                    expired(parked);
                }
            }
        }
    }
}
