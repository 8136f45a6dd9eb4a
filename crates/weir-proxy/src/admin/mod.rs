//! The admin listener (`server.admin`), served by the control thread, never by a worker:
//! `GET /metrics` answers the Prometheus text of [`Metrics`]; `GET /api/services` the HTTP
//! services' servers with their health and requests in flight (JSON); `GET /api/status` the
//! config version, the build (version, commit, target) and the last reload's result;
//! `POST /api/reload` reloads the file and answers how it went. With `token` set, everything
//! but `/metrics` needs `Authorization: Bearer TOKEN`. One request per connection. A reload may
//! move the listener to another address ([`AdminListener`]); a binary upgrade hands its socket
//! to the new process.

mod api;
pub mod build;
pub mod prometheus;

use crate::listen::listeners::Bound;
use crate::observe::metrics::Metrics;
use crate::state::runtime::Runtime;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;
use weir_config::Transport;

/// Largest request head the admin listener reads.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the last reloads did, for the admin API and `/metrics`.
#[derive(Debug, Default, Clone)]
pub struct ReloadStatus {
    pub succeeded: u64,
    pub failed: u64,
    pub last: Option<ReloadReport>,
    /// With `providers.etcd`: what its document in service is.
    pub etcd: Option<EtcdStatus>,
}

/// The etcd provider's state, for `/api/status`.
#[derive(Debug, Clone)]
pub struct EtcdStatus {
    /// The revision of the document in service (0: none read from etcd yet).
    pub revision: i64,
    /// Whether a document is merged in (else the file serves alone).
    pub serving: bool,
    /// Why the last document was refused, if it was (each error a line).
    pub last_error: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct ReloadReport {
    pub at: SystemTime,
    /// What asked for it: `SIGHUP`, `admin API`, `file change`.
    pub trigger: &'static str,
    /// Empty when the reload succeeded.
    pub errors: Vec<String>,
}

/// What the admin listener reads from.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub runtime: Arc<ArcSwap<Runtime>>,
    pub reloads: Arc<Mutex<ReloadStatus>>,
    /// Asks the control thread's loop for a reload.
    pub reload: UnboundedSender<ReloadRequest>,
    /// The binary that serves, shown by `/api/status`.
    pub build: build::BuildInfo,
    /// When the process started serving (the overview's uptime).
    pub started: std::time::Instant,
}

/// A reload asked for through the API, answered with the version now in service or the errors.
pub struct ReloadRequest {
    pub answer: oneshot::Sender<Result<u64, Vec<String>>>,
}

/// The admin listener as configured, moved by a reload that changes `server.admin`: the new
/// socket is bound before the snapshot is swapped (a failure refuses the reload), and
/// served from then on.
pub struct AdminListener {
    state: Arc<AdminState>,
    address: Option<SocketAddr>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// What `commit` will serve: `Some(None)` to stop serving.
    pending: Option<Option<(SocketAddr, std::net::TcpListener)>>,
    /// A duplicate of the socket in service, for the new process of a binary upgrade.
    serving: Option<Bound>,
    /// The socket the process this one upgrades served, until the first `prepare`.
    inherited: Option<Bound>,
}

impl AdminListener {
    pub fn new(state: Arc<AdminState>) -> AdminListener {
        AdminListener {
            state,
            address: None,
            task: None,
            pending: None,
            serving: None,
            inherited: None,
        }
    }

    /// Takes the admin socket a binary upgrade handed over: the first `prepare` serves it if
    /// the address is unchanged (the old process still holds that address, so a fresh bind
    /// would fail), else closes it.
    pub fn inherit(&mut self, inherited: Option<Bound>) {
        self.inherited = inherited;
    }

    /// Binds the listener `admin` asks for, unless it is the one in service. The last step of
    /// a reload that can fail.
    pub fn prepare(&mut self, admin: Option<&weir_config::Admin>) -> Result<(), String> {
        let wanted = admin.map(|a| a.address);
        let inherited = self.inherited.take();
        self.pending = None;
        if wanted == self.address {
            return Ok(());
        }
        self.pending = Some(match wanted {
            None => None,
            Some(address) => {
                let listener = match inherited {
                    Some(handed) if handed.configured == address => adopt(handed),
                    // A plain bind (no SO_REUSEPORT): a second weir must not share the port.
                    _ => std::net::TcpListener::bind(address),
                };
                let listener = listener
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .map_err(|e| format!("admin: cannot listen on {address}: {e}"))?;
                if let Ok(actual) = listener.local_addr() {
                    crate::log_info!("admin listening on {actual}");
                }
                Some((address, listener))
            }
        });
        Ok(())
    }

