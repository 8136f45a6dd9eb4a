//! Counters and gauges the workers keep and the admin listener serves as Prometheus text.
//! Each cell is written by one worker only (a relaxed load and store, no locked instruction on
//! the request path) and summed over the workers when scraped.

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

/// One entrypoint's cells in one worker.
#[derive(Default)]
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

/// One worker's cells.
pub struct WorkerCells {
    /// Indexed like the configuration's entrypoints.
    pub entrypoints: Vec<EntrypointCells>,
    /// Keep-alive connections parked without a task (`conn/idle.rs`), set every tick.
    pub parked: Cell,
}

/// Every worker's cells, and the entrypoint names for labels.
pub struct Metrics {
    entrypoints: Vec<String>,
    pub workers: Vec<Arc<WorkerCells>>,
}

impl Metrics {
    pub fn new(entrypoints: Vec<String>, workers: usize) -> Metrics {
        let cells = (0..workers)
            .map(|_| {
                Arc::new(WorkerCells {
                    entrypoints: entrypoints
                        .iter()
                        .map(|_| EntrypointCells::default())
                        .collect(),
                    parked: Cell::default(),
                })
            })
            .collect();
        Metrics {
            entrypoints,
            workers: cells,
        }
    }

    /// The Prometheus text exposition of every metric, summed over workers.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let sum = |cell: &dyn Fn(&WorkerCells) -> u64| -> u64 {
            self.workers.iter().map(|w| cell(w)).sum()
        };
        out.push_str("# HELP weir_connections_total Client connections accepted.\n");
        out.push_str("# TYPE weir_connections_total counter\n");
        for (i, name) in self.entrypoints.iter().enumerate() {
            let n = sum(&|w| w.entrypoints[i].connections.get());
            let _ = writeln!(out, "weir_connections_total{{entrypoint=\"{name}\"}} {n}");
        }
        out.push_str(
            "# HELP weir_tls_handshake_failures_total TLS connections that never reached HTTP.\n",
        );
        out.push_str("# TYPE weir_tls_handshake_failures_total counter\n");
        for (i, name) in self.entrypoints.iter().enumerate() {
            for why in HandshakeFailure::ALL {
                let n = sum(&|w| w.entrypoints[i].handshake_failures[why as usize].get());
                let _ = writeln!(
                    out,
                    "weir_tls_handshake_failures_total{{entrypoint=\"{name}\",reason=\"{}\"}} {n}",
                    why.label()
                );
            }
        }
        out.push_str("# HELP weir_responses_total Answers sent, by status class.\n");
        out.push_str("# TYPE weir_responses_total counter\n");
        for (i, name) in self.entrypoints.iter().enumerate() {
            for class in 0..5 {
                let n = sum(&|w| w.entrypoints[i].responses[class].get());
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
        let _ = writeln!(out, "weir_connections_parked {}", sum(&|w| w.parked.get()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_sum_over_workers() {
        let metrics = Metrics::new(vec!["web".into(), "tls".into()], 2);
        metrics.workers[0].entrypoints[1].handshake_failed(HandshakeFailure::Timeout);
        metrics.workers[1].entrypoints[1].handshake_failed(HandshakeFailure::Timeout);
        metrics.workers[1].entrypoints[0].responded(404);
        metrics.workers[0].entrypoints[0].responded(200);
        metrics.workers[0].entrypoints[0].responded(204);
        metrics.workers[1].parked.set(3);
        let text = metrics.render();
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
