//! Counters and gauges the workers keep (`admin/prometheus.rs` writes them out for `/metrics`).
//! Each cell is written by one worker only (a relaxed load and store, no locked instruction on
//! the request path) and summed over the workers when scraped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Why a TLS connection never reached HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The client spoke plain HTTP to the TLS port (answered 400).
    PlainHttp,
    /// No handshake (or no first byte) within `handshake_timeout`.
    Timeout,
    /// The handshake failed: no common version or cipher, a bad message, the client left.
    Error,
}

impl HandshakeFailure {
    pub(crate) const ALL: [HandshakeFailure; 3] = [
        HandshakeFailure::PlainHttp,
        HandshakeFailure::Timeout,
        HandshakeFailure::Error,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            HandshakeFailure::PlainHttp => "plain_http",
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Error => "error",
        }
    }
}

/// Why weir pushed back on a client that abused its connection.
#[derive(Clone, Copy)]
pub enum Abuse {
    /// An HTTP/2 or HTTP/3 connection closed for resetting streams faster than it let them
    /// be answered (CVE-2023-44487): ENHANCE_YOUR_CALM, H3_EXCESSIVE_LOAD.
    RapidReset,
    /// A QUIC client asked to come back with a Retry token: the worker had
    /// `http3.retry_above` handshakes in progress.
    QuicRetry,
}

impl Abuse {
    pub(crate) const ALL: [Abuse; 2] = [Abuse::RapidReset, Abuse::QuicRetry];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Abuse::RapidReset => "rapid_reset",
            Abuse::QuicRetry => "quic_retry",
        }
    }
}

/// A counter written by one worker.
#[derive(Default)]
pub struct Cell(AtomicU64);

impl Cell {
    pub fn add(&self, n: u64) {
        // One writer: a plain read-modify-write is enough, and readers see whole values.
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One entrypoint's cells in one worker, on cache lines of their own.
#[derive(Default)]
#[repr(align(64))]
pub struct EntrypointCells {
    pub connections: Cell,
    pub handshake_failures: [Cell; 3],
    /// Pushed-back abuse, by [`Abuse`].
    pub abuse: [Cell; 2],
    /// Answers by status class: 1xx to 5xx.
    pub responses: [Cell; 5],
}

impl EntrypointCells {
    pub fn handshake_failed(&self, why: HandshakeFailure) {
        self.handshake_failures[why as usize].add(1);
    }

    pub fn abused(&self, why: Abuse) {
        self.abuse[why as usize].add(1);
    }

    pub fn responded(&self, status: u16) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.responses[class].add(1);
    }
}

/// One set of cells per worker, indexed by worker id; each on cache lines of its own.
pub struct PerWorker<T>(Box<[T]>);

impl<T: Default> PerWorker<T> {
    pub fn new(workers: usize) -> PerWorker<T> {
        PerWorker((0..workers.max(1)).map(|_| T::default()).collect())
    }
}

impl<T> PerWorker<T> {
    /// The sum of `value` over the workers.
    pub(crate) fn sum(&self, value: impl Fn(&T) -> u64) -> u64 {
        self.0.iter().map(value).sum()
    }

    /// Runs `visit` on every worker's cells.
    pub(crate) fn each(&self, visit: impl FnMut(&T)) {
        self.0.iter().for_each(visit);
    }
}

impl PerWorker<TrafficCells> {
    /// Answers by status class and latency bucket counts, summed over the workers.
    pub fn snapshot(&self) -> (Vec<u64>, Vec<u64>) {
        let responses = (0..5).map(|class| self.sum(|c| c.responses[class].get()));
        let buckets =
            (0..=LATENCY_BOUNDS_US.len()).map(|i| self.sum(|c| c.latency.buckets[i].get()));
        (responses.collect(), buckets.collect())
    }
}

/// The latency buckets' upper bounds in seconds (the last bucket, beyond them, is `+Inf`).
pub fn latency_bounds_seconds() -> Vec<f64> {
    LATENCY_BOUNDS_US
        .iter()
        .map(|&us| us as f64 / 1e6)
        .collect()
}

impl<T> std::ops::Index<usize> for PerWorker<T> {
    type Output = T;

    fn index(&self, worker: usize) -> &T {
        &self.0[worker % self.0.len()]
    }
}

impl<T> std::fmt::Debug for PerWorker<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PerWorker({})", self.0.len())
    }
}

