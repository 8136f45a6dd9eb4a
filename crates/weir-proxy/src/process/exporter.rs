//! The span exporter: a thread of its own that empties the workers' span queue and sends the
//! spans to the collector in batches over OTLP, `http/protobuf` (`POST {endpoint}/v1/traces`)
//! or `grpc` (`TraceService/Export` over HTTP/2 without TLS). Every export has a timeout; a
//! failed one is tried again after a backoff (while spans beyond `max_queue` are dropped by
//! the workers), with one log line when the collector goes and one when it comes back. The
//! settings are read from the configuration in place before each round, so a reload applies.

use crate::observe::otlp::{self, ResourceInfo};
use crate::observe::spans::{SpanBytes, SpanQueue};
use crate::state::runtime::SharedRuntime;
use crate::worker::Shutdown;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_config::{Otlp, OtlpCompression, OtlpProtocol, Tracing};

/// The first wait after a failed export; each failure doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often the queue is looked at while tracing is not configured (a reload may turn it on).
const IDLE_TICK: Duration = Duration::from_secs(1);
/// The gRPC method spans are exported to.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Sets the queue's limits from the configuration in place.
pub fn configure(queue: &SpanQueue, tracing: Option<&Tracing>) {
    let (max, batch) = tracing.map_or((0, usize::MAX), |t| (t.max_queue, t.batch));
    queue.max.store(max, Ordering::Relaxed);
    queue.batch.store(batch, Ordering::Relaxed);
}

/// Starts the exporter thread; it ends once `stop` is requested and its last spans are sent
/// (or their export failed).
pub fn start(
    queue: Arc<SpanQueue>,
    runtime: SharedRuntime,
    stop: Arc<Shutdown>,
) -> Result<std::thread::JoinHandle<()>, String> {
    configure(&queue, runtime.load().config.server.tracing.as_ref());
    std::thread::Builder::new()
        .name("weir-tracing".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    crate::log_error!("tracing: cannot start the exporter: {e}");
                    return;
                }
            };
            rt.block_on(Exporter::default().run(&queue, &runtime, &stop));
        })
        .map_err(|e| format!("cannot start the span exporter: {e}"))
}

#[derive(Default)]
struct Exporter {
    http: Option<TcpStream>,
    grpc: Option<h2::client::SendRequest<bytes::Bytes>>,
    /// Groups of spans taken from the queue and not yet sent.
    pending: Vec<SpanBytes>,
    /// Set while the collector fails: the wait before the next try.
    backoff: Option<Duration>,
    /// Set once a refusal is logged, until a batch is taken again: a collector that refuses
    /// every batch gets one line, not one a batch.
    refusing: bool,
}

