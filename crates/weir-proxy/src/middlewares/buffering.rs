//! `buffering` (Traefik's, vulcand/oxy's buffer): the request body read whole before anything
//! goes upstream (413 over `max_request_body_bytes`, by its declared length before reading
//! it), sent with its length, and again on a retry `retry_expression` asks for; the answer's
//! body read whole before the client gets its head (500 over `max_response_body_bytes`).
//! Bodies are held in memory up to `mem_*_body_bytes`, past that in a temporary file. The
//! exchange runs it at the filter's place in the route (`exchange::run_buffered`): only routes
//! with the middleware pay for it.

use crate::http::codec::{Framing, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::file_body::{FileBody, FileHandle};
use crate::io::watch::{ConnWatch, Waiting};
use crate::reply::client::ClientSide;
use crate::reply::relay::{relay_body, BodyError, Relay, Sink};
use crate::reply::request_body::{BodySource, Outgoing, Spilled};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::UpstreamUse;
use crate::worker::Worker;
use bytes::Bytes;
use std::io::Write;
use std::net::IpAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use weir_config::{Buffering, RetryExpression, RetryValue};

/// oxy's bound on the retries an expression may ask for (`DefaultMaxRetryAttempts`: a try
/// numbered above it is never retried).
const MAX_RETRIES: u32 = 10;

/// A body held whole: in memory, or in a temporary file (gone once closed).
pub(crate) enum HeldBody {
    Memory(Bytes),
    File(Rc<std::fs::File>, u64),
}

impl HeldBody {
    fn len(&self) -> u64 {
        match self {
            HeldBody::Memory(bytes) => bytes.len() as u64,
            HeldBody::File(_, len) => *len,
        }
    }
}

/// A body being held: in memory up to `mem` bytes, then all of it in a temporary file; more
/// than `max` bytes is refused (`over`). Written synchronously: a sink that never waits.
struct Holding {
    mem: u64,
    max: u64,
    memory: Vec<u8>,
    file: Option<std::fs::File>,
    len: u64,
    over: bool,
}

impl Holding {
    /// `max` 0 is no limit.
    fn new(mem: u64, max: u64) -> Holding {
        Holding {
            mem,
            max: if max == 0 { u64::MAX } else { max },
            memory: Vec::new(),
            file: None,
            len: 0,
            over: false,
        }
    }

    fn push(&mut self, data: &[u8]) -> std::io::Result<()> {
        let len = self.len + data.len() as u64;
        if len > self.max {
            self.over = true;
            return Err(std::io::ErrorKind::FileTooLarge.into());
        }
        match &mut self.file {
            None if len <= self.mem => self.memory.extend_from_slice(data),
            None => {
                let mut file = temporary_file()?;
                file.write_all(&self.memory)?;
                file.write_all(data)?;
                self.memory = Vec::new();
                self.file = Some(file);
            }
            Some(file) => file.write_all(data)?,
        }
        self.len = len;
        Ok(())
    }

    fn finish(self) -> HeldBody {
        match self.file {
            Some(file) => HeldBody::File(Rc::new(file), self.len),
            None => HeldBody::Memory(Bytes::from(self.memory)),
        }
    }
}

impl tokio::io::AsyncWrite for Holding {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.get_mut().push(data).map(|()| data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A file in the system's temporary folder that has no name (`O_TMPFILE`), or whose name is
/// removed at once where the file system cannot make one without: it goes when closed.
fn temporary_file() -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let dir = std::env::temp_dir();
    let flags = OFlags::RDWR | OFlags::CLOEXEC;
    let mode = Mode::RUSR | Mode::WUSR;
    if let Ok(fd) = rustix::fs::open(&dir, flags | OFlags::TMPFILE, mode) {
        return Ok(fd.into());
    }
    let path = dir.join(format!(
        "weir-buffer-{}-{:016x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let fd = rustix::fs::open(&path, flags | OFlags::CREATE | OFlags::EXCL, mode)?;
    std::fs::remove_file(&path)?;
    Ok(fd.into())
}

/// The waits of holding a body: reads under `read`, writes (into memory or a file) never
/// wait.
fn holding_relay<'a>(
    worker: &'a Worker,
    watch: &'a ConnWatch,
    read: (Waiting, Duration),
) -> Relay<'a> {
    Relay {
        clock: &worker.clock,
        watch,
        read,
        write: (Waiting::UpstreamWrite, Duration::ZERO),
        max_bytes: u64::MAX,
    }
}

/// Reads the request body whole (`None`: it has none); the head then declares its length.
/// Over the limit: 413, by a declared length before anything is read (no `100 Continue` is
/// sent, and the connection closes after the answer).
pub(crate) async fn read_request<C: ClientSide>(
    config: &Buffering,
    worker: &Worker,
    client: &mut C,
    head: &mut RequestHead,
) -> Result<Option<HeldBody>, LocalError> {
    if head.framing == Framing::None {
        return Ok(None);
    }
    let max = config.max_request_body_bytes;
    if matches!(head.framing, Framing::Length(n) if max > 0 && n > max) {
        client.abandon_body();
        return Err(too_large());
    }
    let mut holding = Holding::new(config.mem_request_body_bytes, max);
    let Outgoing {
        watch, out, body, ..
    } = client.outgoing(head);
    let relay = holding_relay(
        worker,
        watch,
        (Waiting::RequestBody, worker.timeouts.get().body),
    );
    out.clear();
    let read = body.relay(&mut holding, out, false, &relay).await;
    match read {
        Ok(_) => {
            head.framing = Framing::Length(holding.len);
            Ok(Some(holding.finish()))
        }
        Err(_) if holding.over => Err(too_large()),
        Err(BodyError::Sink) => Err(LocalError::new(
            500,
            ErrorKind::PolicyRefused,
            "Internal Server Error",
        )),
        Err(failed) => Err(failed.client_answer().unwrap_or_else(|| {
            LocalError::new(
                400,
                ErrorKind::MalformedBody,
                "the request body did not arrive",
            )
        })),
    }
}

/// oxy's answer to a body over the limit: 413 and its status text.
fn too_large() -> LocalError {
    LocalError::new(413, ErrorKind::PolicyRefused, "Request Entity Too Large")
}

/// `reply` with its body read whole (in memory, or a temporary file past
/// `mem_response_body_bytes`) and sent with its length; over `max_response_body_bytes`, a
/// 500 instead (as oxy's buffer answers a body it could not hold).
pub(crate) async fn read_response<'r>(
    config: &Buffering,
    worker: &Worker,
    watch: &ConnWatch,
    req: &RequestHead,
    reply: Reply<'r>,
) -> Reply<'r> {
    // No body to hold (oxy's `expectBody`).
    let status = reply.status();
    if req.is_head() || status < 200 || status == 204 || status == 304 {
        return reply;
    }
    let max = match config.max_response_body_bytes {
        0 => u64::MAX,
        max => max,
    };
    let Reply {
        head,
        body,
        upstream,
        body_filter,
    } = reply;
    let mut response = match head {
        ReplyHead::Response(response) => response,
        // weir's own answers and local ones are in memory (or a file) already.
        head => {
            let length = match (&head, &body) {
                (_, ReplyBody::File(file)) => file.len,
                (_, ReplyBody::Bytes(bytes)) => bytes.len() as u64,
                (ReplyHead::Local(local), _) => local.body.len() as u64,
                (ReplyHead::Shared(local), _) => local.body.len() as u64,
                _ => 0,
            };
            if length > max {
                return failed(internal_error(), upstream);
            }
            return Reply {
                head,
                body,
                upstream,
                body_filter,
            };
        }
    };
    if matches!(response.framing, Framing::Length(n) if n > max) {
        // Declared over the limit: not read (the connection goes with the reply).
        return failed(internal_error(), upstream);
    }
    let mut holding = Holding::new(config.mem_response_body_bytes, max);
    let read = match body {
        ReplyBody::Upstream(mut up) => {
            let read = (Waiting::ResponseBody, read_timeout(&upstream));
            let relay = holding_relay(worker, watch, read);
            let mut out = Vec::new();
            let mut sink = Sink::plain(Some(&mut holding));
            let framing = response.framing;
            let relayed = relay_body(
                &mut up.io,
                &mut up.buf,
                framing,
                &mut sink,
                &mut out,
                false,
                &relay,
            )
            .await;
            // A body of known end leaves the connection ready for another request.
            let clean = matches!(framing, Framing::Length(_) | Framing::Chunked);
            if let (Ok(_), true, true, Some(used)) =
                (&relayed, clean, response.keep_alive, &upstream)
            {
                used.check_in(&worker.pool, up);
            }
            relayed.map(|_| ())
        }
        ReplyBody::Stream(mut stream) => {
            hold_h2(
                worker,
                watch,
                read_timeout(&upstream),
                &mut stream,
                &mut holding,
            )
            .await
        }
        ReplyBody::Bytes(bytes) if bytes.len() as u64 > max => {
            return failed(internal_error(), upstream)
        }
        ReplyBody::File(file) if file.len > max => return failed(internal_error(), upstream),
        other => {
            return Reply {
                head: ReplyHead::Response(response),
                body: other,
                upstream,
                body_filter,
            }
        }
    };
    match read {
        Ok(()) => {}
        Err(_) if holding.over => return failed(internal_error(), upstream),
        Err(BodyError::Sink) => return failed(internal_error(), upstream),
        Err(_) => return failed(upstream_broke(), upstream),
    }
    let held = holding.finish();
    response.framing = Framing::Length(held.len());
    let body = match held {
        HeldBody::Memory(bytes) => ReplyBody::Bytes(bytes),
        HeldBody::File(file, len) => ReplyBody::File(FileBody {
            file: FileHandle::Worker(file),
            offset: 0,
            len,
            mapped: None,
        }),
    };
    Reply {
        head: ReplyHead::Response(response),
        body,
        upstream,
        body_filter,
    }
}

