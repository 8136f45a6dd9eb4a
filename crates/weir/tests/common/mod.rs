//! Shared end-to-end harness: starts the real `weir` binary on port 0 with a config file,
//! runs in-process upstreams (hyper) and nginx, and speaks HTTP/1.1 over raw sockets.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn weir_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weir")
}

pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `weir check -c PATH`: its exit status and output.
pub fn weir_check(path: &std::path::Path) -> std::process::Output {
    Command::new(weir_bin())
        .args(["check", "-c"])
        .arg(path)
        .output()
        .unwrap()
}

/// A running weir process; killed on drop.
pub struct Weir {
    pub child: Child,
    pub addrs: HashMap<String, SocketAddr>,
    pub dir: std::path::PathBuf,
    stderr_lines: Arc<Mutex<Vec<String>>>,
}

impl Weir {
    /// Starts weir with `yaml` and waits until every entrypoint reports its address.
    pub fn start(yaml: &str) -> Weir {
        Weir::start_with(yaml, &[])
    }

    /// Starts weir with `yaml` and more `weir run` arguments.
    pub fn start_with(yaml: &str, args: &[&str]) -> Weir {
        Weir::start_under(&[], yaml, args)
    }

    /// Starts weir as the last argument of `wrapper` (a command that runs another, such as
    /// `prlimit`), with `yaml` and more `weir run` arguments.
    pub fn start_under(wrapper: &[&str], yaml: &str, args: &[&str]) -> Weir {
        let dir = temp_dir("weir");
        let path = dir.join("weir.yaml");
        std::fs::write(&path, yaml).unwrap();
        let mut command = match wrapper {
            [] => Command::new(weir_bin()),
            [program, rest @ ..] => {
                let mut command = Command::new(program);
                command.args(rest).arg(weir_bin());
                command
            }
        };
        let mut child = command
            .args(["run", "-c"])
            .arg(&path)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                sink.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || for _ in BufReader::new(stdout).lines() {});
        let mut addrs = HashMap::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| {
                    panic!("weir did not start; stderr: {:?}", lines.lock().unwrap())
                });
            if let Some(rest) = line.strip_prefix("weir: entrypoint ") {
                let (name, addr) = rest.split_once(" listening on ").unwrap();
                let addr = addr.strip_suffix("/udp").unwrap_or(addr);
                addrs.insert(name.to_string(), addr.parse().unwrap());
            }
            // The admin listener, under a name no entrypoint can have.
            if let Some(addr) = line.strip_prefix("weir: admin listening on ") {
                addrs.insert("@admin".to_string(), addr.parse().unwrap());
            }
            if line.contains("worker(s) running") {
                break;
            }
        }
        Weir {
            child,
            addrs,
            dir,
            stderr_lines: lines,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs["web"]
    }

    pub fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr_lines.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) until stderr holds `count` lines containing `text`; the last of them.
    pub fn wait_for_line(&self, text: &str, count: usize) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let lines = self.stderr();
            let found: Vec<&String> = lines.iter().filter(|l| l.contains(text)).collect();
            if found.len() >= count {
                return found[count - 1].clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no line #{count} with `{text}` in weir's stderr: {lines:#?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The config file weir was started with.
    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.join("weir.yaml")
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// A raw HTTP/1.1 client connection.
pub struct Conn {
    pub reader: BufReader<TcpStream>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn {
            reader: BufReader::new(s),
        }
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.reader.get_mut().write_all(raw).unwrap();
    }

    /// Reads one response; `head_request` means no body follows.
    pub fn read(&mut self, head_request: bool) -> Option<Resp> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).ok()?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (n, v) = h.split_once(':').unwrap();
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
        let mut resp = Resp {
            status,
            headers,
            body: Vec::new(),
        };
        if head_request || status == 204 || status == 304 || (100..200).contains(&status) {
            return Some(resp);
        }
        if let Some(len) = resp.header("content-length") {
            let mut body = vec![0; len.parse().unwrap()];
            self.reader.read_exact(&mut body).ok()?;
            resp.body = body;
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).ok()?;
                let size = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).ok()?;
                if size == 0 {
                    break;
                }
                resp.body.extend_from_slice(&chunk[..size]);
            }
        } else {
            self.reader.read_to_end(&mut resp.body).ok()?;
        }
        Some(resp)
    }

    /// True when the server has closed the connection (EOF within the timeout).
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.reader.read(&mut byte), Ok(0) | Err(_))
    }
}