    /// Serves what `prepare` bound, closing the listener it replaces (on the control thread).
    pub fn commit(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.address = pending.as_ref().map(|(address, _)| *address);
        self.serving = None;
        if let Some((address, listener)) = pending {
            self.serving = duplicate(address, &listener);
            match TcpListener::from_std(listener) {
                Ok(listener) => self.task = Some(tokio::spawn(serve(listener, self.state.clone()))),
                Err(e) => crate::log_error!("admin: {e}"),
            }
        }
    }

    /// Another duplicate of the socket in service, for a binary upgrade to hand over.
    pub fn handoff(&self) -> Result<Option<Bound>, String> {
        let Some(serving) = &self.serving else {
            return Ok(None);
        };
        let sockets = serving
            .sockets
            .iter()
            .map(OwnedFd::try_clone)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot duplicate the admin listener's socket: {e}"))?;
        Ok(Some(Bound {
            sockets,
            ..*serving
        }))
    }
}

/// The listening socket a binary upgrade handed over.
fn adopt(handed: Bound) -> std::io::Result<std::net::TcpListener> {
    let socket = handed.sockets.into_iter().next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no socket was handed over")
    })?;
    Ok(std::net::TcpListener::from(socket))
}

/// A duplicate of the admin socket about to be served (`None` if the system refuses one:
/// then an upgrade's new process binds the address itself, as before handoffs).
fn duplicate(configured: SocketAddr, listener: &std::net::TcpListener) -> Option<Bound> {
    let actual = listener.local_addr().ok()?;
    let socket = listener.try_clone().ok()?;
    Some(Bound {
        configured,
        actual,
        transport: Transport::Tcp,
        sockets: vec![OwnedFd::from(socket)],
        http3: false,
    })
}

/// Accepts admin connections until the runtime stops.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>) {
    loop {
        match listener.accept().await {
            Ok((io, _)) => {
                let state = state.clone();
                tokio::spawn(async move { answer(io, &state).await });
            }
            Err(e) => {
                crate::log_error!("admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut io: TcpStream, state: &AdminState) {
    let mut head = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
            }
        }
        true
    };
    if !matches!(tokio::time::timeout(READ_TIMEOUT, read).await, Ok(true)) {
        return;
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let mut target = target.splitn(2, |&b| b == b'?');
    let path = target.next().unwrap_or_default();
    let query = String::from_utf8_lossy(target.next().unwrap_or_default()).into_owned();
    let runtime = state.runtime.load_full();
    let admin = runtime.config.server.admin.as_ref();
    let token = admin.and_then(|a| a.token.as_ref());
    let metrics_open = admin.is_none_or(|a| !a.token_for_metrics);
    let authorized = match token {
        None => true,
        Some(token) => head
            .split(|&b| b == b'\n')
            .skip(1)
            .filter_map(|l| std::str::from_utf8(l).ok())
            .filter_map(|l| l.split_once(':'))
            .any(|(name, value)| {
                name.trim().eq_ignore_ascii_case("authorization")
                    && value.trim().strip_prefix("Bearer ").map(str::trim) == Some(token.as_str())
            }),
    };
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics") if metrics_open || authorized => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            prometheus::render(&state.metrics, &runtime, &state.reload_counts()),
        ),
        // For load balancers' and orchestrators' health checks: no token asked.
        (b"GET", b"/ping") => ("200 OK", "text/plain; charset=utf-8", "OK\n".into()),
        // The page holds no data: it asks the API, with the token, from the browser.
        (b"GET", b"/" | b"/dashboard") => {
            ("200 OK", "text/html; charset=utf-8", DASHBOARD.to_string())
        }
        _ if !authorized => (
            "401 Unauthorized",
            "text/plain; charset=utf-8",
            "a bearer token is required\n".into(),
        ),
        (b"GET", _) if path.starts_with(b"/api/") && api::view(path, &runtime, 0).is_some() => {
            let uptime = state.started.elapsed().as_secs();
            let body = api::view(path, &runtime, uptime).unwrap_or_default();
            ("200 OK", "application/json", body)
        }
        (b"GET", b"/api/services") => ("200 OK", "application/json", services_json(&runtime)),
        (b"GET", b"/api/routers") => ("200 OK", "application/json", routers_json(&runtime)),
        (b"POST", b"/api/servers/drain" | b"/api/servers/undrain") => {
            let drain = path == b"/api/servers/drain";
            match find_server(&runtime, &query) {
                Some(server) => {
                    server.health.set_drained(drain);
                    let verb = if drain { "drained" } else { "undrained" };
                    crate::log_info!("admin API: server {} {verb}", server.url);
                    let body = serde_json::json!({ "server": server.url, "drained": drain });
                    ("200 OK", "application/json", format!("{body}\n"))
                }
                None => (
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "no such server: give ?service=NAME&server=URL as /api/services lists them\n"
                        .into(),
                ),
            }
        }
        (b"GET", b"/api/status") => ("200 OK", "application/json", status_json(state, &runtime)),
        (b"POST", b"/api/reload") => {
            let (answer, answered) = oneshot::channel();
            let outcome = match state.reload.send(ReloadRequest { answer }) {
                Ok(()) => answered
                    .await
                    .unwrap_or_else(|_| Err(vec!["stopping".into()])),
                Err(_) => Err(vec!["stopping".into()]),
            };
            let body = match &outcome {
                Ok(version) => serde_json::json!({ "ok": true, "version": version }),
                Err(errors) => serde_json::json!({ "ok": false, "errors": errors }),
            };
            let status = if outcome.is_ok() {
                "200 OK"
            } else {
                "422 Unprocessable Entity"
            };
            (status, "application/json", format!("{body}\n"))
        }
        (b"GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "the admin listener answers GET, and POST on /api/reload and /api/servers/(un)drain\n"
                .into(),
        ),
    };
    let challenge = if authorized {
        ""
    } else {
        "www-authenticate: Bearer\r\n"
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\n{challenge}content-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = io.write_all(answer.as_bytes()).await;
    let _ = io.shutdown().await;
}