/// An HTTP/2 answer's DATA frames into `holding`, each waited for under `read_timeout`.
async fn hold_h2(
    worker: &Worker,
    watch: &ConnWatch,
    read_timeout: Duration,
    stream: &mut crate::servers::h2_pool::H2Body,
    holding: &mut Holding,
) -> Result<(), BodyError> {
    loop {
        let data = stream.recv.data();
        let waited = watch.within(&worker.clock, Waiting::ResponseBody, read_timeout, data);
        match waited.await {
            Ok(Some(Ok(chunk))) => {
                stream.recv.release_capacity(chunk.len());
                holding.push(&chunk).map_err(|_| BodyError::Sink)?;
            }
            Ok(None) => return Ok(()),
            Ok(Some(Err(_))) => return Err(BodyError::Source),
            Err(_) => return Err(BodyError::SourceStalled),
        }
    }
}

fn read_timeout(upstream: &Option<UpstreamUse<'_>>) -> Duration {
    upstream
        .as_ref()
        .map_or(Duration::from_secs(60), |u| u.service.read_timeout)
}

fn internal_error() -> LocalError {
    LocalError::new(500, ErrorKind::PolicyRefused, "Internal Server Error")
}

fn upstream_broke() -> LocalError {
    LocalError::new(
        502,
        ErrorKind::UpstreamFailed,
        "the server's answer broke off before its end",
    )
}