/// An entrypoint's cells, one set per worker. They belong to the entrypoint's runtime and are
/// carried over a reload by name, so counts survive it.
pub type EntrypointCounters = Arc<PerWorker<EntrypointCells>>;

/// Upper bounds of the latency buckets, in microseconds: 100 µs to 10 s (most proxied
/// requests take well under a millisecond, so the first buckets split that).
pub(crate) const LATENCY_BOUNDS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A latency histogram written by one worker: a count per bucket (the last is `+Inf`) and
/// the sum.
#[derive(Default)]
pub struct Histogram {
    pub(crate) buckets: [Cell; LATENCY_BOUNDS_US.len() + 1],
    pub(crate) sum_us: Cell,
}

impl Histogram {
    pub fn observe(&self, took: std::time::Duration) {
        let us = took.as_micros() as u64;
        let bucket = LATENCY_BOUNDS_US
            .iter()
            .position(|&bound| us <= bound)
            .unwrap_or(LATENCY_BOUNDS_US.len());
        self.buckets[bucket].add(1);
        self.sum_us.add(us);
    }
}

/// What every exchange counts, for a router and for a service.
#[derive(Default)]
#[repr(align(64))]
pub struct TrafficCells {
    /// Answers by status class: 1xx to 5xx.
    pub responses: [Cell; 5],
    /// From the request head read to the last byte of the answer written.
    pub latency: Histogram,
    /// With `server.metrics.labels`: answers by exact status and method.
    pub labelled: LabelledCounts,
}

/// The methods a label names; any other is `other` (a client cannot grow the series).
pub const METHOD_LABELS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other",
];

/// Answers by exact status and method, kept only under `server.metrics.labels`. A lock that
/// only its worker takes while counting (the scrape reads it now and then): a few dozen
/// (status, method) pairs at most, found by a short scan.
#[derive(Default)]
pub struct LabelledCounts(std::sync::Mutex<Vec<(u16, u8, u64)>>);

impl LabelledCounts {
    pub fn count(&self, status: u16, method: &str) {
        let method = METHOD_LABELS[..9]
            .iter()
            .position(|m| *m == method)
            .unwrap_or(9) as u8;
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match counts
            .iter_mut()
            .find(|(s, m, _)| *s == status && *m == method)
        {
            Some(entry) => entry.2 += 1,
            None => counts.push((status, method, 1)),
        }
    }

    /// Every (status, method index, count) counted.
    pub fn read(&self) -> Vec<(u16, u8, u64)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl TrafficCells {
    pub fn record(&self, status: u16, took: std::time::Duration) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.responses[class].add(1);
        self.latency.observe(took);
    }
}

pub type RouteCells = TrafficCells;

/// A service's cells in one worker.
#[derive(Default)]
pub struct ServiceCells {
    pub traffic: TrafficCells,
    /// Tries sent to another server after a failure.
    pub retries: Cell,
    /// Tries that got no connection (refused, unreachable, timed out, TLS failed).
    pub connect_errors: Cell,
    /// `retry.budget`: retries owed, in thousandths (`upstream/mod.rs::RetryBudget`).
    pub retry_debt: Cell,
}

/// A TCP or UDP service's cells in one worker.
#[derive(Default)]
#[repr(align(64))]
pub struct L4Cells {
    /// TCP connections proxied, or UDP sessions begun.
    pub sessions: Cell,
    /// TCP connections that reached no server (none up, refused, timed out, at the cap).
    pub failures: Cell,
    /// Bytes from clients and to them (TCP: counted when a connection ends).
    pub bytes_from_client: Cell,
    pub bytes_to_client: Cell,
    /// UDP datagrams from clients and to them.
    pub datagrams_from_client: Cell,
    pub datagrams_to_client: Cell,
}

/// One worker's cells that belong to no part of the configuration.
#[derive(Default)]
pub struct WorkerCells {
    /// Keep-alive connections parked without a task (`io/idle.rs`), set every tick.
    pub parked: Cell,
    /// Idle pooled upstream connections, set every second.
    pub pooled: Cell,
}

/// Every worker's cells.
pub struct Metrics {
    pub workers: Vec<Arc<WorkerCells>>,
    /// Finished spans on their way to the exporter, and the count of those dropped.
    pub spans: Arc<crate::observe::spans::SpanQueue>,
}

impl Metrics {
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            workers: (0..workers).map(|_| Arc::default()).collect(),
            spans: Arc::default(),
        }
    }
}
