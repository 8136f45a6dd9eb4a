//! A Redis client for what a fleet shares: one pipelined connection per worker and store,
//! commands answered in order, a request never waiting longer than the store's `timeout`,
//! and, while Redis is away, every command failing at once (reconnecting with backoff behind,
//! and one log line when Redis goes and one when it comes back, for the whole process); and,
//! for the control side, a subscription to a channel and one-off commands.

use crate::io::ticker::Ticker;
use crate::io::upstream_io::UpstreamIo;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use weir_config::{RedisStore, UpstreamProtocol};

/// The longest wait for a connection (the store's `timeout` bounds the commands, not this:
/// commands fail at once while there is no connection).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Reconnection backoff: from this, doubling, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How to reach a store: its settings, and the TLS client settings they make.
#[derive(Debug)]
pub struct Dialer {
    pub config: RedisStore,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Dialer {
    /// Errors (an unreadable CA file, say) read `LINE:COLUMN: message`.
    pub fn new(config: RedisStore) -> Result<Dialer, String> {
        let tls = match &config.tls {
            Some(tls) => {
                let http = crate::listen::tls::client_config(tls, UpstreamProtocol::Http1)?;
                let mut plain = (*http).clone();
                plain.alpn_protocols.clear();
                Some(Arc::new(plain))
            }
            None => None,
        };
        Ok(Dialer { config, tls })
    }

    /// A connection to `endpoint` (`host:port`), through TLS when the store has it.
    async fn open(&self, endpoint: &str) -> Result<UpstreamIo, String> {
        let stream = TcpStream::connect(endpoint)
            .await
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (Some(tls), Some(settings)) = (&self.tls, &self.config.tls) else {
            return Ok(UpstreamIo::Plain(stream));
        };
        let name = crate::listen::tls::endpoint_server_name(settings, endpoint)?;
        let connector = tokio_rustls::TlsConnector::from(tls.clone());
        let session = connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        Ok(UpstreamIo::Tls(Box::new(session)))
    }
}

/// One configured store, shared by the workers; each worker opens its own connection.
#[derive(Debug)]
pub struct Redis {
    pub config: RedisStore,
    dialer: Dialer,
    /// Whether the last connection attempt of any worker failed (for the log's two lines).
    down: AtomicBool,
    /// Decisions its user could not get from it (Redis away, slow, or answering an error),
    /// counted by the user.
    pub failures: AtomicU64,
    /// A node a Cluster's `MOVED` or `ASK` named: the next connection tries it first.
    redirect: std::sync::Mutex<Option<String>>,
}

/// Why a command got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No connection to Redis now.
    Unreachable,
    /// No answer within the store's `timeout`.
    Timeout,
    /// Redis answered with an error.
    Refused(String),
}

/// A reply, as RESP2 has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Nil,
    Int(i64),
    Text(Vec<u8>),
    Error(String),
    Array(Vec<Value>),
}

impl Redis {
    pub fn new(config: RedisStore) -> Result<Arc<Redis>, String> {
        Ok(Arc::new(Redis {
            dialer: Dialer::new(config.clone())?,
            config,
            down: AtomicBool::new(false),
            failures: AtomicU64::new(0),
            redirect: std::sync::Mutex::new(None),
        }))
    }

    /// Sends `args` as one command on this worker's connection and waits for its answer, at
    /// most the store's `timeout`. On a connection in service, the connection's task enforces
    /// the timeout (one ticker per connection, not a timer per command); while connecting, the
    /// command has a timer of its own; with no connection, it fails at once.
    pub async fn call(self: &Arc<Self>, args: &[&[u8]]) -> Result<Value, StoreError> {
        match self.call_here(args).await {
            // The connection follows the redirect (`serve`); the command goes again, once.
            Err(StoreError::Refused(e)) if redirected(&e).is_some() => self.call_here(args).await,
            other => other,
        }
    }