fn failed(error: LocalError, upstream: Option<UpstreamUse<'_>>) -> Reply<'_> {
    Reply {
        upstream,
        ..Reply::error(error)
    }
}

/// Whether `retry_expression` asks for another try after try number `attempt` was answered
/// with `status` (oxy retries ten times at most whatever it says).
pub(crate) fn retries(config: &Buffering, attempt: u32, status: u16, method: &str) -> bool {
    let Some(expression) = &config.retry_expression else {
        return false;
    };
    attempt <= MAX_RETRIES && holds(expression, attempt, status, method)
}

fn holds(expression: &RetryExpression, attempt: u32, status: u16, method: &str) -> bool {
    match expression {
        RetryExpression::And(a, b) => {
            holds(a, attempt, status, method) && holds(b, attempt, status, method)
        }
        RetryExpression::Or(a, b) => {
            holds(a, attempt, status, method) || holds(b, attempt, status, method)
        }
        // oxy counts a 502 or a 504 as a network error.
        RetryExpression::IsNetworkError => matches!(status, 502 | 504),
        RetryExpression::Compare(value, comparison, constant) => {
            let ordering = match (value, constant) {
                (RetryValue::RequestMethod, RetryValue::Text(text)) => method.cmp(text.as_str()),
                (RetryValue::Attempts, RetryValue::Number(n)) => i64::from(attempt).cmp(n),
                (RetryValue::ResponseCode, RetryValue::Number(n)) => i64::from(status).cmp(n),
                // The loader builds no other pair.
                _ => return false,
            };
            comparison.admits(ordering)
        }
    }
}

/// A request body an earlier filter read whole (`forward_auth`'s), held as it is: 413 over
/// the limit.
pub(crate) fn hold_read(config: &Buffering, body: Bytes) -> Result<HeldBody, LocalError> {
    let max = config.max_request_body_bytes;
    if max > 0 && body.len() as u64 > max {
        return Err(too_large());
    }
    Ok(HeldBody::Memory(body))
}

/// A client whose request body is held (in memory or a file): the upstream side sends it from
/// there, and may send it again.
pub(crate) struct Buffered<'c, C> {
    client: &'c mut C,
    body: Option<HeldBody>,
}

