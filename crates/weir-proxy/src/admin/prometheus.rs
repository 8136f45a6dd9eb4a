//! The Prometheus text exposition of the metrics (`observe/metrics.rs` owns the cells): every counter
//! and gauge summed over the workers, for the entrypoints, routers, services and servers of the
//! configuration in service, with the reload counts and build info.

use crate::actions::cache::store::CacheStats;
use crate::actions::elasticsearch::spool::Spool;
use crate::observe::metrics::{
    Abuse, Cell, EntrypointCells, HandshakeFailure, L4Cells, Metrics, PerWorker, RouteCells,
    ServiceCells, TrafficCells, LATENCY_BOUNDS_US, METHOD_LABELS,
};
use crate::state::runtime::Runtime;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use weir_config::MetricLabels;

/// What `/metrics` says of reloads.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReloadCounts {
    pub succeeded: u64,
    pub failed: u64,
    /// Whether the last reload, if any, succeeded.
    pub last_ok: bool,
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
        labels: MetricLabels,
    ) {
        let label = what;
        let responses = format!("weir_{what}_responses_total");
        let by = match (labels.code, labels.method) {
            (false, false) => "status class",
            (true, false) => "status code",
            (false, true) => "status class and method",
            (true, true) => "status code and method",
        };
        self.family(
            &responses,
            "counter",
            &format!("Answers by {what}, by {by}."),
        );
        for (name, cells) in items {
            if labels.any() {
                let name = escape(name);
                for ((code, method), n) in labelled(cells, traffic, labels) {
                    let labels = match method {
                        Some(method) => {
                            format!("{label}=\"{name}\",code=\"{code}\",method=\"{method}\"")
                        }
                        None => format!("{label}=\"{name}\",code=\"{code}\""),
                    };
                    self.sample(&responses, &labels, n);
                }
                continue;
            }
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

/// The `server.metrics.labels` counts of `cells`, summed over the workers by the labels asked
/// for: the exact code or its class, and the method or none, in a stable order.
fn labelled<T>(
    cells: &PerWorker<T>,
    traffic: fn(&T) -> &TrafficCells,
    labels: MetricLabels,
) -> std::collections::BTreeMap<(String, Option<&'static str>), u64> {
    let mut sums = std::collections::BTreeMap::new();
    cells.each(|c| {
        for (status, method, n) in traffic(c).labelled.read() {
            let code = match labels.code {
                true => status.to_string(),
                false => format!("{}xx", (status / 100).clamp(1, 5)),
            };
            let method = labels.method.then(|| METHOD_LABELS[usize::from(method)]);
            *sums.entry((code, method)).or_insert(0) += n;
        }
    });
    sums
}

/// A label value as Prometheus wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition of every metric, summed over workers, for the configuration
/// `runtime` and the reloads `reloads` counted.
pub fn render(metrics: &Metrics, runtime: &Runtime, reloads: &ReloadCounts) -> String {
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
        "weir_abuse_total",
        "counter",
        "Clients pushed back: connections closed for rapid resets, QUIC Retries under a flood.",
    );
    for (name, cells) in &entrypoints {
        for why in Abuse::ALL {
            let n = cells.sum(|c| c.abuse[why as usize].get());
            let labels = format!("entrypoint=\"{name}\",kind=\"{}\"", why.label());
            out.sample("weir_abuse_total", &labels, n);
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
    out.traffic("router", &routes, |c| c, runtime.metric_labels);
    services(&mut out, runtime);
    out.family(
        "weir_connections_parked",
        "gauge",
        "Idle keep-alive connections waiting without a task.",
    );
    let parked: u64 = metrics.workers.iter().map(|w| w.parked.get()).sum();
    out.sample("weir_connections_parked", "", parked);
    out.family(
        "weir_upstream_idle_connections",
        "gauge",
        "Kept-alive upstream connections idle in the workers' pools.",
    );
    let pooled: u64 = metrics.workers.iter().map(|w| w.pooled.get()).sum();
    out.sample("weir_upstream_idle_connections", "", pooled);
    if runtime.config.server.tracing.is_some() {
        out.family(
            "weir_tracing_spans_dropped_total",
            "counter",
            "Finished spans dropped because the export queue was full (server.tracing.max_queue).",
        );
        let dropped = metrics
            .spans
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed);
        out.sample("weir_tracing_spans_dropped_total", "", dropped);
    }
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
    out.sample(
        "weir_config_last_reload_success",
        "",
        u8::from(reloads.last_ok),
    );
    out.family(
        "weir_log_lines_lost_total",
        "counter",
        "Error-log lines that could not be written (a closed pipe, a full disk).",
    );
    out.sample(
        "weir_log_lines_lost_total",
        "",
        crate::observe::errorlog::lost(),
    );
    if !runtime.shared_limits.is_empty() {
        out.family(
            "weir_rate_limit_store_failures_total",
            "counter",
            "Rate-limit decisions Redis did not answer in time (admitted under `fail_open`, else 503).",
        );
        for (name, redis) in &runtime.shared_limits {
            out.sample(
                "weir_rate_limit_store_failures_total",
                &format!("middleware=\"{}\"", escape(name)),
                redis.failures.load(Ordering::Relaxed),
            );
        }
    }
    caches(&mut out, runtime);
    layer4(&mut out, runtime);
    process_metrics(&mut out);
    certificate_expiry(&mut out, runtime);
    for gauge in crate::listen::acme::gauges() {
        out.family(gauge.name, "gauge", gauge.help);
        for (labels, value) in gauge.samples {
            out.sample(gauge.name, &labels, value);
        }
    }
    out.family("weir_build_info", "gauge", "The running binary's version.");
    out.sample(
        "weir_build_info",
        &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        1,
    );
    out.0
}

/// A cache metric family: its name, help and value.
type CacheFamily = (&'static str, &'static str, fn(&CacheStats) -> u64);

/// Each cache's lookups by result, stores, evictions and size.
fn caches(out: &mut Exposition, runtime: &Runtime) {
    if runtime.caches.is_empty() {
        return;
    }
    let stats: Vec<_> = runtime
        .caches
        .iter()
        .map(|c| (escape(&c.name), c.stats()))
        .collect();
    out.family(
        "weir_cache_requests_total",
        "counter",
        "GET and HEAD requests through a cache, by result: hit (answered from the store) or miss (sent to the origin, revalidations included).",
    );
    for (name, s) in &stats {
        for (result, n) in [("hit", s.hits), ("miss", s.misses)] {
            let labels = format!("cache=\"{name}\",result=\"{result}\"");
            out.sample("weir_cache_requests_total", &labels, n);
        }
    }
    let counters: [CacheFamily; 3] = [
        (
            "weir_cache_revalidations_total",
            "Misses the origin answered 304: the stored answer was served and refreshed.",
            |s| s.revalidated,
        ),
        (
            "weir_cache_stores_total",
            "Answers from the origin stored.",
            |s| s.stores,
        ),
        (
            "weir_cache_evictions_total",
            "Stored answers pushed out of memory to make room.",
            |s| s.evictions,
        ),
    ];
    for (family, help, value) in counters {
        out.family(family, "counter", help);
        for (name, s) in &stats {
            out.sample(family, &format!("cache=\"{name}\""), value(s));
        }
    }
    let gauges: [CacheFamily; 2] = [
        ("weir_cache_entries", "Keys held in memory.", |s| {
            s.entries as u64
        }),
        (
            "weir_cache_memory_bytes",
            "Memory the stored answers take.",
            |s| s.bytes,
        ),
    ];
    for (family, help, value) in gauges {
        out.family(family, "gauge", help);
        for (name, s) in &stats {
            out.sample(family, &format!("cache=\"{name}\""), value(s));
        }
    }
}

/// TCP services' connections and UDP services' sessions, with the bytes and datagrams they
/// carried.
fn layer4(out: &mut Exposition, runtime: &Runtime) {
    if !runtime.tcp_services.is_empty() {
        let services: Vec<(String, &PerWorker<L4Cells>)> = runtime
            .tcp_services
            .iter()
            .map(|s| (escape(&s.balancer.name), s.counts()))
            .collect();
        out.family(
            "weir_tcp_connections_total",
            "counter",
            "TCP connections a TCP router took, by service.",
        );
        for (name, cells) in &services {
            let n = cells.sum(|c| c.sessions.get());
            out.sample(
                "weir_tcp_connections_total",
                &format!("service=\"{name}\""),
                n,
            );
        }
        out.family(
            "weir_tcp_connections_open",
            "gauge",
            "TCP connections open through a service now.",
        );
        for (svc, (name, _)) in runtime.tcp_services.iter().zip(&services) {
            let labels = format!("service=\"{name}\"");
            out.sample("weir_tcp_connections_open", &labels, svc.open_connections());
        }
        out.family(
            "weir_tcp_connect_failures_total",
            "counter",
            "TCP connections that reached no server (none up, refused, timed out, at max_connections).",
        );
        for (name, cells) in &services {
            let n = cells.sum(|c| c.failures.get());
            out.sample(
                "weir_tcp_connect_failures_total",
                &format!("service=\"{name}\""),
                n,
            );
        }
        out.family(
            "weir_tcp_bytes_total",
            "counter",
            "Bytes relayed, by service and direction, counted when a connection ends.",
        );
        for (name, cells) in &services {
            directions(out, "weir_tcp_bytes_total", name, cells, |c| {
                (&c.bytes_from_client, &c.bytes_to_client)
            });
        }
    }
    if !runtime.udp_services.is_empty() {
        let services: Vec<(String, &PerWorker<L4Cells>)> = runtime
            .udp_services
            .iter()
            .map(|s| (escape(&s.balancer.name), s.counts()))
            .collect();
        out.family(
            "weir_udp_sessions_total",
            "counter",
            "UDP sessions begun (a client address's first datagram), by service.",
        );
        for (name, cells) in &services {
            let n = cells.sum(|c| c.sessions.get());
            out.sample("weir_udp_sessions_total", &format!("service=\"{name}\""), n);
        }
        out.family(
            "weir_udp_datagrams_total",
            "counter",
            "Datagrams relayed, by service and direction.",
        );
        for (name, cells) in &services {
            directions(out, "weir_udp_datagrams_total", name, cells, |c| {
                (&c.datagrams_from_client, &c.datagrams_to_client)
            });
        }
        out.family(
            "weir_udp_bytes_total",
            "counter",
            "Datagram payload bytes relayed, by service and direction.",
        );
        for (name, cells) in &services {
            directions(out, "weir_udp_bytes_total", name, cells, |c| {
                (&c.bytes_from_client, &c.bytes_to_client)
            });
        }
    }
}

/// One sample per direction of `family` for the service `name`.
fn directions(
    out: &mut Exposition,
    family: &str,
    name: &str,
    cells: &PerWorker<L4Cells>,
    pair: fn(&L4Cells) -> (&Cell, &Cell),
) {
    let from_client = cells.sum(|c| pair(c).0.get());
    let to_client = cells.sum(|c| pair(c).1.get());
    let labels = format!("service=\"{name}\",direction=\"from_client\"");
    out.sample(family, &labels, from_client);
    let labels = format!("service=\"{name}\",direction=\"to_client\"");
    out.sample(family, &labels, to_client);
}

/// The standard `process_*` metrics (as Prometheus's client libraries name them), read from
/// `/proc/self` when scraped: nothing is counted on the request path for them.
fn process_metrics(out: &mut Exposition) {
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis: state is the 3rd field of the line.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let cpu = field(14)
        .zip(field(15))
        .map(|(user, system)| (user + system) / ticks);
    let boot = std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok());
    let start = field(22)
        .zip(boot)
        .map(|(since_boot, boot)| boot + since_boot / ticks);
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map(|kb| kb * 1024.0);
    let open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).ok();
    let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    type Family<'a> = (&'a str, &'a str, &'a str, Option<f64>);
    let families: [Family<'_>; 5] = [
        (
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            cpu,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            rss,
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch, in seconds.",
            start,
        ),
        (
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            open_fds.map(|n| n as f64),
        ),
        (
            "process_max_fds",
            "gauge",
            "The most file descriptors the process may open.",
            max_fds.map(|n| n as f64),
        ),
    ];
    for (name, kind, help, value) in families {
        if let Some(value) = value {
            out.family(name, kind, help);
            out.sample(name, "", value);
        }
    }
}