impl Exporter {
    /// Exports until `stop` is requested, then sends what is left once and returns.
    async fn run(mut self, queue: &SpanQueue, runtime: &SharedRuntime, stop: &Shutdown) {
        loop {
            let snapshot = runtime.load_full();
            let tracing = snapshot.config.server.tracing.as_ref();
            configure(queue, tracing);
            let wait = match (self.backoff, tracing) {
                (Some(backoff), _) => backoff,
                (None, Some(t)) => t.flush_interval,
                (None, None) => IDLE_TICK,
            };
            let stopped = stop.notify.notified();
            tokio::pin!(stopped);
            stopped.as_mut().enable();
            let stopping = stop.is_requested();
            if !stopping {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = queue.ready.notified(), if self.backoff.is_none() => {}
                    _ = stopped => {}
                }
            }
            let snapshot = runtime.load_full();
            match snapshot.config.server.tracing.as_ref() {
                Some(tracing) => {
                    if self.pending_spans() < tracing.batch {
                        queue.take_into(&mut self.pending);
                    }
                    self.send_pending(tracing).await;
                }
                None => {
                    // Tracing was turned off by a reload: what is left goes nowhere.
                    self.pending.clear();
                    drop(queue.take());
                }
            }
            if stopping {
                return;
            }
        }
    }

    /// Sends pending spans batch by batch until they are all out or an export fails.
    async fn send_pending(&mut self, tracing: &Tracing) {
        let resource = ResourceInfo {
            service_name: &tracing.service_name,
            attributes: &tracing.resource_attributes,
        };
        while !self.pending.is_empty() {
            // Whole groups, up to `batch` spans (at least one group).
            let mut groups = 0;
            let mut n = 0;
            for group in &self.pending {
                if groups > 0 && n + group.spans > tracing.batch {
                    break;
                }
                groups += 1;
                n += group.spans;
            }
            let body = otlp::encode(&resource, &self.pending[..groups]);
            let sent = tokio::time::timeout(tracing.otlp.timeout, self.export(&tracing.otlp, body));
            let failure = match sent.await {
                Ok(Ok(())) => {
                    self.refusing = false;
                    None
                }
                Ok(Err(Failure::Refused(why))) => {
                    // The collector will never take this batch (a 4xx other than 429).
                    if !std::mem::replace(&mut self.refusing, true) {
                        crate::log_warn!(
                            "tracing: collector {} refused {n} span(s): {why}; such batches are dropped",
                            tracing.otlp.endpoint
                        );
                    }
                    None
                }
                Ok(Err(Failure::Retry(why))) => Some(why),
                Err(_) => Some(format!("no answer within {:?}", tracing.otlp.timeout)),
            };
            if let Some(why) = failure {
                // A connection in an unknown state is not used again.
                self.http = None;
                self.grpc = None;
                if self.backoff.is_none() {
                    crate::log_warn!(
                        "tracing: collector {} unreachable ({why}); retrying with backoff, spans beyond max_queue are dropped",
                        tracing.otlp.endpoint
                    );
                }
                let next = self
                    .backoff
                    .map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
                self.backoff = Some(next);
                return;
            }
            if self.backoff.take().is_some() {
                crate::log_info!("tracing: collector {} answers again", tracing.otlp.endpoint);
            }
            self.pending.drain(..groups);
        }
    }

    fn pending_spans(&self) -> usize {
        self.pending.iter().map(|g| g.spans).sum()
    }

    async fn export(&mut self, otlp: &Otlp, body: Vec<u8>) -> Result<(), Failure> {
        let body = match otlp.compression {
            OtlpCompression::None => body,
            OtlpCompression::Gzip => gzip(&body).map_err(|e| Failure::Retry(e.to_string()))?,
        };
        match otlp.protocol {
            OtlpProtocol::HttpProtobuf => self.post(otlp, body).await,
            OtlpProtocol::Grpc => self.grpc_export(otlp, body).await,
        }
    }

    /// `POST {endpoint}/v1/traces` on a kept-alive connection.
    async fn post(&mut self, otlp: &Otlp, body: Vec<u8>) -> Result<(), Failure> {
        let retry = |e: std::io::Error| Failure::Retry(e.to_string());
        let mut head = format!(
            "POST /v1/traces HTTP/1.1\r\nhost: {}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n",
            otlp.authority,
            body.len()
        );
        if otlp.compression == OtlpCompression::Gzip {
            head.push_str("content-encoding: gzip\r\n");
        }
        for (name, value) in &otlp.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut conn = match self.http.take() {
            Some(conn) => conn,
            None => TcpStream::connect(&otlp.authority).await.map_err(retry)?,
        };
        // Head and body written apart: the body (a batch's spans) is not copied behind it.
        conn.write_all(head.as_bytes()).await.map_err(retry)?;
        conn.write_all(&body).await.map_err(retry)?;
        let (status, keep) = read_response(&mut conn).await.map_err(retry)?;
        if keep {
            self.http = Some(conn);
        }
        match status {
            200..=299 => Ok(()),
            // OTLP/HTTP: these are worth another try; any other failure is final.
            429 | 502 | 503 | 504 => Err(Failure::Retry(format!("status {status}"))),
            _ => Err(Failure::Refused(format!("status {status}"))),
        }
    }

    /// `TraceService/Export` on an HTTP/2 connection kept open.
    async fn grpc_export(&mut self, otlp: &Otlp, body: Vec<u8>) -> Result<(), Failure> {
        let retry = |e: h2::Error| Failure::Retry(e.to_string());
        let send = match self.grpc.take() {
            Some(send) => send,
            None => {
                let io = TcpStream::connect(&otlp.authority)
                    .await
                    .map_err(|e| Failure::Retry(e.to_string()))?;
                let _ = io.set_nodelay(true);
                let (send, connection) = h2::client::handshake(io).await.map_err(retry)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                send
            }
        };
        let mut send = send.ready().await.map_err(retry)?;
        let uri = format!("http://{}{GRPC_EXPORT}", otlp.authority);
        let mut request = http::Request::post(uri)
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if otlp.compression == OtlpCompression::Gzip {
            request = request.header("grpc-encoding", "gzip");
        }
        for (name, value) in &otlp.headers {
            request = request.header(name.to_ascii_lowercase(), value);
        }
        let request = request
            .body(())
            .map_err(|e| Failure::Refused(e.to_string()))?;
        // A gRPC message: compressed flag, length, the message (sent as it is, not copied
        // behind its prefix).
        let mut prefix = Vec::with_capacity(5);
        prefix.push(u8::from(otlp.compression == OtlpCompression::Gzip));
        prefix.extend_from_slice(&(body.len() as u32).to_be_bytes());
        let (response, mut stream) = send.send_request(request, false).map_err(retry)?;
        stream
            .send_data(bytes::Bytes::from(prefix), false)
            .map_err(retry)?;
        stream
            .send_data(bytes::Bytes::from(body), true)
            .map_err(retry)?;
        let response = response.await.map_err(retry)?;
        self.grpc = Some(send);
        let status = response.status();
        let mut grpc_status = grpc_status(response.headers());
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data.map_err(retry)?;
            let _ = body.flow_control().release_capacity(data.len());
        }
        if let Some(trailers) = body.trailers().await.map_err(retry)? {
            grpc_status = grpc_status.or(self::grpc_status(&trailers));
        }
        match (status.as_u16(), grpc_status) {
            (200, Some(0)) => Ok(()),
            // UNAVAILABLE, RESOURCE_EXHAUSTED and the like are worth another try (OTLP/gRPC).
            (200, Some(code @ (1 | 4 | 8 | 10 | 11 | 14 | 15))) => {
                Err(Failure::Retry(format!("grpc-status {code}")))
            }
            (200, Some(code)) => Err(Failure::Refused(format!("grpc-status {code}"))),
            (status, _) => Err(Failure::Retry(format!("status {status}"))),
        }
    }
}

enum Failure {
    /// Worth another try later.
    Retry(String),
    /// The batch is dropped.
    Refused(String),
}

fn grpc_status(headers: &http::HeaderMap) -> Option<u32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(body)?;
    encoder.finish()
}

/// Reads an HTTP/1.1 response to the end of its body: its status, and whether the
/// connection may carry the next request.
async fn read_response(conn: &mut TcpStream) -> std::io::Result<(u16, bool)> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Err(invalid("the collector closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(head_len)) = response.parse(&buf) else {
            if buf.len() > 64 * 1024 {
                return Err(invalid("response head too large"));
            }
            continue;
        };
        let status = response.code.unwrap_or(0);
        let header = |name: &str| {
            response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
        };
        let close = header("connection").is_some_and(|c| c.contains("close"));
        let Some(length) = header("content-length").and_then(|l| l.trim().parse::<usize>().ok())
        else {
            // No length (chunked or until close): the body is not read, the connection not kept.
            return Ok((status, false));
        };
        let mut have = buf.len() - head_len;
        while have < length {
            let n = conn.read(&mut chunk).await?;
            if n == 0 {
                return Err(invalid("the collector closed the connection"));
            }
            have += n;
        }
        return Ok((status, !close && have == length));
    }
}