/// One request on a fresh connection.
pub fn request(addr: SocketAddr, raw: &str) -> Resp {
    let mut c = Conn::open(addr);
    c.send(raw.as_bytes());
    c.read(raw.starts_with("HEAD ")).expect("no response")
}

pub fn get(addr: SocketAddr, host: &str, target: &str) -> Resp {
    request(
        addr,
        &format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
}

/// An in-process upstream. Answers JSON describing what it received, including which of its
/// connections carried the request. Special paths: `/slow/MS`, `/big/N`, `/chunked/N`, `/ws`.
pub struct Upstream {
    pub addr: SocketAddr,
    pub name: String,
    pub requests: Arc<AtomicUsize>,
    pub connections: Arc<AtomicUsize>,
    /// Raw bytes every connection received, for "never reached the upstream" checks.
    pub received: Arc<Mutex<Vec<u8>>>,
}

impl Upstream {
    pub fn start(name: &str) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (n, r, c, rx) = (
            name.to_string(),
            requests.clone(),
            connections.clone(),
            received.clone(),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((io, _)) = listener.accept().await else {
                        continue;
                    };
                    let conn_id = c.fetch_add(1, Ordering::SeqCst) + 1;
                    let (n, r) = (n.clone(), r.clone());
                    let io = Recording {
                        inner: io,
                        log: rx.clone(),
                    };
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            handle(req, n.clone(), r.clone(), conn_id)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
                            .with_upgrades()
                            .await;
                    });
                }
            });
        });
        Upstream {
            addr,
            name: name.to_string(),
            requests,
            connections,
            received,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn request_count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn received_text(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
}

/// A TCP stream that records every byte read from it.
struct Recording {
    inner: tokio::net::TcpStream,
    log: Arc<Mutex<Vec<u8>>>,
}

impl tokio::io::AsyncRead for Recording {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let new = buf.filled()[before..].to_vec();
        self.log.lock().unwrap().extend_from_slice(&new);
        res
    }
}

impl tokio::io::AsyncWrite for Recording {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed()
}

async fn handle(
    mut req: Request<Incoming>,
    name: String,
    requests: Arc<AtomicUsize>,
    conn: usize,
) -> Result<Response<Body>, hyper::Error> {
    requests.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_string();
    if path == "/ws" {
        let upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(upgraded) = upgrade.await {
                let mut io = hyper_util::rt::TokioIo::new(upgraded);
                let mut buf = [0u8; 1024];
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        });
        return Ok(Response::builder()
            .status(101)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .body(full(""))
            .unwrap());
    }
    // An upstream named `status-NNN` answers every request with NNN (and `Retry-After: 7`),
    // after reading its body.
    if let Some(status) = name.strip_prefix("status-") {
        let _ = req.into_body().collect().await?;
        return Ok(Response::builder()
            .status(status.parse::<u16>().unwrap_or(500))
            .header("retry-after", "7")
            .header("content-type", "application/json")
            .body(full(format!("{{\"error\":\"{name}\"}}")))
            .unwrap());
    }
    if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
    }
    if let Some(n) = path.strip_prefix("/big/") {
        let n: usize = n.parse().unwrap_or(0);
        let body: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
        return Ok(Response::new(full(body)));
    }
    if let Some(n) = path.strip_prefix("/chunked/") {
        let n: usize = n.parse().unwrap_or(0);
        let frames = (0..n)
            .map(|i| hyper::body::Frame::data(Bytes::from(format!("part{i};"))))
            .collect();
        return Ok(Response::new(BodyExt::boxed(Frames(frames))));
    }
    if path == "/trailers" {
        // hyper sends trailers only to a request that said `TE: trailers`.
        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        trailers.insert("grpc-message", "all-good".parse().unwrap());
        let frames = [
            hyper::body::Frame::data(Bytes::from("payload")),
            hyper::body::Frame::trailers(trailers),
        ];
        return Ok(Response::builder()
            .header("trailer", "grpc-status, grpc-message")
            .body(BodyExt::boxed(Frames(frames.into())))
            .unwrap());
    }
    let method = req.method().to_string();
    let target = req.uri().to_string();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let collected = req.into_body().collect().await?;
    let trailers: Vec<(String, String)> = collected
        .trailers()
        .map(|t| {
            t.iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect()
        })
        .unwrap_or_default();
    let body = collected.to_bytes();
    let json = serde_json::json!({
        "name": name,
        "conn": conn,
        "method": method,
        "target": target,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
        "trailers": trailers,
    });
    Ok(Response::builder()
        .header("content-type", "application/json")
        .header("x-upstream", name.as_str())
        .header("connection", "x-hop")
        .header("x-hop", "must be removed")
        .body(full(json.to_string()))
        .unwrap())
}