/// The dashboard page (`admin/dashboard.html`): embedded, no external asset.
const DASHBOARD: &str = include_str!("dashboard.html");

impl AdminState {
    fn reload_counts(&self) -> prometheus::ReloadCounts {
        let status = self.reloads.lock().unwrap_or_else(|e| e.into_inner());
        prometheus::ReloadCounts {
            succeeded: status.succeeded,
            failed: status.failed,
            last_ok: status.last.as_ref().is_none_or(|r| r.errors.is_empty()),
        }
    }
}

/// The server `?service=NAME&server=URL` names.
fn find_server<'r>(
    runtime: &'r Runtime,
    query: &str,
) -> Option<&'r crate::servers::balancer::Server> {
    let param = |key: &str| {
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| percent_decode(v))
        })
    };
    let (service, server) = (param("service")?, param("server")?);
    runtime
        .services
        .iter()
        .find(|s| s.name == service)?
        .servers
        .iter()
        .find(|s| s.url == server)
}

/// `%XX` and `+` decoded, as browsers and curl encode query strings.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every HTTP router: its rule, action and middlewares, and its counters (answers by status
/// class, the latency histogram's buckets) for the dashboard to chart.
fn routers_json(runtime: &Runtime) -> String {
    let routers: Vec<serde_json::Value> = runtime
        .routes
        .iter()
        .map(|route| {
            let config = runtime.config.routers.iter().find(|r| r.name == route.name);
            let (responses, buckets) = route.cells.snapshot();
            serde_json::json!({
                "name": route.name,
                "rule": route.rule_text,
                "priority": route.priority,
                "entrypoints": config.map(|c| c.entrypoints.clone()).unwrap_or_default(),
                "middlewares": config.map(|c| c.middlewares.clone()).unwrap_or_default(),
                "action": route.action.describe(),
                "responses": responses,
                "latency_buckets": buckets,
            })
        })
        .collect();
    let body = serde_json::json!({
        "latency_bounds_seconds": crate::observe::metrics::latency_bounds_seconds(),
        "routers": routers,
    });
    format!("{body}\n")
}

/// The version in service and what the last reload did.
fn status_json(state: &AdminState, runtime: &Runtime) -> String {
    let reloads = state
        .reloads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let last = reloads.last.map(|last| {
        serde_json::json!({
            "at": last.at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "trigger": last.trigger,
            "ok": last.errors.is_empty(),
            "errors": last.errors,
        })
    });
    let etcd = reloads.etcd.map(|etcd| {
        serde_json::json!({
            "revision": etcd.revision,
            "serving_document": etcd.serving,
            "last_error": etcd.last_error,
        })
    });
    let body = serde_json::json!({
        "version": runtime.version,
        "build": state.build.json(),
        "reloads": { "succeeded": reloads.succeeded, "failed": reloads.failed },
        "last_reload": last,
        "etcd": etcd,
    });
    format!("{body}\n")
}

/// The HTTP services, their servers, health and requests in flight.
fn services_json(runtime: &Runtime) -> String {
    let services: Vec<serde_json::Value> = runtime
        .services
        .iter()
        .map(|service| {
            let servers: Vec<serde_json::Value> = service
                .servers
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "url": s.url,
                        "weight": s.weight,
                        "usable": s.health.usable(),
                        "down": s.health.is_down(),
                        "ejected": s.health.is_ejected(),
                        "drained": s.health.is_drained(),
                        "in_flight": s.inflight.0.load(Ordering::Relaxed),
                    })
                })
                .collect();
            serde_json::json!({
                "name": service.name,
                "health_check": service.health_check.is_some(),
                "passive_health": service.passive_health.is_some(),
                "retry_attempts": service.retry.as_ref().map_or(1, |r| r.attempts),
                "servers": servers,
            })
        })
        .collect();
    let mut body = serde_json::json!({ "services": services }).to_string();
    body.push('\n');
    body
}