    async fn call_here(self: &Arc<Self>, args: &[&[u8]]) -> Result<Value, StoreError> {
        let link = WORKER_LINKS.with(|links| links.borrow_mut().link(self));
        let state = link.state.get();
        if state == LinkState::Down {
            return Err(StoreError::Unreachable);
        }
        let (tx, answer) = oneshot::channel();
        let command = Command {
            bytes: encode(args),
            deadline: Instant::now() + self.config.timeout.saturating_sub(tick(&self.config)),
            answer: tx,
        };
        if link.queue.send(command).is_err() {
            return Err(StoreError::Unreachable);
        }
        let outcome = match state {
            LinkState::Connecting => {
                let Ok(timer) = Ticker::once(self.config.timeout) else {
                    return Err(StoreError::Unreachable);
                };
                tokio::select! {
                    biased;
                    answer = answer => answer.unwrap_or(Err(StoreError::Unreachable)),
                    _ = timer.tick() => Err(StoreError::Timeout),
                }
            }
            _ => answer.await.unwrap_or(Err(StoreError::Unreachable)),
        };
        match outcome {
            Ok(Value::Error(text)) => Err(StoreError::Refused(text)),
            other => other,
        }
    }

    fn take_redirect(&self) -> Option<String> {
        self.redirect.lock().ok()?.take()
    }

    fn set_redirect(&self, to: Option<String>) {
        if let Ok(mut redirect) = self.redirect.lock() {
            *redirect = to;
        }
    }

    /// Logs the first failure after success, and the first success after failure, once for
    /// the whole process.
    fn note_reachable(&self, reachable: bool, why: &str) {
        if self.down.swap(!reachable, Ordering::Relaxed) == reachable {
            let endpoints = self.config.endpoints.join(", ");
            match reachable {
                true => crate::log_info!("redis {endpoints}: reachable again"),
                false => crate::log_warn!("redis {endpoints}: unreachable ({why})"),
            }
        }
    }
}

type Answer = Result<Value, StoreError>;

struct Command {
    bytes: Vec<u8>,
    /// When the connection's task answers it `Timeout` if Redis has not.
    deadline: Instant,
    answer: oneshot::Sender<Answer>,
}

/// How a worker's connection to a store stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    /// Connecting: commands wait, each on a timer of its own.
    Connecting,
    /// In service: the connection's task answers late commands `Timeout`.
    Up,
    /// After a failed try, until the next one: commands fail at once rather than wait for a
    /// connection that may never come.
    Down,
}

/// How often a connection's task looks for commands past their deadline: a quarter of the
/// timeout (at least 1 ms), taken off each deadline so that none waits longer than the timeout.
fn tick(config: &RedisStore) -> Duration {
    (config.timeout / 4).max(Duration::from_millis(1))
}

/// A worker's way to one store's connection task.
struct Link {
    store: Weak<Redis>,
    queue: mpsc::UnboundedSender<Command>,
    state: Rc<std::cell::Cell<LinkState>>,
}

#[derive(Default)]
struct Links(Vec<Rc<Link>>);

thread_local! {
    /// This worker's connections, one per store in use; a store a reload dropped loses its
    /// connection when the next one is opened.
    static WORKER_LINKS: RefCell<Links> = RefCell::default();
}

impl Links {
    fn link(&mut self, store: &Arc<Redis>) -> Rc<Link> {
        let target = Arc::downgrade(store);
        if let Some(link) = self.0.iter().find(|l| l.store.ptr_eq(&target)) {
            return link.clone();
        }
        self.0.retain(|l| l.store.strong_count() > 0);
        let (queue, commands) = mpsc::unbounded_channel();
        let state = Rc::new(std::cell::Cell::new(LinkState::Connecting));
        tokio::task::spawn_local(run_connection(target.clone(), commands, state.clone()));
        let link = Rc::new(Link {
            store: target,
            queue,
            state,
        });
        self.0.push(link.clone());
        link
    }
}