/// A body of several frames with no declared length, so hyper sends it chunked.
struct Frames(std::collections::VecDeque<hyper::body::Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// Header values sent to the upstream, from its JSON echo.
pub fn echoed_header(json: &serde_json::Value, name: &str) -> Option<String> {
    json["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|h| h[1].as_str().unwrap().to_string())
}

/// nginx from Debian as an upstream that reports its connection serial number.
pub struct Nginx {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Nginx {
    pub fn start() -> Nginx {
        Nginx::start_with("")
    }

    /// Starts nginx with extra `http`-level directives.
    pub fn start_with(http_extra: &str) -> Nginx {
        Nginx::start_server(http_extra, "", ANSWER_CONNECTION)
    }

    /// Starts nginx serving the files under `root` (its ETags and ranges; JSON, HTML and
    /// PNG typed).
    pub fn serve_dir(root: &std::path::Path) -> Nginx {
        let location = format!(
            "root {}; types {{ application/json json; text/html html; image/png png; }}",
            root.display()
        );
        Nginx::start_server("", "", &location)
    }

    /// Starts nginx speaking HTTPS with this certificate and key (PEM files); with
    /// `client_ca`, it requires a client certificate signed by that CA.
    pub fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        client_ca: Option<&std::path::Path>,
    ) -> Nginx {
        let verify = client_ca
            .map(|ca| {
                format!(
                    ";\n    ssl_verify_client on;\n    ssl_client_certificate {}",
                    ca.display()
                )
            })
            .unwrap_or_default();
        Nginx::start_server(
            "",
            &format!(
                " ssl;\n    ssl_certificate {};\n    ssl_certificate_key {}{verify}",
                cert.display(),
                key.display()
            ),
            ANSWER_CONNECTION,
        )
    }

    /// Starts nginx speaking HTTPS with this certificate and key, `location` the body of its
    /// `location /` block.
    pub fn start_tls_location(
        cert: &std::path::Path,
        key: &std::path::Path,
        location: &str,
    ) -> Nginx {
        let listen = format!(
            " ssl;\n    ssl_certificate {};\n    ssl_certificate_key {}",
            cert.display(),
            key.display()
        );
        Nginx::start_server("", &listen, location)
    }

    /// Starts nginx with `location` as the body of its `location /` block (nested locations
    /// allowed).
    pub fn with_location(location: &str) -> Nginx {
        Nginx::start_server("", "", location)
    }

    /// Starts nginx speaking HTTP/2 only: in clear with prior knowledge (`h2c`), or over TLS
    /// with this certificate and key. `location` is the `location /` block's body.
    pub fn start_h2(tls: Option<(&std::path::Path, &std::path::Path)>, location: &str) -> Nginx {
        let listen = match tls {
            None => " http2".to_string(),
            Some((cert, key)) => format!(
                " ssl http2;\n    ssl_certificate {};\n    ssl_certificate_key {}",
                cert.display(),
                key.display()
            ),
        };
        Nginx::start_server("", &listen, location)
    }

    fn start_server(http_extra: &str, listen_extra: &str, location: &str) -> Nginx {
        // free_port() releases the port before nginx binds it, so another process (a weir
        // binding port 0 in a parallel test) can take it first: then this nginx exits and the
        // port answers for someone else. Start again on a new port until nginx itself holds it.
        for _ in 0..5 {
            if let Some(nginx) = Nginx::try_start(http_extra, listen_extra, location) {
                return nginx;
            }
        }
        panic!("nginx did not start");
    }

    fn try_start(http_extra: &str, listen_extra: &str, location: &str) -> Option<Nginx> {
        let dir = temp_dir("nginx");
        let port = free_port();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n  keepalive_requests 100000;\n  {http_extra}\n\
               server {{\n    listen 127.0.0.1:{port}{listen_extra};\n    location / {{ {location} }}\n  }}\n}}\n",
            dir = dir.display()
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let mut child = Command::new(nginx_bin())
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx must be installed (scripts/test installs nginx-light)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        // nginx writes its pid file once its sockets are bound.
        let pid_file = dir.join("nginx.pid");
        let own_pid = child.id().to_string();
        for _ in 0..200 {
            if child.try_wait().ok().flatten().is_some() {
                return None;
            }
            let bound = std::fs::read_to_string(&pid_file).is_ok_and(|p| p.trim() == own_pid);
            if bound && TcpStream::connect(addr).is_ok() {
                return Some(Nginx { child, addr });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

/// What the test nginx answers by default: which of its connections served the request.
const ANSWER_CONNECTION: &str = "return 200 \"conn=$connection\\n\";";

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn nginx_bin() -> &'static str {
    if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A hand-scripted upstream over raw TCP, for what no well-behaved server sends: each accepted
/// connection runs `script` on its own thread. Every request line read is logged, and scripts
/// can add notes (e.g. when they see the connection close).
pub struct RawUpstream {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

/// One connection of a [`RawUpstream`].
pub struct RawConn {
    pub stream: TcpStream,
    /// 1 for the first connection accepted, 2 for the next, ...
    pub number: usize,
    buf: Vec<u8>,
    log: Arc<Mutex<Vec<String>>>,
}

impl RawConn {
    /// Reads one request head and logs its request line; `None` at EOF.
    pub fn read_head(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                let head = String::from_utf8_lossy(&head).into_owned();
                self.note(head.lines().next().unwrap_or(""));
                return Some(head);
            }
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads a body of `len` bytes (what `read_head` buffered first); short at EOF.
    pub fn read_body(&mut self, len: usize) -> Vec<u8> {
        while self.buf.len() < len {
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        let len = len.min(self.buf.len());
        self.buf.drain(..len).collect()
    }

    /// Reads until EOF and returns how many bytes came (after any already buffered).
    pub fn read_to_end(&mut self) -> usize {
        let mut rest = Vec::new();
        let _ = self.stream.read_to_end(&mut rest);
        std::mem::take(&mut self.buf).len() + rest.len()
    }

    pub fn write(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }

    pub fn note(&self, text: &str) {
        self.log.lock().unwrap().push(text.to_string());
    }
}

impl RawUpstream {
    pub fn start(script: impl Fn(&mut RawConn) + Send + Sync + 'static) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let conn_log = log.clone();
        std::thread::spawn(move || {
            for (i, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let (script, log) = (script.clone(), conn_log.clone());
                std::thread::spawn(move || {
                    let mut conn = RawConn {
                        stream,
                        number: i + 1,
                        buf: Vec::new(),
                        log,
                    };
                    script(&mut conn);
                });
            }
        });
        RawUpstream { addr, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Request lines read and notes made, in order.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// How many logged lines start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.log().iter().filter(|l| l.starts_with(prefix)).count()
    }
}

/// A config with one catch-all router proxying to `upstream`; `service_extra` is indented
/// under the service, `server_extra` is a flow mapping's inner keys for `server`.
pub fn proxy_config_with(upstream: &str, server_extra: &str, service_extra: &str) -> String {
    format!(
        "server: {{ workers: 1{server_extra} }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  local:\n    rule: \"PathPrefix(`/local`)\"\n    respond: {{ body: local }}\n  all:\n    rule: \"PathPrefix(`/`)\"\n    priority: 1\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{upstream}\" }}]\n{service_extra}"
    )
}

/// Runs a Python script with Debian's interpreter (the one whose packages scripts/test
/// installs: brotli, zstandard) and returns what it printed; a failing script fails the test.
pub fn python(script: &str, args: &[&str]) -> Vec<u8> {
    let interpreter = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    stdout_of(
        Command::new(interpreter).arg("-c").arg(script).args(args),
        "python3",
    )
}

/// What `command` wrote to its standard output; it must run and succeed (`what` names it
/// when it does not).
pub fn stdout_of(command: &mut Command, what: &str) -> Vec<u8> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} could not run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A header's value in a response head printed as text (curl's `-D`); names compared
/// without case.
pub fn header_value<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

pub struct CertFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// A self-signed ECDSA P-256 certificate for `names` (it is its own CA for the clients).
pub fn make_cert(dir: &std::path::Path, tag: &str, names: &[&str], expired: bool) -> CertFiles {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0]);
    if expired {
        params.not_before = time::OffsetDateTime::from_unix_timestamp(1_577_836_800).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(1_609_459_200).unwrap();
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let files = CertFiles {
        cert: dir.join(format!("{tag}.pem")),
        key: dir.join(format!("{tag}.key")),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

/// curl over HTTPS to `name` (resolved to 127.0.0.1), trusting only `ca`: (exit ok, body).
pub fn curl_https(port: u16, name: &str, ca: &std::path::Path) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{name}:{port}:127.0.0.1"))
        .arg(format!("https://{name}:{port}/"))
        .output()
        .expect("curl must be installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// curl with `args` (quiet but for errors, at most 20 s), which must succeed: what it wrote
/// to its standard output.
pub fn curl_ok(args: &[&str]) -> Vec<u8> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "20"]).args(args);
    stdout_of(&mut curl, &format!("curl {args:?}"))
}

/// A steady load of `GET path` from two keep-alive clients and two that open a connection per
/// request, counting answers until `finish`.
pub struct SteadyLoad {
    stop: Arc<std::sync::atomic::AtomicBool>,
    ok: Arc<AtomicUsize>,
    retried: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

/// What a steady load saw.
pub struct LoadReport {
    /// Answered 200.
    pub ok: usize,
    /// Requests sent again because the server closed a reused keep-alive connection before
    /// answering, as every HTTP client does for idempotent requests (RFC 9112, 9.3.1).
    pub retried: usize,
    /// Anything else: another status, no answer on a new connection.
    pub failures: Vec<String>,
}

impl SteadyLoad {
    pub fn start(addr: SocketAddr, path: &str) -> SteadyLoad {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let retried = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let mut clients = Vec::new();
        for keep_alive in [true, true, false, false] {
            let (stop, ok, retried, failures) =
                (stop.clone(), ok.clone(), retried.clone(), failures.clone());
            let close = if keep_alive {
                ""
            } else {
                "Connection: close\r\n"
            };
            let request = format!("GET {path} HTTP/1.1\r\nHost: load\r\n{close}\r\n");
            clients.push(std::thread::spawn(move || {
                let mut conn: Option<(Conn, bool)> = None;
                while !stop.load(Ordering::Relaxed) {
                    let (c, reused) = conn.get_or_insert_with(|| (Conn::open(addr), false));
                    let was_reused = std::mem::replace(reused, true);
                    let sent = c.reader.get_mut().write_all(request.as_bytes()).is_ok();
                    match if sent { c.read(false) } else { None } {
                        Some(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                            if !keep_alive || r.header("connection") == Some("close") {
                                conn = None;
                            }
                        }
                        Some(r) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("{} {}", r.status, r.text()))
                        }
                        None if was_reused => {
                            retried.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                        None => failures
                            .lock()
                            .unwrap()
                            .push("no answer on a new connection".into()),
                    }
                }
            }));
        }
        SteadyLoad {
            stop,
            ok,
            retried,
            failures,
            clients,
        }
    }

    /// Answered so far.
    pub fn ok(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn finish(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.join().unwrap();
        }
        LoadReport {
            ok: self.ok.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            failures: std::mem::take(&mut *self.failures.lock().unwrap()),
        }
    }
}

impl LoadReport {
    /// Fails the test when any request failed.
    pub fn assert_no_failure(&self) {
        assert!(
            self.failures.is_empty(),
            "{} failed: {:?}",
            self.failures.len(),
            &self.failures[..self.failures.len().min(10)]
        );
    }
}