impl<'c, C: ClientSide> Buffered<'c, C> {
    pub(crate) fn new(client: &'c mut C, body: Option<HeldBody>) -> Self {
        Buffered { client, body }
    }
}

impl<C: ClientSide> ClientSide for Buffered<'_, C> {
    type BodyIo = C::BodyIo;

    fn ip(&self) -> IpAddr {
        self.client.ip()
    }

    fn ip_text(&self) -> &str {
        self.client.ip_text()
    }

    fn scheme(&self) -> crate::http::Scheme {
        self.client.scheme()
    }

    fn watch(&self) -> &ConnWatch {
        self.client.watch()
    }

    fn outgoing(&mut self, req: &RequestHead) -> Outgoing<'_, Self::BodyIo> {
        let mut outgoing = self.client.outgoing(req);
        outgoing.body = match &self.body {
            None => return outgoing,
            Some(held) if held.len() == 0 => BodySource::None,
            Some(HeldBody::Memory(bytes)) => BodySource::Bytes(bytes.clone()),
            Some(HeldBody::File(file, len)) => BodySource::Spilled(Spilled {
                file: file.clone(),
                len: *len,
            }),
        };
        outgoing
    }

    fn abandon_body(&mut self) {
        self.client.abandon_body();
    }

    fn may_resend(&self, req: &RequestHead) -> bool {
        match self.body {
            Some(_) => req.is_idempotent(),
            None => self.client.may_resend(req),
        }
    }

    async fn read_body(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError> {
        match &self.body {
            Some(held) if held.len() > max => Err(BodyError::TooLarge),
            Some(HeldBody::Memory(bytes)) => Ok(bytes.clone()),
            Some(HeldBody::File(file, len)) => {
                use std::os::unix::fs::FileExt;
                let mut whole = vec![0; *len as usize];
                file.read_exact_at(&mut whole, 0)
                    .map_err(|_| BodyError::Source)?;
                Ok(whole.into())
            }
            None => self.client.read_body(worker, req, max).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_config::Comparison;

    fn config(expression: RetryExpression) -> Buffering {
        Buffering {
            max_request_body_bytes: 0,
            mem_request_body_bytes: 0,
            max_response_body_bytes: 0,
            mem_response_body_bytes: 0,
            retry_expression: Some(expression),
        }
    }

    #[test]
    fn bodies_past_the_memory_size_go_to_a_file() {
        let mut small = Holding::new(8, 0);
        small.push(b"0123").unwrap();
        small.push(b"4567").unwrap();
        assert!(matches!(small.finish(), HeldBody::Memory(bytes) if &bytes[..] == b"01234567"));
        let mut large = Holding::new(8, 20);
        large.push(b"01234").unwrap();
        large.push(b"56789").unwrap();
        large.push(b"abcde").unwrap();
        assert!(large.push(b"fghij!").is_err() && large.over);
        let HeldBody::File(file, len) = large.finish() else {
            panic!("held in memory past its size");
        };
        use std::os::unix::fs::FileExt;
        let mut back = vec![0; len as usize];
        file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(back, b"0123456789abcde");
    }

    #[test]
    fn retry_expressions_as_oxy_judges_them() {
        use RetryExpression::*;
        // `IsNetworkError() && Attempts() <= 2`, oxy's retry_test.go.
        let network = config(And(
            Box::new(IsNetworkError),
            Box::new(Compare(
                RetryValue::Attempts,
                Comparison::LessOrEqual,
                RetryValue::Number(2),
            )),
        ));
        assert!(retries(&network, 1, 502, "GET"));
        assert!(retries(&network, 2, 504, "GET"));
        assert!(!retries(&network, 3, 502, "GET"));
        assert!(!retries(&network, 1, 503, "GET"));
        assert!(!retries(&network, 1, 200, "GET"));
        let method = config(Compare(
            RetryValue::RequestMethod,
            Comparison::NotEqual,
            RetryValue::Text("POST".into()),
        ));
        assert!(retries(&method, 1, 200, "GET") && !retries(&method, 1, 200, "POST"));
        // Ten retries at most, whatever the expression says.
        let always = config(Compare(
            RetryValue::ResponseCode,
            Comparison::GreaterOrEqual,
            RetryValue::Number(0),
        ));
        assert!(retries(&always, 10, 200, "GET") && !retries(&always, 11, 200, "GET"));
    }
}
