//! The in-process harness for the data plane (tests only): a configuration compiled from a
//! YAML string, one worker, client connections over in-memory duplex streams served by the
//! real HTTP/1 driver (`conn::h1::serve`), scripted upstreams on loopback ports
//! ([`upstream`], and [`h2_upstream`] for HTTP/2), and the worker's clock moved by the test ([`Harness::advance`]), so a 60 s
//! timeout is tested in microseconds. How to write a test: docs/testing.md.

mod h2_upstream;
mod upstream;
mod wire;

mod deadlines;
mod errors;
mod filters;
mod framing;
mod pool;
mod request_body;
mod retries;

pub(crate) use h2_upstream::H2Upstream;
pub(crate) use upstream::{ok, refused_url, Seen, Step, Upstream, OK};

use crate::conn::{self, ClientIo};
use crate::http::codec::{self, ResponseHead};
use crate::http::Scheme;
use crate::io::watch::Waiting;
use crate::servers::balancer::Service;
use crate::state::runtime::Runtime;
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use arc_swap::ArcSwap;
use bytes::BytesMut;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;

/// The client's address as the worker sees it (TEST-NET-1).
pub(crate) const PEER: &str = "192.0.2.7:40000";

/// A GET of `/` over HTTP/1.1.
pub(crate) const GET: &str = "GET / HTTP/1.1\r\nhost: t.test\r\n\r\n";

/// How many bytes a client's duplex stream holds each way before a writer waits.
const CLIENT_BUFFER: usize = 256 * 1024;

/// How long, in real time, a test may run before it fails as hung.
const HUNG_AFTER: Duration = Duration::from_secs(10);

/// How long, in real time, a client waits to conclude that nothing is coming.
const QUIET: Duration = Duration::from_millis(50);

/// A duplex stream serves as a client connection: it never parks and has no socket for
/// `sendfile`.
impl ClientIo for DuplexStream {
    const PARKS: bool = false;

    fn park(
        self,
        _: &crate::io::idle::IdleConnections,
        _: std::net::SocketAddr,
        _: usize,
        _: std::time::Instant,
    ) {
    }

    fn into_parked_h2(self) -> Option<crate::io::idle::H2Io> {
        None
    }

    fn as_tcp(&self) -> Option<&TcpStream> {
        None
    }
}

/// Runs a harness test: a current-thread runtime (I/O, and a timer only for the test's own
/// guards: weir's waits run on the worker's clock) and a `LocalSet` for the worker's tasks.
/// Fails the test if it has not finished after `HUNG_AFTER` of real time.
pub(crate) fn run<F: Future>(test: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a test runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        tokio::time::timeout(HUNG_AFTER, test)
            .await
            .expect("the test hung")
    })
}

/// Lets the worker's tasks (and the reactor) run until they wait again.
pub(crate) async fn settle() {
    for _ in 0..32 {
        tokio::task::yield_now().await;
    }
}

/// Waits (in real time, within the test's guard) until `done` holds.
pub(crate) async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        settle().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

/// Seconds, for the durations tests move the clock by.
pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A worker serving a compiled configuration, and the connections tests open to it.
pub(crate) struct Harness {
    pub(crate) worker: Rc<Worker>,
    /// The snapshot the worker serves from.
    config: SharedRuntime,
    /// The slot of the configuration's first entrypoint, which clients connect to.
    entrypoint: usize,
}

impl Harness {
    /// Compiles `yaml` (a whole configuration; its first entrypoint takes the connections) for
    /// one worker. Panics with the configuration's errors.
    pub(crate) fn new(yaml: &str) -> Harness {
        let config = weir_config::load_str(yaml, "t.yaml").unwrap_or_else(|errors| {
            let errors: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            panic!("invalid test configuration:\n{}", errors.join("\n"))
        });
        let first = config
            .entrypoints
            .first()
            .expect("an entrypoint")
            .name
            .clone();
        let runtime = Runtime::compile(&config, 1, None).expect("the configuration compiles");
        let entrypoint = runtime.slot(&first).expect("the entrypoint's slot");
        let settings = runtime.worker_settings();
        let config = Arc::new(ArcSwap::from_pointee(runtime));
        let worker = Worker::new(0, Arc::default(), Arc::default(), settings);
        let worker = Rc::new(worker.expect("a worker"));
        Harness {
            worker,
            config,
            entrypoint,
        }
    }

    /// A new plain client connection, served by the HTTP/1 driver in a task of its own.
    pub(crate) fn connect(&self) -> Client {
        self.connect_as(Scheme::Http)
    }

    /// A new client connection that came over `scheme` (`Https`: as if TLS had been
    /// terminated before the driver).
    pub(crate) fn connect_as(&self, scheme: Scheme) -> Client {
        let (io, served) = tokio::io::duplex(CLIENT_BUFFER);
        self.serve(served, scheme);
        Client::new(io)
    }

