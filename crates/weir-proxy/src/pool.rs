//! Per-worker keep-alive pools of upstream connections, indexed by server id. Single-threaded
//! (each worker owns its pool), so no locks: a checkout is a `Vec::pop`.

use bytes::BytesMut;
use std::cell::RefCell;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// An upstream connection and its read buffer.
pub struct UpstreamConn {
    pub io: TcpStream,
    pub buf: BytesMut,
    /// True once the connection has carried a request before this one.
    pub reused: bool,
}

impl UpstreamConn {
    pub fn new(io: TcpStream) -> UpstreamConn {
        UpstreamConn {
            io,
            buf: BytesMut::with_capacity(8 * 1024),
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
            if idle.expires > now && is_quiet(&idle.conn.io) {
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

    /// Closes idle connections past their timeout.
    pub fn sweep(&self) {
        let now = Instant::now();
        for slot in self.slots.borrow_mut().iter_mut() {
            slot.retain(|idle| idle.expires > now);
        }
    }
}

/// An idle connection must have nothing to read: data means a protocol error, EOF means the
/// upstream closed it. tokio answers from cached readiness, so this rarely costs a syscall.
fn is_quiet(io: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(io.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
