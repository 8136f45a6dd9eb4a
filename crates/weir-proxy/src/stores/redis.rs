//! A Redis client for what a fleet shares: one pipelined connection per worker and store,
//! commands answered in order, a request never waiting longer than the store's `timeout`,
//! and, while Redis is away, every command failing at once (reconnecting with backoff behind,
//! and one log line when Redis goes and one when it comes back, for the whole process); and,
//! for the control side, a subscription to a channel and one-off commands.

use crate::io::ticker::Ticker;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use weir_config::RedisStore;

/// The longest wait for a connection (the store's `timeout` bounds the commands, not this:
/// commands fail at once while there is no connection).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Reconnection backoff: from this, doubling, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One configured store, shared by the workers; each worker opens its own connection.
#[derive(Debug)]
pub struct Redis {
    pub config: RedisStore,
    /// Whether the last connection attempt of any worker failed (for the log's two lines).
    down: AtomicBool,
    /// Decisions its user could not get from it (Redis away, slow, or answering an error),
    /// counted by the user.
    pub failures: AtomicU64,
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
    pub fn new(config: RedisStore) -> Arc<Redis> {
        Arc::new(Redis {
            config,
            down: AtomicBool::new(false),
            failures: AtomicU64::new(0),
        })
    }

    /// Sends `args` as one command on this worker's connection and waits for its answer, at
    /// most the store's `timeout`.
    pub async fn call(self: &Arc<Self>, args: &[&[u8]]) -> Result<Value, StoreError> {
        let answer = self.send(args)?;
        let Ok(timer) = Ticker::once(self.config.timeout) else {
            return Err(StoreError::Unreachable);
        };
        let outcome = tokio::select! {
            biased;
            answer = answer => answer.unwrap_or(Err(StoreError::Unreachable)),
            _ = timer.tick() => Err(StoreError::Timeout),
        };
        match outcome {
            Ok(Value::Error(text)) => Err(StoreError::Refused(text)),
            other => other,
        }
    }

    /// Queues a command on this worker's connection (opened on first use).
    fn send(self: &Arc<Self>, args: &[&[u8]]) -> Result<oneshot::Receiver<Answer>, StoreError> {
        let link = WORKER_LINKS.with(|links| links.borrow_mut().link(self));
        if !link.up.get() {
            return Err(StoreError::Unreachable);
        }
        let (tx, rx) = oneshot::channel();
        let command = Command {
            bytes: encode(args),
            answer: tx,
        };
        link.queue
            .send(command)
            .map_err(|_| StoreError::Unreachable)?;
        Ok(rx)
    }

    /// Logs the first failure after success, and the first success after failure, once for
    /// the whole process.
    fn note_reachable(&self, reachable: bool, why: &str) {
        if self.down.swap(!reachable, Ordering::Relaxed) == reachable {
            let endpoints = self.config.endpoints.join(", ");
            match reachable {
                true => crate::log_line!("weir: redis {endpoints}: reachable again"),
                false => crate::log_line!("weir: redis {endpoints}: unreachable ({why})"),
            }
        }
    }
}

type Answer = Result<Value, StoreError>;

struct Command {
    bytes: Vec<u8>,
    answer: oneshot::Sender<Answer>,
}

