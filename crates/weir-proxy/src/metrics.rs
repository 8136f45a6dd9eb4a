//! Counters and gauges the workers keep and the admin listener serves as Prometheus text.
//! Each cell is written by one worker only (a relaxed load and store, no locked instruction on
//! the request path) and summed over the workers when scraped.

use crate::reload::ReloadStatus;
use crate::runtime::Runtime;
use std::fmt::Write;
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
    const ALL: [HandshakeFailure; 3] = [
        HandshakeFailure::PlainHttp,
        HandshakeFailure::Timeout,
        HandshakeFailure::Error,
    ];

    fn label(self) -> &'static str {
        match self {
            HandshakeFailure::PlainHttp => "plain_http",
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Error => "error",
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
    /// Answers by status class: 1xx to 5xx.
    pub responses: [Cell; 5],
}

impl EntrypointCells {
    pub fn handshake_failed(&self, why: HandshakeFailure) {
        self.handshake_failures[why as usize].add(1);
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
    fn sum(&self, value: impl Fn(&T) -> u64) -> u64 {
        self.0.iter().map(value).sum()
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

/// Upper bounds of the latency buckets, in microseconds: 1 ms to 10 s.
const LATENCY_BOUNDS_US: [u64; 13] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// A latency histogram written by one worker: a count per bucket (the last is `+Inf`) and
/// the sum.
#[derive(Default)]
pub struct Histogram {
    buckets: [Cell; LATENCY_BOUNDS_US.len() + 1],
    sum_us: Cell,
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
    /// `retry.budget`: retries owed, in thousandths (`upstream.rs::RetryBudget`).
    pub retry_debt: Cell,
}

/// One worker's cells that belong to no part of the configuration.
#[derive(Default)]
pub struct WorkerCells {
    /// Keep-alive connections parked without a task (`conn/idle.rs`), set every tick.
    pub parked: Cell,
    /// Idle pooled upstream connections, set every second.
    pub pooled: Cell,
}

/// Every worker's cells.
pub struct Metrics {
    pub workers: Vec<Arc<WorkerCells>>,
}

/// The Prometheus text being written.
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
    }

    /// Answers by status class and the latency histogram of routers or services.
    fn traffic<T>(
        &mut self,
        what: &str,
        items: &[(&str, &PerWorker<T>)],
        traffic: fn(&T) -> &TrafficCells,
    ) {
        let label = what;
        let responses = format!("weir_{what}_responses_total");
        self.family(
            &responses,
            "counter",
            &format!("Answers by {what}, by status class."),
        );
        for (name, cells) in items {
            let cells = |value: &dyn Fn(&TrafficCells) -> u64| cells.sum(|c| value(traffic(c)));
            for class in 0..5 {
                let n = cells(&|c| c.responses[class].get());
                let labels = format!("{label}=\"{}\",code=\"{}xx\"", escape(name), class + 1);
                self.sample(&responses, &labels, n);
            }
        }
        let duration = format!("weir_{what}_request_duration_seconds");
        self.family(
            &duration,
            "histogram",
            &format!("Time from request head to the answer's last byte, by {what}."),
        );
        for (name, cells) in items {
            let cells = |value: &dyn Fn(&TrafficCells) -> u64| cells.sum(|c| value(traffic(c)));
            let name = escape(name);
            let mut cumulative = 0;
            for (i, bound) in LATENCY_BOUNDS_US.iter().enumerate() {
                cumulative += cells(&|c| c.latency.buckets[i].get());
                let le = *bound as f64 / 1e6;
                self.sample(
                    &format!("{duration}_bucket"),
                    &format!("{label}=\"{name}\",le=\"{le}\""),
                    cumulative,
                );
            }
            cumulative += cells(&|c| c.latency.buckets[LATENCY_BOUNDS_US.len()].get());
            self.sample(
                &format!("{duration}_bucket"),
                &format!("{label}=\"{name}\",le=\"+Inf\""),
                cumulative,
            );
            let sum = cells(&|c| c.latency.sum_us.get()) as f64 / 1e6;
            self.sample(
                &format!("{duration}_sum"),
                &format!("{label}=\"{name}\""),
                sum,
            );
            self.sample(
                &format!("{duration}_count"),
                &format!("{label}=\"{name}\""),
                cumulative,
            );
        }
    }
}

/// A label value as Prometheus wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            workers: (0..workers).map(|_| Arc::default()).collect(),
        }
    }

    /// The Prometheus text exposition of every metric, summed over workers, for the
    /// configuration `runtime` and the reloads `reloads` counted.
    pub fn render(&self, runtime: &Runtime, reloads: &ReloadStatus) -> String {
        let mut out = Exposition(String::new());
        let entrypoints: Vec<(String, &PerWorker<EntrypointCells>)> = runtime
            .entrypoints
            .iter()
            .flatten()
            .map(|ep| (escape(&ep.name), &*ep.cells))
            .collect();
        out.family(
            "weir_connections_total",
            "counter",
            "Client connections accepted.",
        );
        for (name, cells) in &entrypoints {
            let n = cells.sum(|c| c.connections.get());
            out.sample(
                "weir_connections_total",
                &format!("entrypoint=\"{name}\""),
                n,
            );
        }
        out.family(
            "weir_tls_handshake_failures_total",
            "counter",
            "TLS connections that never reached HTTP.",
        );
        for (name, cells) in &entrypoints {
            for why in HandshakeFailure::ALL {
                let n = cells.sum(|c| c.handshake_failures[why as usize].get());
                let labels = format!("entrypoint=\"{name}\",reason=\"{}\"", why.label());
                out.sample("weir_tls_handshake_failures_total", &labels, n);
            }
        }
        out.family(
            "weir_responses_total",
            "counter",
            "Answers sent, by entrypoint and status class.",
        );
        for (name, cells) in &entrypoints {
            for class in 0..5 {
                let n = cells.sum(|c| c.responses[class].get());
                let labels = format!("entrypoint=\"{name}\",code=\"{}xx\"", class + 1);
                out.sample("weir_responses_total", &labels, n);
            }
        }
        let routes: Vec<(&str, &PerWorker<RouteCells>)> = runtime
            .routes
            .iter()
            .map(|r| (r.name.as_str(), &*r.cells))
            .collect();
        out.traffic("router", &routes, |c| c);
        services(&mut out, runtime);
        out.family(
            "weir_connections_parked",
            "gauge",
            "Idle keep-alive connections waiting without a task.",
        );
        let parked: u64 = self.workers.iter().map(|w| w.parked.get()).sum();
        out.sample("weir_connections_parked", "", parked);
        out.family(
            "weir_upstream_idle_connections",
            "gauge",
            "Kept-alive upstream connections idle in the workers' pools.",
        );
        let pooled: u64 = self.workers.iter().map(|w| w.pooled.get()).sum();
        out.sample("weir_upstream_idle_connections", "", pooled);
        out.family(
            "weir_config_version",
            "gauge",
            "The configuration in service: 1 at start, one more per reload.",
        );
        out.sample("weir_config_version", "", runtime.version);
        out.family("weir_reloads_total", "counter", "Reloads, by result.");
        out.sample(
            "weir_reloads_total",
            "result=\"success\"",
            reloads.succeeded,
        );
        out.sample("weir_reloads_total", "result=\"failure\"", reloads.failed);
        out.family(
            "weir_config_last_reload_success",
            "gauge",
            "1 when the last reload (if any) succeeded, else 0.",
        );
        let last_ok = reloads.last.as_ref().is_none_or(|r| r.errors.is_empty());
        out.sample("weir_config_last_reload_success", "", u8::from(last_ok));
        out.family("weir_build_info", "gauge", "The running binary's version.");
        out.sample(
            "weir_build_info",
            &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
            1,
        );
        out.0
    }
}