    /// A client connection whose stream holds only `buffer` bytes each way, for a client that
    /// does not read.
    pub(crate) fn connect_small(&self, buffer: usize) -> Client {
        let (io, served) = tokio::io::duplex(buffer);
        self.serve(served, Scheme::Http);
        Client::new(io)
    }

    /// What `process/server.rs` does for an accepted plain connection: a watch registered
    /// with the sweep, and the driver in a task.
    fn serve(&self, io: DuplexStream, scheme: Scheme) {
        let worker = self.worker.clone();
        let peer: SocketAddr = PEER.parse().expect("an address");
        let watch = worker.watch_connection();
        let entrypoint = self.entrypoint;
        let config = self.config.clone();
        let serving = conn::h1::serve(worker, config, entrypoint, io, peer, scheme, watch);
        tokio::task::spawn_local(serving);
    }

    /// Moves the worker's clock `by` ahead and runs its sweep, as the worker's tick does:
    /// every deadline that has passed fires. A deadline fires once its limit and one tick
    /// have passed since it was armed (`ConnWatch::check`).
    pub(crate) async fn advance(&self, by: Duration) {
        settle().await;
        self.worker.clock.skip(by);
        self.worker.sweep_connections();
        self.worker.tick.notify_waiters();
        settle().await;
    }

    /// Waits until some connection waits for `what` under its deadline, so that moving the
    /// clock then fires that wait's deadline and no other.
    pub(crate) async fn waiting_for(&self, what: Waiting) {
        let armed = || {
            let connections = self.worker.connections.borrow();
            connections.iter().any(|w| w.waiting() == Some(what))
        };
        eventually(&format!("a connection waiting for {what:?}"), armed).await;
    }

    /// Waits until some connection waits for `what`, then moves the clock `by` ahead.
    pub(crate) async fn wait_out(&self, what: Waiting, by: Duration) {
        self.waiting_for(what).await;
        self.advance(by).await;
    }

    /// Asks the worker to stop, as a SIGTERM does, and sweeps (which ends idle waits).
    pub(crate) async fn stop(&self) {
        self.worker.shutdown.request();
        self.advance(Duration::ZERO).await;
    }

    /// The compiled service called `name`, for its counters.
    pub(crate) fn service(&self, name: &str) -> Arc<Service> {
        let runtime = self.config.load();
        let service = runtime.services.iter().find(|s| s.name == name);
        service.expect("a service of that name").clone()
    }
}

/// The client end of a connection: raw bytes out, responses parsed by weir's codec in.
pub(crate) struct Client {
    io: DuplexStream,
    buf: BytesMut,
}

impl Client {
    fn new(io: DuplexStream) -> Client {
        Client {
            io,
            buf: BytesMut::new(),
        }
    }

    pub(crate) async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.io
            .write_all(bytes.as_ref())
            .await
            .expect("the connection takes the bytes");
    }

    /// Sends `raw` and reads the response (a response to HEAD when `raw` is a HEAD request).
    pub(crate) async fn request(&mut self, raw: &str) -> Response {
        self.send(raw).await;
        self.response_to(raw.starts_with("HEAD ")).await
    }

    /// `GET path` over HTTP/1.1, and its response.
    pub(crate) async fn get(&mut self, path: &str) -> Response {
        self.request(&GET.replacen('/', path, 1)).await
    }

    /// Reads the next response (to a request other than HEAD), interim ones included.
    pub(crate) async fn response(&mut self) -> Response {
        self.response_to(false).await
    }

    async fn response_to(&mut self, head_request: bool) -> Response {
        loop {
            match codec::parse_response(&mut self.buf, head_request) {
                Ok(Some(head)) => {
                    let body = wire::read_body(&mut self.io, &mut self.buf, head.framing).await;
                    return Response { head, body };
                }
                Ok(None) => {}
                Err(e) => panic!("malformed response: {}", e.message()),
            }
            if wire::fill(&mut self.io, &mut self.buf).await == 0 {
                let got = String::from_utf8_lossy(&self.buf);
                panic!("the connection closed before a whole response head: {got:?}");
            }
        }
    }

    /// Whether the connection is closed: its end reached, once every byte before it is
    /// read (those are returned in `Err`, as text, if any came).
    pub(crate) async fn closed(&mut self) -> Result<(), String> {
        while wire::fill(&mut self.io, &mut self.buf).await > 0 {}
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&self.buf.split()).into_owned())
        }
    }

    /// Whether the connection stays open and silent for a moment of real time.
    pub(crate) async fn is_quiet(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        settle().await;
        let filled = tokio::time::timeout(QUIET, wire::fill(&mut self.io, &mut self.buf));
        filled.await.is_err()
    }

    /// Reads whatever arrives until the connection closes, as text.
    pub(crate) async fn rest(&mut self) -> String {
        while wire::fill(&mut self.io, &mut self.buf).await > 0 {}
        String::from_utf8_lossy(&self.buf.split()).into_owned()
    }
}

