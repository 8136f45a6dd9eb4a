//! What one worker thread owns and lends to every phase of a request: upstream pools, the clock
//! and the connections' watches (swept every tick), parked idle connections, lent buffers, open
//! files, client-side limits, counters and the stop signal. It holds no configuration: the
//! snapshot a connection serves from is `state/runtime.rs`'s, handed to the drivers beside the
//! worker (`process/server.rs`), so every layer below them can take a `Worker` without seeing
//! the snapshot's types.

use crate::io::buffers::Buffers;
use crate::io::idle::IdleConnections;
use crate::io::open_files::OpenFiles;
use crate::io::watch::{Clock, ConnWatch};
use crate::observe::metrics::WorkerCells;
use crate::servers::h2_pool::H2Pool;
use crate::servers::pool::Pool;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use weir_config::OpenFileCache;

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

/// Counts a connection as active (a graceful stop waits for it) until dropped.
pub struct Active(Rc<Cell<usize>>);

impl Active {
    pub fn enter(count: &Rc<Cell<usize>>) -> Active {
        count.set(count.get() + 1);
        Active(count.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// The client-side limits from `server`, each enforced through the connection's watch.
#[derive(Debug, Clone, Copy)]
pub struct ClientTimeouts {
    /// `client_idle_timeout`: waiting for (or dribbling) a request head.
    pub idle: Duration,
    /// `client_body_timeout`: between reads of a request body.
    pub body: Duration,
    /// `client_send_timeout`: a write to a client that does not read.
    pub send: Duration,
}

/// The worker-wide settings of a configuration snapshot, applied at start and on every reload.
#[derive(Debug, Clone, Copy)]
pub struct WorkerSettings {
    pub timeouts: ClientTimeouts,
    pub open_file_cache: OpenFileCache,
    pub graceful_timeout: Duration,
}

/// What one worker thread owns.
pub struct Worker {
    pub id: usize,
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
    /// How long, when stopping, an idle connection waits for one more request, and then for
    /// its client to close after weir's side is shut down: [`DRAIN_GRACE`], at most a third
    /// of `graceful_timeout` (set again on every reload).
    pub drain_grace: Cell<Duration>,
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
    /// Finished spans of sampled requests, handed to the exporter's queue in groups.
    pub spans: crate::observe::spans::WorkerSpans,
}

impl Worker {
    pub fn new(
        id: usize,
        shutdown: Arc<Shutdown>,
        metrics: Arc<WorkerCells>,
        settings: WorkerSettings,
    ) -> std::io::Result<Worker> {
        Ok(Worker {
            id,
            pool: Pool::default(),
            h2_pool: H2Pool::default(),
            shutdown,
            connections: RefCell::new(Vec::new()),
            idle: IdleConnections::new()?,
            clock: Clock::default(),
            timeouts: Cell::new(settings.timeouts),
            drain_grace: Cell::new(drain_grace(settings.graceful_timeout)),
            buffers: Buffers::default(),
            open_files: OpenFiles::new(settings.open_file_cache),
            tick: Notify::new(),
            metrics,
            listeners: RefCell::default(),
            log_lines: RefCell::default(),
            spans: Default::default(),
        })
    }

    /// Applies the worker-wide settings of the snapshot now in place.
    pub fn apply_settings(&self, settings: WorkerSettings) {
        self.timeouts.set(settings.timeouts);
        self.drain_grace.set(drain_grace(settings.graceful_timeout));
        self.open_files.configure(settings.open_file_cache);
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

fn drain_grace(graceful_timeout: Duration) -> Duration {
    DRAIN_GRACE.min(graceful_timeout / 3)
}