/// The services' traffic, retries and connect errors, and their servers' health and load.
fn services(out: &mut Exposition, runtime: &Runtime) {
    let services: Vec<(&str, &PerWorker<ServiceCells>)> = runtime
        .services
        .iter()
        .map(|s| (s.name.as_str(), &*s.cells))
        .collect();
    out.traffic("service", &services, |c| &c.traffic);
    for (metric, help, value) in [
        (
            "weir_upstream_retries_total",
            "Tries sent to another server after a failure.",
            (|c: &ServiceCells| c.retries.get()) as fn(&ServiceCells) -> u64,
        ),
        (
            "weir_upstream_connect_errors_total",
            "Tries that got no connection to the server.",
            |c: &ServiceCells| c.connect_errors.get(),
        ),
    ] {
        out.family(metric, "counter", help);
        for (name, cells) in &services {
            out.sample(
                metric,
                &format!("service=\"{}\"", escape(name)),
                cells.sum(value),
            );
        }
    }
    out.family(
        "weir_server_up",
        "gauge",
        "1 when the balancer may pick the server (not down by active checks, not ejected).",
    );
    let servers = || {
        runtime.services.iter().flat_map(|svc| {
            svc.servers.iter().map(move |server| {
                let labels = format!(
                    "service=\"{}\",server=\"{}\"",
                    escape(&svc.name),
                    escape(&server.url)
                );
                (labels, server)
            })
        })
    };
    for (labels, server) in servers() {
        out.sample("weir_server_up", &labels, u8::from(server.health.usable()));
    }
    out.family(
        "weir_server_in_flight",
        "gauge",
        "Requests in flight to the server.",
    );
    for (labels, server) in servers() {
        let n = server.inflight.0.load(Ordering::Relaxed);
        out.sample("weir_server_in_flight", &labels, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_sum_over_workers() {
        let yaml = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n  tls: { address: \"127.0.0.1:0\" }\nrouters:\n  r: { rule: \"PathPrefix(`/`)\", respond: { status: 204 } }\n";
        let config = weir_config::load_str(yaml, "test.yaml").expect("config");
        let runtime = Runtime::compile(&config, 2, None).expect("runtime");
        let cells = |name: &str| {
            &runtime
                .entrypoint(runtime.slot(name).expect("slot"))
                .expect("ep")
                .cells
        };
        let metrics = Metrics::new(2);
        cells("tls")[0].handshake_failed(HandshakeFailure::Timeout);
        cells("tls")[1].handshake_failed(HandshakeFailure::Timeout);
        cells("web")[1].responded(404);
        cells("web")[0].responded(200);
        cells("web")[0].responded(204);
        metrics.workers[1].parked.set(3);
        let text = metrics.render(&runtime, &ReloadStatus::default());
        for line in [
            "weir_tls_handshake_failures_total{entrypoint=\"tls\",reason=\"timeout\"} 2",
            "weir_tls_handshake_failures_total{entrypoint=\"tls\",reason=\"error\"} 0",
            "weir_responses_total{entrypoint=\"web\",code=\"2xx\"} 2",
            "weir_responses_total{entrypoint=\"web\",code=\"4xx\"} 1",
            "weir_connections_parked 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
    }
}