/// A response as the client received it.
pub(crate) struct Response {
    pub(crate) head: ResponseHead,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn status(&self) -> u16 {
        self.head.status
    }

    /// The first value of a header, as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let value = self.head.head.get(name)?;
        Some(std::str::from_utf8(value).expect("a UTF-8 header value"))
    }

    pub(crate) fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("a UTF-8 body")
    }

    /// Whether the response says the connection closes after it.
    pub(crate) fn closes(&self) -> bool {
        self.header("connection") == Some("close")
    }
}

/// Sends a GET to one upstream that never answers, through a service whose `service` line
/// limits the wait for a response head to `limit` seconds: no answer half a second before
/// the limit, then, once the limit and a tick have passed, a 504 that keeps the connection.
pub(crate) async fn a_silent_upstream_gets_504(service: &str, limit: f64) {
    let up = Upstream::start([Step::Stall(Vec::new())]).await;
    let h = proxy(&[up.url()]).service(service).harness();
    let mut c = h.connect();
    c.send(GET).await;
    h.wait_out(Waiting::ResponseHead, secs(limit - 0.5)).await;
    assert!(c.is_quiet().await, "answered before the limit");
    h.advance(secs(0.7)).await;
    let r = c.response().await;
    assert_eq!(
        (r.status(), r.text()),
        (504, "upstream response timed out\n")
    );
    assert!(!r.closes());
}

/// Sends a POST whose client waits for `100 Continue`, then its body `hello` once the interim
/// answer came: the final answer must be 200.
pub(crate) async fn post_after_100_continue(c: &mut Client) {
    c.send("POST / HTTP/1.1\r\nhost: t.test\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n")
        .await;
    assert_eq!(c.response().await.status(), 100);
    c.send("hello").await;
    assert_eq!(c.response().await.status(), 200);
}

/// A configuration of one entrypoint and one router that takes every request, built up with
/// the settings a test needs: [`proxy`] to the service `app`, or [`respond`].
pub(crate) struct Setup {
    /// The router's action, as a line under it.
    action: String,
    servers: Vec<String>,
    service: Vec<String>,
    server: Vec<String>,
    middlewares: Vec<(String, String)>,
}

/// A router sending every request to the service `app` of these server URLs.
pub(crate) fn proxy(servers: &[String]) -> Setup {
    Setup {
        action: "service: app".to_string(),
        servers: servers.to_vec(),
        service: Vec::new(),
        server: Vec::new(),
        middlewares: Vec::new(),
    }
}

/// The `respond` action of most tests that need one: 200 with the body `hello`.
pub(crate) const HELLO: &str = "{ body: hello }";

/// A router answering every request with `respond` (a flow map: `{ status: 200, body: hi }`).
pub(crate) fn respond(respond: &str) -> Setup {
    Setup {
        action: format!("respond: {respond}"),
        ..proxy(&[])
    }
}

impl Setup {
    /// A line under `services.app` (`retry: { attempts: 3 }`).
    pub(crate) fn service(mut self, line: &str) -> Setup {
        self.service.push(line.to_string());
        self
    }

    /// A line under `server` (`client_idle_timeout: 5s`).
    pub(crate) fn server(mut self, line: &str) -> Setup {
        self.server.push(line.to_string());
        self
    }

    /// A middleware of the router, applied in the order added (`{ add_prefix: /v2 }`).
    pub(crate) fn middleware(mut self, name: &str, definition: &str) -> Setup {
        self.middlewares
            .push((name.to_string(), definition.to_string()));
        self
    }

    pub(crate) fn yaml(&self) -> String {
        let mut yaml = String::from("server:\n  workers: 1\n");
        for line in &self.server {
            yaml += &format!("  {line}\n");
        }
        yaml += "entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n";
        let names: Vec<&str> = self.middlewares.iter().map(|(n, _)| n.as_str()).collect();
        yaml += "routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n";
        yaml += &format!("    {}\n", self.action);
        yaml += &format!("    middlewares: [{}]\n", names.join(", "));
        if !self.servers.is_empty() {
            yaml += "services:\n  app:\n    servers:\n";
            for url in &self.servers {
                yaml += &format!("      - url: \"{url}\"\n");
            }
            for line in &self.service {
                yaml += &format!("    {line}\n");
            }
        }
        if !self.middlewares.is_empty() {
            yaml += "middlewares:\n";
            for (name, definition) in &self.middlewares {
                yaml += &format!("  {name}: {definition}\n");
            }
        }
        yaml
    }

    pub(crate) fn harness(&self) -> Harness {
        Harness::new(&self.yaml())
    }
}