/// The connection task: connects (trying the endpoints in order), then writes the queued
/// commands and hands each reply to its command, in order; on any failure, fails what is
/// pending and reconnects after a backoff. Ends when the store is gone.
async fn run_connection(
    store: Weak<Redis>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    state: Rc<std::cell::Cell<LinkState>>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some(redis) = store.upgrade() else {
            return;
        };
        state.set(LinkState::Connecting);
        let redirect = redis.take_redirect();
        let connected = connect(&redis.dialer, redirect).await;
        let tick = tick(&redis.config);
        drop(redis);
        state.set(LinkState::Down);
        match connected {
            Ok(stream) => {
                if let Some(s) = store.upgrade() {
                    s.note_reachable(true, "");
                }
                backoff = FIRST_BACKOFF;
                state.set(LinkState::Up);
                let why = serve(stream, &mut commands, tick).await;
                state.set(LinkState::Down);
                match (why, store.upgrade()) {
                    (Ended::Closed, _) | (_, None) => return,
                    // A connection that worked is tried again at once (a demoted master
                    // closes its clients, a restarted Redis is back): only a failed try backs
                    // off.
                    (Ended::Broken, Some(_)) => continue,
                    // Straight to the node named (or, for a demoted master, to the one the
                    // sentinels name now), no backoff.
                    (Ended::Redirected(to), Some(s)) => {
                        s.set_redirect(to);
                        continue;
                    }
                }
            }
            Err(why) => match store.upgrade() {
                Some(s) => s.note_reachable(false, &why),
                None => return,
            },
        }
        // Until the next try, what is queued fails at once.
        let Ok(timer) = Ticker::once(backoff) else {
            return;
        };
        loop {
            tokio::select! {
                _ = timer.tick() => break,
                command = commands.recv() => match command {
                    Some(command) => {
                        let _ = command.answer.send(Err(StoreError::Unreachable));
                    }
                    None => return,
                },
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A connection to the first endpoint that answers (after `redirect`, a node a Cluster
/// named), authenticated and on its database. With `sentinel_master`, the endpoints are
/// sentinels, and the connection is to the master the first one that answers names.
async fn connect(dialer: &Dialer, redirect: Option<String>) -> Result<UpstreamIo, String> {
    let config = &dialer.config;
    let mut why = String::from("no endpoint");
    if let Some(endpoint) = redirect {
        match connect_one(dialer, &endpoint).await {
            Ok(stream) => return Ok(stream),
            Err(e) => why = format!("{endpoint}: {e}"),
        }
    }
    for endpoint in &config.endpoints {
        let server = match &config.sentinel_master {
            Some(master) => match master_from_sentinel(dialer, endpoint, master).await {
                Ok(server) => server,
                Err(e) => {
                    why = format!("sentinel {endpoint}: {e}");
                    continue;
                }
            },
            None => endpoint.clone(),
        };
        match connect_one(dialer, &server).await {
            Ok(stream) => return Ok(stream),
            Err(e) => why = format!("{server}: {e}"),
        }
    }
    Err(why)
}

/// The address a sentinel gives for `master`.
async fn master_from_sentinel(
    dialer: &Dialer,
    sentinel: &str,
    master: &str,
) -> Result<String, String> {
    let timer = Ticker::once(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let command = encode(&[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()]);
    let answers = tokio::select! {
        answers = async {
            let mut stream = dialer.open(sentinel).await?;
            exchange(&mut stream, &command, 1).await
        } => answers?,
        _ = timer.tick() => return Err("no answer in time".into()),
    };
    match answers.first() {
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::Text(host), Value::Text(port)] => Ok(format!(
                "{}:{}",
                String::from_utf8_lossy(host),
                String::from_utf8_lossy(port)
            )),
            _ => Err(format!("an answer not host and port: {items:?}")),
        },
        Some(Value::Nil) => Err(format!("it does not know master `{master}`")),
        other => Err(format!("it answered {other:?}")),
    }
}

/// Where a reply sends the command: a Cluster's `MOVED slot host:port` or `ASK slot
/// host:port` (`Some(Some(node))`), or a demoted master's `READONLY` (`Some(None)`: ask the
/// sentinels again).
fn redirected(error: &str) -> Option<Option<String>> {
    if error.starts_with("READONLY") {
        return Some(None);
    }
    let mut words = error.split(' ');
    match (words.next(), words.next(), words.next()) {
        (Some("MOVED" | "ASK"), Some(_slot), Some(node)) => Some(Some(node.to_string())),
        _ => None,
    }
}

async fn connect_one(dialer: &Dialer, endpoint: &str) -> Result<UpstreamIo, String> {
    let config = &dialer.config;
    let timer = Ticker::once(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let mut stream = tokio::select! {
        stream = dialer.open(endpoint) => stream?,
        _ = timer.tick() => return Err("connect timed out".into()),
    };
    let mut hello = Vec::new();
    if !config.password.is_empty() {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if !config.username.is_empty() {
            args.push(config.username.as_bytes());
        }
        args.push(config.password.as_bytes());
        hello.extend(encode(&args));
    }
    let db = config.db.to_string();
    hello.extend(encode(&[b"SELECT", db.as_bytes()]));
    hello.extend(encode(&[b"PING"]));
    let expected = 2 + usize::from(!config.password.is_empty());
    let answers = tokio::select! {
        answers = exchange(&mut stream, &hello, expected) => answers?,
        _ = timer.tick() => return Err("no answer to the handshake".into()),
    };
    match answers.into_iter().find(|a| matches!(a, Value::Error(_))) {
        Some(Value::Error(e)) => Err(e),
        _ => Ok(stream),
    }
}

/// Writes `bytes` and reads `count` replies.
async fn exchange(
    stream: &mut UpstreamIo,
    bytes: &[u8],
    count: usize,
) -> Result<Vec<Value>, String> {
    stream.write_all(bytes).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(256);
    let mut answers = Vec::with_capacity(count);
    while answers.len() < count {
        match parse(&buf) {
            Parsed::Value(value, used) => {
                buf.drain(..used);
                answers.push(value);
            }
            Parsed::Incomplete => {
                if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                    return Err("closed".into());
                }
            }
            Parsed::Invalid => return Err("not RESP".into()),
        }
    }
    Ok(answers)
}

/// A connection subscribed to one channel, for a follower on the control side (which has no
/// worker's connection).
pub struct Subscription {
    stream: UpstreamIo,
    buf: Vec<u8>,
}

impl Subscription {
    /// Connects (trying the endpoints in order), subscribes to `channel`, and waits until
    /// Redis confirms: what is published from then on arrives.
    pub async fn open(dialer: &Dialer, channel: &[u8]) -> Result<Subscription, String> {
        let mut stream = connect(dialer, None).await?;
        let timer = Ticker::once(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
        let command = encode(&[b"SUBSCRIBE", channel]);
        let confirmed = tokio::select! {
            answers = exchange(&mut stream, &command, 1) => answers?,
            _ = timer.tick() => return Err("no answer to SUBSCRIBE".into()),
        };
        match confirmed.first() {
            Some(Value::Array(items))
                if items.first() == Some(&Value::Text(b"subscribe".to_vec())) =>
            {
                Ok(Subscription {
                    stream,
                    buf: Vec::with_capacity(4096),
                })
            }
            other => Err(format!("SUBSCRIBE answered {other:?}")),
        }
    }

    /// The next message published on the channel; an error when the connection breaks.
    pub async fn next(&mut self) -> Result<Vec<u8>, String> {
        loop {
            match parse(&self.buf) {
                Parsed::Value(value, used) => {
                    self.buf.drain(..used);
                    if let Value::Array(mut items) = value {
                        if items.len() == 3 && items[0] == Value::Text(b"message".to_vec()) {
                            if let Some(Value::Text(payload)) = items.pop() {
                                return Ok(payload);
                            }
                        }
                    }
                }
                Parsed::Incomplete => {
                    let read = self.stream.read_buf(&mut self.buf).await;
                    match read.map_err(|e| e.to_string())? {
                        0 => return Err("closed by redis".into()),
                        _ => continue,
                    }
                }
                Parsed::Invalid => return Err("not RESP".into()),
            }
        }
    }
}

/// One command on a connection of its own, answered within the connect timeout; a Cluster's
/// redirect is followed once.
pub async fn call_once(dialer: &Dialer, args: &[&[u8]]) -> Result<Value, String> {
    match call_once_at(dialer, args, None).await {
        Ok(Value::Error(e)) => match redirected(&e) {
            Some(to) => match call_once_at(dialer, args, to).await? {
                Value::Error(e) => Err(e),
                value => Ok(value),
            },
            None => Err(e),
        },
        other => other,
    }
}

async fn call_once_at(
    dialer: &Dialer,
    args: &[&[u8]],
    redirect: Option<String>,
) -> Result<Value, String> {
    let timer = Ticker::once(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let command = encode(args);
    let answers = tokio::select! {
        answers = async {
            let mut stream = connect(dialer, redirect).await?;
            exchange(&mut stream, &command, 1).await
        } => answers?,
        _ = timer.tick() => return Err("no answer in time".into()),
    };
    answers.into_iter().next().ok_or_else(|| "no answer".into())
}

enum Ended {
    /// The worker's side went away: no more commands will come.
    Closed,
    /// The connection failed (closed, reset, or not speaking RESP).
    Broken,
    /// A reply redirected a command: reconnect there (see [`redirected`]).
    Redirected(Option<String>),
}

/// Serves one connection: commands out (several per write when they queue up), replies back
/// in order; every `tick`, the commands past their deadline are answered `Timeout` (their
/// replies, when they come, are read and dropped).
async fn serve(
    stream: UpstreamIo,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    tick: Duration,
) -> Ended {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut pending: VecDeque<(Instant, Option<oneshot::Sender<Answer>>)> = VecDeque::new();
    let mut buf = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    let ticker = match Ticker::new(tick) {
        Ok(ticker) => ticker,
        Err(_) => return Ended::Broken,
    };
    let ended = loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { break Ended::Closed };
                out.clear();
                out.extend_from_slice(&command.bytes);
                pending.push_back((command.deadline, Some(command.answer)));
                while let Ok(more) = commands.try_recv() {
                    out.extend_from_slice(&more.bytes);
                    pending.push_back((more.deadline, Some(more.answer)));
                }
                if writer.write_all(&out).await.is_err() {
                    break Ended::Broken;
                }
            }
            _ = ticker.tick(), if !pending.is_empty() => {
                let now = Instant::now();
                for (deadline, answer) in pending.iter_mut() {
                    if *deadline > now {
                        break;
                    }
                    if let Some(answer) = answer.take() {
                        let _ = answer.send(Err(StoreError::Timeout));
                    }
                }
            }
            read = reader.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break Ended::Broken;
                }
                let mut used = 0;
                let mut redirect = None;
                loop {
                    match parse(&buf[used..]) {
                        Parsed::Value(value, n) => {
                            used += n;
                            if let Value::Error(e) = &value {
                                redirect = redirect.or(redirected(e));
                            }
                            match pending.pop_front() {
                                Some((_, Some(answer))) => {
                                    let _ = answer.send(Ok(value));
                                }
                                // Answered `Timeout` already: the reply goes nowhere.
                                Some((_, None)) => {}
                                None => break,
                            }
                        }
                        Parsed::Incomplete => break,
                        Parsed::Invalid => {
                            used = usize::MAX;
                            break;
                        }
                    }
                }
                if used == usize::MAX {
                    break Ended::Broken;
                }
                buf.drain(..used);
                if let Some(to) = redirect {
                    break Ended::Redirected(to);
                }
            }
        }
    };
    for (_, answer) in pending {
        if let Some(answer) = answer {
            let _ = answer.send(Err(StoreError::Unreachable));
        }
    }
    ended
}