/// A worker's way to one store's connection task.
struct Link {
    store: Weak<Redis>,
    queue: mpsc::UnboundedSender<Command>,
    /// Connected or connecting: commands are queued only then; after a failed try, until the
    /// next one, they fail at once rather than wait for a connection that may never come.
    up: Rc<std::cell::Cell<bool>>,
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
        let up = Rc::new(std::cell::Cell::new(true));
        tokio::task::spawn_local(run_connection(target.clone(), commands, up.clone()));
        let link = Rc::new(Link {
            store: target,
            queue,
            up,
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
    up: Rc<std::cell::Cell<bool>>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some(config) = store.upgrade().map(|s| s.config.clone()) else {
            return;
        };
        up.set(true);
        let connected = connect(&config).await;
        up.set(false);
        match connected {
            Ok(stream) => {
                if let Some(s) = store.upgrade() {
                    s.note_reachable(true, "");
                }
                backoff = FIRST_BACKOFF;
                up.set(true);
                let why = serve(stream, &mut commands).await;
                up.set(false);
                match (why, store.upgrade()) {
                    (Ended::Closed, _) | (_, None) => return,
                    (Ended::Broken(why), Some(s)) => s.note_reachable(false, &why),
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

/// A connection to the first endpoint that answers, authenticated and on its database.
async fn connect(config: &RedisStore) -> Result<TcpStream, String> {
    let mut why = String::from("no endpoint");
    for endpoint in &config.endpoints {
        match connect_one(config, endpoint).await {
            Ok(stream) => return Ok(stream),
            Err(e) => why = format!("{endpoint}: {e}"),
        }
    }
    Err(why)
}

async fn connect_one(config: &RedisStore, endpoint: &str) -> Result<TcpStream, String> {
    let timer = Ticker::once(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let mut stream = tokio::select! {
        stream = TcpStream::connect(endpoint) => stream.map_err(|e| e.to_string())?,
        _ = timer.tick() => return Err("connect timed out".into()),
    };
    let _ = stream.set_nodelay(true);
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
    stream: &mut TcpStream,
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
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Subscription {
    /// Connects (trying the endpoints in order), subscribes to `channel`, and waits until
    /// Redis confirms: what is published from then on arrives.
    pub async fn open(config: &RedisStore, channel: &[u8]) -> Result<Subscription, String> {
        let mut stream = connect(config).await?;
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

/// One command on a connection of its own, answered within the connect timeout.
pub async fn call_once(config: &RedisStore, args: &[&[u8]]) -> Result<Value, String> {
    let timer = Ticker::once(CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let command = encode(args);
    let answers = tokio::select! {
        answers = async {
            let mut stream = connect(config).await?;
            exchange(&mut stream, &command, 1).await
        } => answers?,
        _ = timer.tick() => return Err("no answer in time".into()),
    };
    match answers.into_iter().next() {
        Some(Value::Error(e)) => Err(e),
        Some(value) => Ok(value),
        None => Err("no answer".into()),
    }
}

enum Ended {
    /// The worker's side went away: no more commands will come.
    Closed,
    Broken(String),
}

/// Serves one connection: commands out (several per write when they queue up), replies back
/// in order.
async fn serve(stream: TcpStream, commands: &mut mpsc::UnboundedReceiver<Command>) -> Ended {
    let (mut reader, mut writer) = stream.into_split();
    let mut pending: VecDeque<oneshot::Sender<Answer>> = VecDeque::new();
    let mut buf = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    let ended = loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { break Ended::Closed };
                out.clear();
                out.extend_from_slice(&command.bytes);
                pending.push_back(command.answer);
                while let Ok(more) = commands.try_recv() {
                    out.extend_from_slice(&more.bytes);
                    pending.push_back(more.answer);
                }
                if let Err(e) = writer.write_all(&out).await {
                    break Ended::Broken(e.to_string());
                }
            }
            read = reader.read_buf(&mut buf) => {
                match read {
                    Ok(0) => break Ended::Broken("closed by redis".into()),
                    Err(e) => break Ended::Broken(e.to_string()),
                    Ok(_) => {}
                }
                let mut used = 0;
                loop {
                    match parse(&buf[used..]) {
                        Parsed::Value(value, n) => {
                            used += n;
                            match pending.pop_front() {
                                // A command whose request gave up waiting is dropped here.
                                Some(answer) => {
                                    let _ = answer.send(Ok(value));
                                }
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
                    break Ended::Broken("not RESP".into());
                }
                buf.drain(..used);
            }
        }
    };
    for answer in pending {
        let _ = answer.send(Err(StoreError::Unreachable));
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
enum Parsed {
    /// A value and the bytes it took.
    Value(Value, usize),
    Incomplete,
    Invalid,
}

/// Replies nested deeper than this are refused (no recursion without bound on bad input).
const MAX_DEPTH: usize = 8;

fn parse(buf: &[u8]) -> Parsed {
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
