//! Per-worker keep-alive pools of upstream connections, indexed by server id, and the upstream
//! connection itself (its stream, plain TCP or TLS, is `io/upstream_io.rs`). Single-threaded (each
//! worker owns its pool), so no locks: a checkout is a `Vec::pop`.

use crate::io::buffers::READ_CHUNK;
use bytes::BytesMut;
use std::cell::RefCell;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub use crate::io::upstream_io::UpstreamIo;

/// An upstream connection and its read buffer.
pub struct UpstreamConn {
    pub io: UpstreamIo,
    pub buf: BytesMut,
    /// True once the connection has carried a request before this one.
    pub reused: bool,
}

impl UpstreamConn {
    pub fn new(io: UpstreamIo) -> UpstreamConn {
        UpstreamConn {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            reused: false,
        }
    }
}

struct Idle {
    conn: UpstreamConn,
    expires: Instant,
}

#[derive(Default)]
pub struct Pool {
    slots: RefCell<Vec<Vec<Idle>>>,
}

impl Pool {
    /// The most recently used live idle connection to `server`, if any.
    pub fn checkout(&self, server: usize) -> Option<UpstreamConn> {
        let mut slots = self.slots.borrow_mut();
        let slot = slots.get_mut(server)?;
        let now = Instant::now();
        while let Some(idle) = slot.pop() {
            if idle.expires > now && is_quiet(idle.conn.io.tcp()) {
                let mut conn = idle.conn;
                conn.reused = true;
                return Some(conn);
            }
        }
        None
    }

    /// Returns a connection whose last response was read completely.
    pub fn checkin(&self, server: usize, conn: UpstreamConn, max_idle: usize, timeout: Duration) {
        if max_idle == 0 || !conn.buf.is_empty() {
            return;
        }
        let mut slots = self.slots.borrow_mut();
        if slots.len() <= server {
            slots.resize_with(server + 1, Vec::new);
        }
        let slot = &mut slots[server];
        if slot.len() >= max_idle {
            // Drop the oldest: the front has been idle longest.
            slot.remove(0);
        }
        slot.push(Idle {
            conn,
            expires: Instant::now() + timeout,
        });
    }

    /// Closes idle connections past their timeout; returns how many stay idle.
    pub fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut idle = 0;
        for slot in self.slots.borrow_mut().iter_mut() {
            slot.retain(|idle| idle.expires > now);
            idle += slot.len();
        }
        idle
    }
}

/// An idle connection must have nothing to read: data means a protocol error (or, under TLS,
/// the peer's close_notify), EOF means the upstream closed it. tokio answers from cached
/// readiness, so this rarely costs a syscall.
fn is_quiet(io: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(io.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
