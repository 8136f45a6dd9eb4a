//! A worker's multiplexed HTTP/2 connections ([`H2Pool`]) and what outlives a try, which the
//! reply and the client drivers hold: a connection's shared state and the stream slot counted
//! against it, the response body still on its stream, and the task that pumps a request body
//! into it.

use crate::servers::h2_conn::{RecvStream, SharedUp};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One multiplexed connection, shared by its pool entry, its task and its streams. It is in
/// the pool from the moment it starts opening, so requests that arrive meanwhile wait for it
/// instead of each opening their own.
pub(crate) struct ConnState {
    /// Set once the connection is open.
    pub(crate) send: RefCell<Option<SharedUp>>,
    /// Wakes the requests waiting for the handshake (or its failure).
    pub(crate) opened: Notify,
    /// Streams open on it, or waiting for it to open (a [`StreamSlot`] each).
    pub(crate) streams: Cell<usize>,
    /// Set when opening failed.
    pub(crate) closed: Cell<bool>,
    /// When its last stream ended, for the idle timeout.
    pub(crate) last_used: Cell<Instant>,
    pub(crate) idle_timeout: Duration,
}

impl ConnState {
    /// Streams it may carry: the service's cap, or fewer if the server says so.
    pub(crate) fn has_room(&self, cap: usize) -> bool {
        let limit = match &*self.send.borrow() {
            Some(up) => cap.min(up.borrow().codec.max_concurrent_streams() as usize),
            None => cap,
        };
        !self.is_gone() && self.streams.get() < limit
    }

    /// Opening failed, or the connection ended or was told GOAWAY: no new stream goes on it.
    pub(crate) fn is_gone(&self) -> bool {
        self.closed.get()
            || self
                .send
                .borrow()
                .as_ref()
                .is_some_and(|up| !up.borrow().usable())
    }
}

impl Drop for ConnState {
    /// Out of the pool and without streams: the connection closes (GOAWAY) once idle.
    fn drop(&mut self) {
        if let Some(up) = self.send.get_mut() {
            up.borrow_mut().abandon();
        }
    }
}

/// A stream counted against its connection's cap until dropped (with the response body).
pub struct StreamSlot(pub(crate) Rc<ConnState>);

impl StreamSlot {
    pub(crate) fn enter(state: &Rc<ConnState>) -> StreamSlot {
        state.streams.set(state.streams.get() + 1);
        StreamSlot(state.clone())
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let left = self.0.streams.get() - 1;
        self.0.streams.set(left);
        if left == 0 {
            self.0.last_used.set(Instant::now());
        }
    }
}

/// A worker's HTTP/2 connections, by server id. Single-threaded, like the HTTP/1 pool.
#[derive(Default)]
pub struct H2Pool {
    slots: RefCell<Vec<Vec<Rc<ConnState>>>>,
}

impl H2Pool {
    /// A slot on a connection to `server` with room for one more stream (open or opening);
    /// else a slot on a new entry, which the caller opens (`true`).
    pub(crate) fn take_slot(
        &self,
        server: usize,
        cap: usize,
        idle_timeout: Duration,
    ) -> (StreamSlot, bool) {
        let mut slots = self.slots.borrow_mut();
        if slots.len() <= server {
            slots.resize_with(server + 1, Vec::new);
        }
        let conns = &mut slots[server];
        conns.retain(|c| !c.is_gone());
        if let Some(conn) = conns.iter().find(|c| c.has_room(cap)) {
            return (StreamSlot::enter(conn), false);
        }
        let state = Rc::new(ConnState {
            send: RefCell::new(None),
            opened: Notify::new(),
            streams: Cell::new(0),
            closed: Cell::new(false),
            last_used: Cell::new(Instant::now()),
            idle_timeout,
        });
        let slot = StreamSlot::enter(&state);
        conns.push(state);
        (slot, true)
    }

    /// Closes connections that ended or carried no stream for their idle timeout; returns
    /// how many stay open.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut open = 0;
        for conns in self.slots.borrow_mut().iter_mut() {
            conns.retain(|c| {
                !c.is_gone() && (c.streams.get() > 0 || now < c.last_used.get() + c.idle_timeout)
            });
            open += conns.len();
        }
        open
    }
}

/// A response body still on its HTTP/2 stream: DATA frames, then maybe trailers.
pub struct H2Body {
    pub recv: RecvStream,
    /// Held for their drop: the request body's pump, when it runs on its own (stopped if the
    /// exchange ends first), and the stream's place on its connection (freed when it ends).
    pub _pump: Option<BodyPump>,
    pub _slot: StreamSlot,
}

impl H2Body {
    /// The response ended with its head: nothing (not even trailers) follows.
    pub fn ended(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// A request body being pumped by its own task; dropping this stops it (which resets the
/// upstream stream if the body had not ended).
pub struct BodyPump(tokio::task::AbortHandle);

impl BodyPump {
    pub fn spawn(pumping: impl std::future::Future<Output = ()> + 'static) -> BodyPump {
        BodyPump(tokio::task::spawn_local(pumping).abort_handle())
    }
}

impl Drop for BodyPump {
    fn drop(&mut self) {
        self.0.abort();
    }
}