/// When each entrypoint certificate expires, read from its file when scraped.
fn certificate_expiry(out: &mut Exposition, runtime: &Runtime) {
    let mut samples = Vec::new();
    for ep in &runtime.config.entrypoints {
        let Some(tls) = &ep.tls else { continue };
        for files in tls.certificates.iter().chain(&tls.default_certificate) {
            if let Ok(cert) = crate::listen::tls::describe_certificate(&files.cert) {
                let labels = format!(
                    "entrypoint=\"{}\",names=\"{}\"",
                    escape(&ep.name),
                    escape(&cert.names.join(","))
                );
                samples.push((labels, cert.not_after));
            }
        }
    }
    if samples.is_empty() {
        return;
    }
    out.family(
        "weir_certificate_not_after_seconds",
        "gauge",
        "When an entrypoint certificate expires, since the Unix epoch, in seconds.",
    );
    for (labels, not_after) in samples {
        out.sample("weir_certificate_not_after_seconds", &labels, not_after);
    }
}

/// The services' traffic, retries and connect errors, and their servers' health and load.
fn services(out: &mut Exposition, runtime: &Runtime) {
    let services: Vec<(&str, &PerWorker<ServiceCells>)> = runtime
        .services
        .iter()
        .map(|s| (s.name.as_str(), &*s.cells))
        .collect();
    out.traffic("service", &services, |c| &c.traffic, runtime.metric_labels);
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
    spools(out, runtime);
}