/// A command as RESP's array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    use crate::http::codec::push_decimal;
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.push(b'*');
    push_decimal(&mut out, args.len() as u64);
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        push_decimal(&mut out, arg.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// A value and the bytes it took.
    Value(Value, usize),
    Incomplete,
    Invalid,
}

/// Replies nested deeper than this are refused (no recursion without bound on bad input).
const MAX_DEPTH: usize = 8;

/// The first RESP2 reply in `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], depth: usize) -> Parsed {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Parsed::Incomplete;
    };
    if end == 0 || depth > MAX_DEPTH {
        return Parsed::Invalid;
    }
    let line = &buf[1..end];
    let after = end + 2;
    let number = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
    match buf[0] {
        b'+' => Parsed::Value(Value::Text(line.to_vec()), after),
        b'-' => Parsed::Value(
            Value::Error(String::from_utf8_lossy(line).into_owned()),
            after,
        ),
        b':' => match number() {
            Some(n) => Parsed::Value(Value::Int(n), after),
            None => Parsed::Invalid,
        },
        b'$' => match number() {
            Some(-1) => Parsed::Value(Value::Nil, after),
            Some(len) if len >= 0 => {
                let len = len as usize;
                match buf.get(after..after + len + 2) {
                    Some(body) if body.ends_with(b"\r\n") => {
                        Parsed::Value(Value::Text(body[..len].to_vec()), after + len + 2)
                    }
                    Some(_) => Parsed::Invalid,
                    None => Parsed::Incomplete,
                }
            }
            _ => Parsed::Invalid,
        },
        b'*' => match number() {
            Some(-1) => Parsed::Value(Value::Nil, after),
            Some(count) if count >= 0 => {
                let mut items = Vec::with_capacity((count as usize).min(64));
                let mut at = after;
                for _ in 0..count {
                    match parse_at(&buf[at..], depth + 1) {
                        Parsed::Value(value, n) => {
                            items.push(value);
                            at += n;
                        }
                        other => return other,
                    }
                }
                Parsed::Value(Value::Array(items), at)
            }
            _ => Parsed::Invalid,
        },
        _ => Parsed::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands_as_bulk_strings() {
        assert_eq!(
            encode(&[b"SELECT", b"12"]),
            b"*2\r\n$6\r\nSELECT\r\n$2\r\n12\r\n"
        );
    }

    /// RESP2's reply types (redis.io/docs/reference/protocol-spec), whole, cut short and
    /// malformed.
    #[test]
    fn parses_replies() {
        let cases: &[(&[u8], Parsed)] = &[
            (b"+OK\r\n", Parsed::Value(Value::Text(b"OK".to_vec()), 5)),
            (
                b"-NOSCRIPT No matching script\r\n",
                Parsed::Value(Value::Error("NOSCRIPT No matching script".into()), 30),
            ),
            (b":-42\r\n", Parsed::Value(Value::Int(-42), 6)),
            (
                b"$3\r\nabc\r\n+x",
                Parsed::Value(Value::Text(b"abc".to_vec()), 9),
            ),
            (b"$-1\r\n", Parsed::Value(Value::Nil, 5)),
            (
                b"*2\r\n:1\r\n$1\r\n0\r\n",
                Parsed::Value(
                    Value::Array(vec![Value::Int(1), Value::Text(b"0".to_vec())]),
                    15,
                ),
            ),
            (b"*2\r\n:1\r\n", Parsed::Incomplete),
            (b"$3\r\nab", Parsed::Incomplete),
            (b":12", Parsed::Incomplete),
            (b"$3\r\nabcd\r\n", Parsed::Invalid),
            (b":x\r\n", Parsed::Invalid),
            (b"?\r\n", Parsed::Invalid),
            (
                b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
                Parsed::Invalid,
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(
                &parse(bytes),
                expected,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
