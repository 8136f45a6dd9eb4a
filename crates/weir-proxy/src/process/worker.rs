//! What one worker thread owns and shares with its connections: the configuration snapshot,
//! upstream pools, the clock and the connections' watches (swept every tick), parked idle
//! connections, lent buffers, client-side limits, and the stop signal. `process/server.rs` starts the
//! workers.

use crate::actions::open_files::OpenFiles;
use crate::conn::idle::IdleConnections;
use crate::conn::watch::{Clock, ConnWatch};
use crate::io::buffers::READ_CHUNK;
use crate::listen::listeners::Listener;
use crate::observe::metrics::WorkerCells;
use crate::process::runtime::{ClientTimeouts, Runtime};
use crate::upstream::h2::pool::H2Pool;
use crate::upstream::pool::Pool;
use arc_swap::ArcSwap;
use bytes::BytesMut;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a stop waits for the next request of an idle HTTP/1 connection before closing it
/// (`H1Client::await_last_request`): ample for a busy keep-alive client, whose next request
/// follows its last answer within a round trip, so it is answered with `Connection: close`
/// instead of failing on a closed connection. At most a third of `graceful_timeout`.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Process-wide stop signal shared by all workers.
#[derive(Default)]
pub struct Shutdown {
    pub requested: AtomicBool,
    pub notify: Notify,
}

impl Shutdown {
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }

    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// What the control thread tells a worker (`process/server.rs` acts on it).
pub enum WorkerCommand {
    /// Accept on this socket for the entrypoint in `slot` (besides any it has for the slot).
    Listen { slot: usize, listener: Listener },
    /// Stop accepting for the entrypoint in `slot` and close its sockets.
    Close { slot: usize },
    /// A new snapshot is in place: apply its worker-wide settings.
    Reloaded,
}

/// What a worker thread starts from.
pub struct WorkerSetup {
    pub id: usize,
    pub config: Arc<ArcSwap<Runtime>>,
    pub shutdown: Arc<Shutdown>,
    pub metrics: Arc<WorkerCells>,
}

/// What one worker thread owns.
pub struct Worker {
    pub id: usize,
    pub config: Arc<ArcSwap<Runtime>>,
    pub pool: Pool,
    /// Multiplexed connections to HTTP/2 servers.
    pub h2_pool: H2Pool,
    pub shutdown: Arc<Shutdown>,
    /// Every open client connection's watch, so the worker's sweep can fire their deadlines
    /// and a stop can end idle ones. Compacted by the sweep.
    pub connections: RefCell<Vec<Rc<ConnWatch>>>,
    /// Keep-alive connections idle long enough to leave their task.
    pub idle: IdleConnections,
    /// Read once per sweep tick, for deadlines and the `Date` header.
    pub clock: Clock,
    /// The snapshot's client-side limits, set again on every reload.
    pub timeouts: Cell<ClientTimeouts>,
    pub buffers: Buffers,
    /// Open files of `static` routes.
    pub open_files: OpenFiles,
    /// Notified on every sweep tick, for the few waits that need time without a deadline.
    pub tick: Notify,
    /// This worker's counters, summed by the admin listener.
    pub metrics: Arc<WorkerCells>,
    /// The stop signal of each listener's accept task, by entrypoint slot (a worker has more
    /// than one socket for a slot when an upgrade handed over more than there are workers).
    pub listeners: RefCell<HashMap<usize, Vec<Rc<Notify>>>>,
    /// Access-log lines not written yet (`observe/accesslog.rs`), written at the latest on the next tick.
    pub log_lines: RefCell<Vec<u8>>,
}