/// The Elasticsearch services' write spools: what waits, how old it is, what went through.
fn spools(out: &mut Exposition, runtime: &Runtime) {
    let spools: Vec<(String, &Spool)> = runtime
        .elasticsearch
        .iter()
        .filter_map(|es| {
            let spool = es.spool.as_deref()?;
            Some((format!("service=\"{}\"", escape(&es.service.name)), spool))
        })
        .collect();
    if spools.is_empty() {
        return;
    }
    type Read = fn(&Spool) -> f64;
    let families: [(&str, &str, &str, Read); 6] = [
        (
            "weir_es_spool_requests",
            "gauge",
            "Bulk requests waiting in the spool to be replayed.",
            |s| s.depth() as f64,
        ),
        (
            "weir_es_spool_bytes",
            "gauge",
            "Bytes waiting in the spool.",
            |s| s.bytes() as f64,
        ),
        (
            "weir_es_spool_lag_seconds",
            "gauge",
            "How long the oldest waiting request has waited.",
            |s| s.lag_secs(),
        ),
        (
            "weir_es_spool_appended_total",
            "counter",
            "Bulk requests written to the spool.",
            |s| s.appended.load(Ordering::Relaxed) as f64,
        ),
        (
            "weir_es_spool_replayed_total",
            "counter",
            "Spooled bulk requests replayed and committed.",
            |s| s.replayed.load(Ordering::Relaxed) as f64,
        ),
        (
            "weir_es_spool_dead_letter_items_total",
            "counter",
            "Spooled items the cluster refused for good, written to dead-letter.ndjson.",
            |s| s.dead_lettered.load(Ordering::Relaxed) as f64,
        ),
    ];
    for (metric, kind, help, read) in families {
        out.family(metric, kind, help);
        for (labels, spool) in &spools {
            out.sample(metric, labels, read(spool));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::metrics::HandshakeFailure;

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
        let text = render(&metrics, &runtime, &ReloadCounts::default());
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
