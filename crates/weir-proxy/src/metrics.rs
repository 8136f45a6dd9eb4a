//! Counters and gauges the workers keep and the admin listener serves as Prometheus text.
//! Each cell is written by one worker only (a relaxed load and store, no locked instruction on
//! the request path) and summed over the workers when scraped.

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

    fn get(&self) -> u64 {
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

/// An entrypoint's cells, one set per worker (indexed by worker id). They belong to the
/// entrypoint's runtime and are carried over a reload by name, so counts survive it.
pub type EntrypointCounters = Arc<[EntrypointCells]>;

pub fn entrypoint_counters(workers: usize) -> EntrypointCounters {
    (0..workers.max(1))
        .map(|_| EntrypointCells::default())
        .collect()
}

/// One worker's cells that belong to no part of the configuration.
#[derive(Default)]
pub struct WorkerCells {
    /// Keep-alive connections parked without a task (`conn/idle.rs`), set every tick.
    pub parked: Cell,
}

/// Every worker's cells.
pub struct Metrics {
    pub workers: Vec<Arc<WorkerCells>>,
}

impl Metrics {
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            workers: (0..workers).map(|_| Arc::default()).collect(),
        }
    }

    /// The Prometheus text exposition of every metric, summed over workers, for the
    /// entrypoints of `runtime`.
    pub fn render(&self, runtime: &Runtime) -> String {
        let mut out = String::new();
        let entrypoints: Vec<(&str, &[EntrypointCells])> = runtime
            .entrypoints
            .iter()
            .flatten()
            .map(|ep| (ep.name.as_str(), &ep.cells[..]))
            .collect();
        let sum = |cells: &[EntrypointCells], cell: &dyn Fn(&EntrypointCells) -> u64| -> u64 {
            cells.iter().map(cell).sum()
        };
        out.push_str("# HELP weir_connections_total Client connections accepted.\n");
        out.push_str("# TYPE weir_connections_total counter\n");
        for (name, cells) in &entrypoints {
            let n = sum(cells, &|c| c.connections.get());
            let _ = writeln!(out, "weir_connections_total{{entrypoint=\"{name}\"}} {n}");
        }
        out.push_str(
            "# HELP weir_tls_handshake_failures_total TLS connections that never reached HTTP.\n",
        );
        out.push_str("# TYPE weir_tls_handshake_failures_total counter\n");
        for (name, cells) in &entrypoints {
            for why in HandshakeFailure::ALL {
                let n = sum(cells, &|c| c.handshake_failures[why as usize].get());
                let _ = writeln!(
                    out,
                    "weir_tls_handshake_failures_total{{entrypoint=\"{name}\",reason=\"{}\"}} {n}",
                    why.label()
                );
            }
        }
        out.push_str("# HELP weir_responses_total Answers sent, by status class.\n");
        out.push_str("# TYPE weir_responses_total counter\n");
        for (name, cells) in &entrypoints {
            for class in 0..5 {
                let n = sum(cells, &|c| c.responses[class].get());
                let _ = writeln!(
                    out,
                    "weir_responses_total{{entrypoint=\"{name}\",code=\"{}xx\"}} {n}",
                    class + 1
                );
            }
        }
        out.push_str(
            "# HELP weir_connections_parked Idle keep-alive connections waiting without a task.\n",
        );
        out.push_str("# TYPE weir_connections_parked gauge\n");
        let parked: u64 = self.workers.iter().map(|w| w.parked.get()).sum();
        let _ = writeln!(out, "weir_connections_parked {parked}");
        out
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
        let text = metrics.render(&runtime);
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
