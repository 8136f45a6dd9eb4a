//! In-process upstreams: a hyper server that answers what it received (with special paths), and a raw scripted one for what no well-behaved server sends.

use super::*;

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

/// What a [`FlakyUpstream`] does with the requests that come next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 `ok`.
    Healthy,
    /// This status, body `ok`.
    Status(u16),
    /// The listening socket is closed: connections are refused.
    Refusing,
    /// 200 `ok`, this late.
    Slow(Duration),
}

/// An upstream that starts failing and recovers as a test switches it: answers 200, or a
/// chosen status, or late; or closes its listening socket, so connections are refused, and
/// listens again on the same port. Every answer closes its connection, so no pooled
/// connection outlives a switch.
pub struct FlakyUpstream {
    pub addr: SocketAddr,
    behaviour: Arc<Mutex<Behaviour>>,
    listening: Arc<std::sync::atomic::AtomicBool>,
    answered: Arc<AtomicUsize>,
}

impl FlakyUpstream {
    pub fn start() -> FlakyUpstream {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        first.set_nonblocking(true).unwrap();
        let addr = first.local_addr().unwrap();
        let behaviour = Arc::new(Mutex::new(Behaviour::Healthy));
        let listening = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let answered = Arc::new(AtomicUsize::new(0));
        let (b, l, a) = (behaviour.clone(), listening.clone(), answered.clone());
        std::thread::spawn(move || {
            let mut listener = Some(first);
            loop {
                if *b.lock().unwrap() == Behaviour::Refusing {
                    listener = None;
                    l.store(false, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                if listener.is_none() {
                    match TcpListener::bind(addr) {
                        Ok(again) => {
                            again.set_nonblocking(true).unwrap();
                            listener = Some(again);
                            l.store(true, Ordering::SeqCst);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                    continue;
                }
                let Some(Ok((stream, _))) = listener.as_ref().map(|l| l.accept()) else {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                let (b, a) = (b.clone(), a.clone());
                std::thread::spawn(move || {
                    let mut conn = RawConn {
                        stream,
                        number: 0,
                        buf: Vec::new(),
                        log: Arc::new(Mutex::new(Vec::new())),
                    };
                    if conn.read_head().is_none() {
                        return;
                    }
                    let status = match *b.lock().unwrap() {
                        Behaviour::Refusing => return,
                        Behaviour::Healthy => 200,
                        Behaviour::Status(status) => status,
                        Behaviour::Slow(late) => {
                            std::thread::sleep(late);
                            200
                        }
                    };
                    // Counted before it is sent, so a client that has the answer sees the count.
                    a.fetch_add(1, Ordering::SeqCst);
                    conn.write(
                        format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                        )
                        .as_bytes(),
                    );
                });
            }
        });
        FlakyUpstream {
            addr,
            behaviour,
            listening,
            answered,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches to `behaviour`; returns once the socket is closed or listening again.
    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
        let listening = behaviour != Behaviour::Refusing;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.listening.load(Ordering::SeqCst) != listening {
            assert!(
                std::time::Instant::now() < deadline,
                "upstream did not switch"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// How many requests it has answered.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl RawUpstream {
    /// An upstream that answers each request on a kept-alive connection with what `answer`
    /// writes for its head and body (a body is read by its `Content-Length`; send no chunked
    /// one). Each connection is noted as `connection N` when accepted.
    pub fn answering(
        answer: impl Fn(&str, &[u8]) -> String + Send + Sync + 'static,
    ) -> RawUpstream {
        RawUpstream::start(move |conn| {
            conn.note(&format!("connection {}", conn.number));
            while let Some(head) = conn.read_head() {
                let length =
                    header_value(&head, "content-length").map_or(0, |n| n.parse().unwrap());
                let body = conn.read_body(length);
                conn.write(answer(&head, &body).as_bytes());
            }
        })
    }
}

/// An HTTP/1.1 answer with `headers` and `body`, framed by its length (none for 1xx, 204, 304).
pub fn http_answer(status: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!("HTTP/1.1 {status} Whatever\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !matches!(status, 100..=199 | 204 | 304) {
        out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    } else {
        out.push_str("\r\n");
    }
    out
}
