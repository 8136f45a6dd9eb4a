//! What the main thread hands a worker thread when it starts it, and what the control thread
//! tells it afterwards (`process/server.rs` runs the thread; the worker's own state is
//! `worker/`).

use crate::listen::listeners::Listener;
use crate::observe::metrics::WorkerCells;
use crate::state::runtime::Runtime;
use crate::worker::Shutdown;
use arc_swap::ArcSwap;
use std::sync::Arc;

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
    /// How many workers the process runs (`ngx.worker.count()`).
    pub workers: usize,
    pub config: Arc<ArcSwap<Runtime>>,
    pub shutdown: Arc<Shutdown>,
    pub metrics: Arc<WorkerCells>,
    /// Where the worker's finished spans go.
    pub spans: Arc<crate::observe::spans::SpanQueue>,
}