impl Worker {
    pub fn new(setup: WorkerSetup) -> std::io::Result<Worker> {
        let WorkerSetup {
            id,
            config,
            shutdown,
            metrics,
        } = setup;
        let (timeouts, open_file_cache) = {
            let runtime = config.load();
            (runtime.timeouts, runtime.config.server.open_file_cache)
        };
        Ok(Worker {
            id,
            config,
            pool: Pool::default(),
            h2_pool: H2Pool::default(),
            shutdown,
            connections: RefCell::new(Vec::new()),
            idle: IdleConnections::new()?,
            clock: Clock::default(),
            timeouts: Cell::new(timeouts),
            buffers: Buffers::default(),
            open_files: OpenFiles::new(open_file_cache),
            tick: Notify::new(),
            metrics,
            listeners: RefCell::default(),
            log_lines: RefCell::default(),
        })
    }

    /// Writes the access-log lines gathered since the last tick.
    pub fn flush_log(&self) {
        if let Some(log) = &self.config.load().access_log {
            log.flush(&self.log_lines);
        }
    }

    /// Applies the worker-wide settings of the snapshot now in place.
    pub fn apply_settings(&self) {
        let runtime = self.config.load();
        self.timeouts.set(runtime.timeouts);
        self.open_files
            .configure(runtime.config.server.open_file_cache);
    }

    /// How long, when stopping, an idle connection waits for one more request, and then for
    /// its client to close after weir's side is shut down (`DRAIN_GRACE`).
    pub fn drain_grace(&self) -> Duration {
        let graceful = self.config.load().config.server.graceful_timeout;
        DRAIN_GRACE.min(graceful / 3)
    }

    /// Registers a new client connection's watch with the sweep.
    pub fn watch_connection(&self) -> Rc<ConnWatch> {
        let watch = Rc::new(ConnWatch::default());
        self.connections.borrow_mut().push(watch.clone());
        watch
    }

    /// Advances the clock, fires the deadlines that have passed (and idle waits when
    /// stopping), forgets connections that have ended, and closes parked ones that expired
    /// (a stop gives parked ones a task again: `process/server.rs`).
    pub fn sweep_connections(&self) {
        self.clock.tick();
        let now = self.clock.now();
        let stopping = self.shutdown.is_requested();
        self.connections.borrow_mut().retain(|watch| {
            watch.check(now, stopping);
            Rc::strong_count(watch) > 1
        });
        self.idle.expire(now);
        self.metrics.parked.set(self.idle.len() as u64);
    }
}

/// Buffers lent to connections while they read or answer a request, so an idle keep-alive
/// connection holds none (nginx's approach: memory follows active requests, not connections).
#[derive(Default)]
pub struct Buffers {
    reads: RefCell<Vec<BytesMut>>,
    outs: RefCell<Vec<Vec<u8>>>,
    /// Where file bytes are read before they are framed (borrowed, never across an await).
    scratch: RefCell<Vec<u8>>,
}

/// Buffers kept for reuse per worker, of each kind; more are freed.
const KEPT_BUFFERS: usize = 256;

impl Buffers {
    pub fn take_read(&self) -> BytesMut {
        self.reads
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(READ_CHUNK))
    }

    /// Takes back an empty read buffer (one still holding bytes stays with its connection).
    pub fn give_read(&self, mut buf: BytesMut) {
        let mut reads = self.reads.borrow_mut();
        if buf.is_empty() && buf.capacity() > 0 && reads.len() < KEPT_BUFFERS {
            buf.clear();
            reads.push(buf);
        }
    }

    /// The worker's scratch buffer, at least `len` bytes, zeroed once when it grows (so a
    /// read into it costs no `memset` per request).
    pub fn scratch(&self, len: usize) -> std::cell::RefMut<'_, Vec<u8>> {
        let mut scratch = self.scratch.borrow_mut();
        if scratch.len() < len {
            scratch.resize(len, 0);
        }
        scratch
    }

    pub fn take_out(&self) -> Vec<u8> {
        self.outs
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(READ_CHUNK))
    }

    pub fn give_out(&self, mut out: Vec<u8>) {
        let mut outs = self.outs.borrow_mut();
        // Outputs that grew for a large body are not kept.
        if out.capacity() > 0 && out.capacity() <= 4 * READ_CHUNK && outs.len() < KEPT_BUFFERS {
            out.clear();
            outs.push(out);
        }
    }
}
