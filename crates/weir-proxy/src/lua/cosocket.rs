//! `ngx.socket.tcp` and `ngx.socket.connect` as lua-nginx-module's cosockets: `connect` (a
//! connection from this worker's keep-alive pool first), `sslhandshake` (rustls), `send`,
//! `receive`, `receiveany`, `receiveuntil`, the timeouts, `setkeepalive`, `getreusedtimes`,
//! `close`.
//!
//! `send`, `receive`, `receiveany`, a `receiveuntil` iterator and a `connect` served by the
//! pool run at once, without a future: a Lua half calls a Rust step, which does what the
//! socket allows now and answers the values, or "wait" after registering the task that
//! resumes the script (set by [`Resuming`]) with the socket and the connection's timer; the
//! Lua half then yields the script's coroutine to the worker's event loop and calls the step
//! again when resumed. A wait inside a coroutine the script made itself is passed up the same
//! way. A `connect` that opens a connection, and `sslhandshake`, are mlua async functions.

use crate::io::ticker::Ticker;
use crate::io::upstream_io::UpstreamIo;
use bytes::{Buf, BytesMut};
use mlua::{LightUserData, Lua, Table, UserData, UserDataRef, Value};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::pin::Pin;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

mod raw_tcp;
use raw_tcp::socket_ref;

/// lua-nginx-module's defaults: `lua_socket_connect_timeout`, `lua_socket_send_timeout`,
/// `lua_socket_read_timeout` and `lua_socket_keepalive_timeout` are 60s.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// `lua_socket_pool_size`'s default: connections kept per pool key.
const DEFAULT_POOL_SIZE: usize = 30;
/// What one read asks the kernel for (`lua_socket_buffer_size`'s default is 4k/8k).
const READ_CHUNK: usize = 8192;

/// A cosocket's byte stream: TCP (plain or TLS) or a unix domain socket.
enum Stream {
    Net(UpstreamIo),
    Unix(UnixStream),
}

impl Stream {
    /// Reads without waiting (for the pool's check that an idle connection is still quiet).
    fn try_read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Net(io) => io.tcp().try_read(buf),
            Stream::Unix(io) => io.try_read(buf),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Net(io) => Pin::new(io).poll_read(cx, buf),
            Stream::Unix(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Net(io) => Pin::new(io).poll_write(cx, buf),
            Stream::Unix(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Net(io) => Pin::new(io).poll_flush(cx),
            Stream::Unix(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Net(io) => Pin::new(io).poll_shutdown(cx),
            Stream::Unix(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

/// A connection's deadline for its current wait, on a timerfd made at its first wait and kept
/// with the connection (into the pool too). The timerfd is set again only when it would not
/// tick by the new deadline: a connection's waits, each `limit` after the last, share one
/// setting until it ticks, instead of a syscall each.
#[derive(Default)]
pub(super) struct Timer {
    ticker: Option<Ticker>,
    /// When the ticker is set to tick (`None`: not set, or its tick was taken).
    armed_for: Option<Instant>,
    /// The current wait's deadline, from the first time it had to wait.
    deadline: Option<Instant>,
}

impl Timer {
    /// A new operation: its deadline starts when it first has to wait.
    fn reset(&mut self) {
        self.deadline = None;
    }

    /// Ready when the operation's deadline (`limit` after it first had to wait) has passed;
    /// else `cx` is woken by then at the latest.
    fn poll_expired(&mut self, limit: Duration, cx: &mut Context<'_>) -> Poll<Waited> {
        let mut now = Instant::now();
        let deadline = *self.deadline.get_or_insert(now + limit);
        loop {
            if now >= deadline {
                return Poll::Ready(Waited::Timeout);
            }
            // A tick set for the deadline or before it wakes the task in time (one before it
            // comes back here to set the rest).
            let in_time = self.armed_for.is_some_and(|at| at > now && at <= deadline);
            if !in_time {
                let set = match &self.ticker {
                    Some(ticker) => ticker.rearm_once(deadline - now),
                    None => Ticker::once(deadline - now).map(|ticker| {
                        self.ticker = Some(ticker);
                    }),
                };
                if let Err(e) = set {
                    return Poll::Ready(Waited::Timer(e));
                }
                self.armed_for = Some(deadline);
            }
            let Some(ticker) = &self.ticker else {
                return Poll::Pending;
            };
            match ticker.poll_tick(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Waited::Timer(e)),
                Poll::Ready(Ok(())) => {
                    self.armed_for = None;
                    now = Instant::now();
                }
            }
        }
    }
}

/// An open connection: its stream, bytes read and not yet returned, its timer.
struct Conn {
    io: Stream,
    buf: BytesMut,
    timer: Timer,
    /// How many times it was taken from the pool (`getreusedtimes`).
    reused: u32,
    /// A read failed (other than by its timeout): reads answer `closed` from now on, while
    /// sends go on, as lua-nginx-module ends only the reading part then.
    read_closed: bool,
}

/// A connection at rest in the pool.
struct Idle {
    conn: Box<Conn>,
    /// When it stops being reusable (`None`: kept until evicted).
    expires: Option<Instant>,
}

/// One pool: its key (shared with the sockets connected through it) and its connections.
struct Pool {
    key: Rc<[u8]>,
    idle: VecDeque<Idle>,
}

type Pools = HashMap<Rc<[u8]>, Pool, foldhash::fast::RandomState>;

thread_local! {
    /// This worker's keep-alive pools, by key (`host:port` or the `pool` option).
    static POOLS: RefCell<Pools> = RefCell::default();
    /// Whether [`sweep_pools`] runs on this worker.
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
    /// The context a phase that may not wait runs in (`header_filter_by_lua*`), while it runs.
    static DISABLED_IN: Cell<Option<&'static str>> = const { Cell::new(None) };
    /// The waker of the task resuming the running coroutine, while [`Resuming`] lives.
    static WAKER: Cell<Option<NonNull<Waker>>> = const { Cell::new(None) };
    /// Where a pool key is written to be looked up, and `send`'s nested tables flattened.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = RefCell::default();
}

/// While alive, the task that `waker` wakes is the one resuming the running coroutine (a
/// request's or a timer's): a cosocket that has to wait registers it, then yields. Kept as a
/// pointer, not a clone: this is set around every resume of every script, and a clone and
/// its drop cost more than the rest of the guard.
pub(super) struct Resuming<'a> {
    previous: Option<NonNull<Waker>>,
    _waker: PhantomData<&'a Waker>,
}

impl<'a> Resuming<'a> {
    pub fn enter(waker: &'a Waker) -> Resuming<'a> {
        Resuming {
            previous: WAKER.replace(Some(NonNull::from(waker))),
            _waker: PhantomData,
        }
    }
}

impl Drop for Resuming<'_> {
    fn drop(&mut self) {
        WAKER.set(self.previous);
    }
}

/// `f` with the context of the task resuming the running coroutine. Outside any (a phase
/// that cannot wait, where the yield that follows a wait fails), nothing is woken.
#[allow(unsafe_code)]
fn with_cx<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let waker = match WAKER.get() {
        // SAFETY: the pointer is set only by a `Resuming`, which borrows the waker for its
        // whole life and takes the pointer away when dropped; both of its users keep it on
        // their stack across the resume, the only time a cosocket step runs.
        Some(waker) => unsafe { waker.as_ref() },
        None => Waker::noop(),
    };
    f(&mut Context::from_waker(waker))
}

/// Makes what `make` makes (a string of at most [`UNGUARDED_MAX`] bytes, a socket) with the
/// VM's memory limit lifted. Under a limit mlua makes each Lua object in a protected call
/// (two new C functions and a `pcall`: about 1,000 instructions, more than the rest of a
/// `receive`); the limit can then be passed by that much (and by what a `__gc` metamethod
/// the collector runs meanwhile makes).
fn unguarded<R>(lua: &Lua, make: impl FnOnce() -> R) -> R {
    struct Restore<'l>(&'l Lua, usize);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let _ = self.0.set_memory_limit(self.1);
        }
    }
    let _restore = lua
        .set_memory_limit(0)
        .ok()
        .map(|limit| Restore(lua, limit));
    make()
}

/// The largest string [`unguarded`] makes: one read's worth.
const UNGUARDED_MAX: usize = READ_CHUNK;

/// `bytes` as a Lua string (made [`unguarded`] when small).
fn lua_string(lua: &Lua, bytes: &[u8]) -> mlua::Result<Value> {
    let made = match bytes.len() <= UNGUARDED_MAX {
        true => unguarded(lua, || lua.create_string(bytes)),
        false => lua.create_string(bytes),
    };
    made.map(Value::String)
}

/// While alive, cosockets are disabled, as nginx disables them in `context`.
pub(super) struct CosocketsDisabled(Option<&'static str>);

impl CosocketsDisabled {
    pub fn enter(context: &'static str) -> CosocketsDisabled {
        CosocketsDisabled(DISABLED_IN.replace(Some(context)))
    }
}

impl Drop for CosocketsDisabled {
    fn drop(&mut self) {
        DISABLED_IN.set(self.0);
    }
}

/// The context cosockets are disabled in now (`init_by_lua*`, say), if they are.
pub(super) fn disabled_in() -> Option<&'static str> {
    DISABLED_IN.get()
}

/// The error a cosocket call raises where nginx disables the API.
pub(super) fn disabled() -> mlua::Result<()> {
    match DISABLED_IN.get() {
        Some(context) => Err(mlua::Error::runtime(format!(
            "API disabled in the context of {context}"
        ))),
        None => Ok(()),
    }
}

/// A socket object (`ngx.socket.tcp()`).
struct TcpSocket {
    /// Boxed: a step takes it out and puts it back, moving a pointer only.
    conn: RefCell<Option<Box<Conn>>>,
    /// The pool key it was connected with (`setkeepalive` puts it back there).
    key: RefCell<Option<Rc<[u8]>>>,
    connect_timeout: Cell<Duration>,
    send_timeout: Cell<Duration>,
    read_timeout: Cell<Duration>,
    /// The local address `bind` asked for: a new TCP connection starts from it.
    local: Cell<Option<IpAddr>>,
    /// What a `send` that had to wait has still to write.
    unsent: RefCell<Unsent>,
}

/// The rest of a `send` that had to wait, and how long it is in all.
#[derive(Default)]
struct Unsent {
    bytes: Vec<u8>,
    total: usize,
}

impl TcpSocket {
    fn new() -> TcpSocket {
        TcpSocket {
            conn: RefCell::new(None),
            key: RefCell::new(None),
            connect_timeout: Cell::new(DEFAULT_TIMEOUT),
            send_timeout: Cell::new(DEFAULT_TIMEOUT),
            read_timeout: Cell::new(DEFAULT_TIMEOUT),
            local: Cell::new(None),
            unsent: RefCell::default(),
        }
    }

    /// The connection, taken for an operation (put back by [`TcpSocket::put`] unless the
    /// operation's error closed it).
    fn take(&self) -> Option<Box<Conn>> {
        self.conn.borrow_mut().take()
    }

    /// The connection, for a read: none once its reading part is over.
    fn take_readable(&self) -> Option<Box<Conn>> {
        let mut slot = self.conn.borrow_mut();
        match slot.as_ref() {
            Some(conn) if !conn.read_closed => slot.take(),
            _ => None,
        }
    }

    fn put(&self, conn: Box<Conn>) {
        *self.conn.borrow_mut() = Some(conn);
    }
}

/// A call's values as nginx gives them: the value, or (`Err`) `nil` and the error.
type Answer<T> = Result<T, String>;

/// What a step answers its Lua half: how many of the values are the call's (0: wait, then
/// call the step again), and the values. A fixed tuple, so no list is made per call.
type Step = (u8, Value, Value, Value);

fn wait() -> Step {
    (0, Value::Nil, Value::Nil, Value::Nil)
}

fn done(value: Value) -> Step {
    (1, value, Value::Nil, Value::Nil)
}

/// `nil, err`.
fn fail(lua: &Lua, err: &str) -> mlua::Result<Step> {
    Ok((2, Value::Nil, lua_string(lua, err.as_bytes())?, Value::Nil))
}

/// `nil, err, partial`.
fn fail_partial(lua: &Lua, err: &str, partial: &[u8]) -> mlua::Result<Step> {
    let err = lua_string(lua, err.as_bytes())?;
    Ok((3, Value::Nil, err, lua_string(lua, partial)?))
}

/// An I/O error as nginx words it: the system's message in lower case
/// (`connection refused`), `closed` for a connection the peer ended.
pub(super) fn error_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_lowercase(),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => "closed".to_string(),
        None => e.to_string(),
    }
}

/// Why a wait under a deadline ended without its result.
pub(super) enum Waited {
    Timeout,
    /// The timer itself failed.
    Timer(std::io::Error),
}

impl Waited {
    /// The error as the script sees it.
    pub(super) fn text(&self) -> String {
        match self {
            Waited::Timeout => "timeout".to_string(),
            Waited::Timer(e) => format!("timer: {e}"),
        }
    }
}

/// `op` under `limit`, on `timer` (for the operations that stay futures: a new connection,
/// a TLS handshake).
pub(super) async fn within<T>(
    timer: &mut Timer,
    limit: Duration,
    op: impl Future<Output = T>,
) -> Result<T, Waited> {
    timer.reset();
    let mut op = pin!(op);
    poll_fn(|cx| {
        if let Poll::Ready(done) = op.as_mut().poll(cx) {
            return Poll::Ready(Ok(done));
        }
        timer.poll_expired(limit, cx).map(Err)
    })
    .await
}

/// Reads more into `conn`'s buffer without waiting: the bytes read, the error's text
/// (`closed` at the end of the stream, `timeout` past the deadline), or pending, the task to
/// be woken when there is more or the deadline passes.
fn poll_fill(
    conn: &mut Conn,
    limit: Duration,
    cx: &mut Context<'_>,
) -> Poll<Result<usize, String>> {
    conn.buf.reserve(READ_CHUNK);
    match tokio_util::io::poll_read_buf(Pin::new(&mut conn.io), cx, &mut conn.buf) {
        Poll::Ready(Ok(0)) => Poll::Ready(Err("closed".to_string())),
        Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
        Poll::Ready(Err(e)) => Poll::Ready(Err(error_text(&e))),
        Poll::Pending => conn.timer.poll_expired(limit, cx).map(|w| Err(w.text())),
    }
}

/// Reads into `conn`'s buffer, without waiting, until `find` finds what is asked for in it:
/// what it found, the error's text, or pending as [`poll_fill`].
fn poll_find<T>(
    conn: &mut Conn,
    limit: Duration,
    find: impl Fn(&[u8]) -> Option<T>,
) -> Poll<Result<T, String>> {
    with_cx(|cx| loop {
        if let Some(found) = find(&conn.buf) {
            return Poll::Ready(Ok(found));
        }
        match poll_fill(conn, limit, cx) {
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    })
}

/// Writes `bytes[*sent..]` and flushes without waiting, counting in `sent`: done, the
/// error's text, or pending as [`poll_fill`].
fn poll_write_all(
    conn: &mut Conn,
    bytes: &[u8],
    sent: &mut usize,
    limit: Duration,
) -> Poll<Result<(), String>> {
    with_cx(|cx| loop {
        let wrote = match bytes.get(*sent..) {
            Some(rest) if !rest.is_empty() => Pin::new(&mut conn.io).poll_write(cx, rest),
            _ => match Pin::new(&mut conn.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(error_text(&e))),
                Poll::Pending => Poll::Pending,
            },
        };
        match wrote {
            Poll::Ready(Ok(0)) => {
                return Poll::Ready(Err(error_text(&std::io::ErrorKind::WriteZero.into())))
            }
            Poll::Ready(Ok(n)) => *sent += n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(error_text(&e))),
            Poll::Pending => return conn.timer.poll_expired(limit, cx).map(|w| Err(w.text())),
        }
    })
}

/// What `receive` reads.
enum Pattern {
    /// `*l` (the default): a line, without its LF and any CR.
    Line,
    /// `*a`: everything up to the end of the stream.
    All,
    /// A number: exactly that many bytes.
    Bytes(usize),
}

impl Pattern {
    fn from_lua(arg: Option<Value>) -> mlua::Result<Pattern> {
        let bad = || mlua::Error::runtime("bad argument #2 to 'receive' (bad pattern argument)");
        let text = match arg {
            None | Some(Value::Nil) => return Ok(Pattern::Line),
            Some(Value::Integer(n)) => return Ok(Pattern::Bytes(n.max(0) as usize)),
            Some(Value::Number(n)) => return Ok(Pattern::Bytes(n.max(0.0) as usize)),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(mlua::Error::runtime(format!(
                    "bad argument #2 to 'receive' (string expected, got {})",
                    other.type_name()
                )))
            }
        };
        let text = text.as_bytes();
        // `*l` and `*a` are not numbers: look for them first, without a copy.
        match text.get(..2) {
            Some(b"*l") => return Ok(Pattern::Line),
            Some(b"*a") => return Ok(Pattern::All),
            _ => {}
        }
        let number = std::str::from_utf8(&text).map_err(|_| bad())?;
        match number.trim().parse::<f64>() {
            Ok(n) => Ok(Pattern::Bytes(n.max(0.0) as usize)),
            Err(_) => Err(bad()),
        }
    }

    /// Where what the pattern asks for ends in `buf`, if it is there: the bytes taken from
    /// the buffer (a line's with its LF).
    fn find(&self, buf: &[u8]) -> Option<usize> {
        match self {
            Pattern::Line => memchr::memchr(b'\n', buf).map(|at| at + 1),
            Pattern::Bytes(n) if buf.len() >= *n => Some(*n),
            _ => None,
        }
    }
}

/// `line` without its CRs (lua-nginx-module's `*l` ignores every CR).
fn without_cr(line: &[u8]) -> Vec<u8> {
    line.iter().copied().filter(|&b| b != b'\r').collect()
}

/// The first `len` bytes of `buf` as `pattern` returns them (a line without its CRs), taken
/// from the buffer.
fn take_found(lua: &Lua, buf: &mut BytesMut, pattern: &Pattern, len: usize) -> mlua::Result<Value> {
    let piece = &buf[..len];
    let text = match pattern {
        Pattern::Line => {
            let line = &piece[..len - 1];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // The usual line (CRLF or LF, no other CR) goes out as it is.
            match memchr::memchr(b'\r', line) {
                None => lua_string(lua, line)?,
                Some(_) => lua_string(lua, &without_cr(&piece[..len - 1]))?,
            }
        }
        _ => lua_string(lua, piece)?,
    };
    buf.advance(len);
    Ok(text)
}

/// `receive(pattern)`'s step.
fn receive_step(
    lua: &Lua,
    (sock, ptr, first, arg): (Value, LightUserData, bool, Option<Value>),
) -> mlua::Result<Step> {
    disabled()?;
    let socket = socket_ref(&sock, ptr);
    let pattern = Pattern::from_lua(arg)?;
    let Some(mut conn) = socket.take_readable() else {
        return fail(lua, "closed");
    };
    if first {
        conn.timer.reset();
    }
    let limit = socket.read_timeout.get();
    let read = poll_find(&mut conn, limit, |buf| pattern.find(buf));
    let step = match read {
        Poll::Pending => Ok(wait()),
        Poll::Ready(Ok(len)) => take_found(lua, &mut conn.buf, &pattern, len).map(done),
        Poll::Ready(Err(e)) => {
            let partial = conn.buf.split();
            match (&pattern, e.as_str()) {
                (Pattern::All, "closed") => lua_string(lua, &partial).map(done),
                (pattern, _) => {
                    conn.read_closed |= e != "timeout";
                    match pattern {
                        Pattern::Line => fail_partial(lua, &e, &without_cr(&partial)),
                        _ => fail_partial(lua, &e, &partial),
                    }
                }
            }
        }
    };
    socket.put(conn);
    step
}

/// `receiveany(max)`'s step: what is read already, or what the next read brings, up to
/// `max` bytes.
fn receiveany_step(
    lua: &Lua,
    (sock, ptr, first, max): (Value, LightUserData, bool, i64),
) -> mlua::Result<Step> {
    disabled()?;
    let socket = socket_ref(&sock, ptr);
    // As nginx: a closed socket answers so before its argument is looked at.
    let Some(mut conn) = socket.take_readable() else {
        return fail(lua, "closed");
    };
    if max <= 0 {
        socket.put(conn);
        return Err(mlua::Error::runtime(
            "bad argument #2 to 'receiveany' (bad max argument)",
        ));
    }
    if first {
        conn.timer.reset();
    }
    if conn.buf.is_empty() {
        let limit = socket.read_timeout.get();
        match with_cx(|cx| poll_fill(&mut conn, limit, cx)) {
            Poll::Pending => {
                socket.put(conn);
                return Ok(wait());
            }
            Poll::Ready(Err(e)) => {
                conn.read_closed |= e != "timeout";
                socket.put(conn);
                return fail(lua, &e);
            }
            Poll::Ready(Ok(_)) => {}
        }
    }
    let len = conn.buf.len().min(max as usize);
    let data = lua_string(lua, &conn.buf[..len]);
    conn.buf.advance(len);
    socket.put(conn);
    Ok(done(data?))
}

/// A `receiveuntil` iterator's pattern and state.
struct Until {
    pattern: Vec<u8>,
    inclusive: bool,
    /// The last call (with a size) returned the data before the pattern: the next returns
    /// `nil` and starts over.
    found: Cell<bool>,
}

impl UserData for Until {}

/// What a `receiveuntil` call takes from the buffer: `take` bytes returned, then `skip`
/// (the pattern) dropped; `found` when that ends a sized read.
struct Piece {
    take: usize,
    skip: usize,
    found: bool,
}

/// One call of a `receiveuntil` iterator on the bytes buffered: with `size`, at most about
/// that many bytes before the pattern; without, all the data before it (and the pattern
/// itself when `inclusive`); `None` until enough is buffered.
fn until_piece(buf: &[u8], until: &Until, size: Option<usize>) -> Option<Piece> {
    let pattern = &until.pattern[..];
    if let Some(at) = memchr::memmem::find(buf, pattern) {
        let end = at + pattern.len();
        let data_end = if until.inclusive { end } else { at };
        return Some(match size {
            // As nginx: a full piece while at least `size` bytes precede the pattern, then
            // the rest (empty, maybe) with the pattern consumed, then `nil`.
            Some(size) if data_end >= size.max(1) => Piece {
                take: size.max(1),
                skip: 0,
                found: false,
            },
            Some(_) => Piece {
                take: data_end,
                skip: end - data_end,
                found: true,
            },
            None => Piece {
                take: data_end,
                skip: end - data_end,
                found: false,
            },
        });
    }
    // Bytes that cannot begin the pattern may go out in `size` pieces already.
    let safe = buf.len().saturating_sub(pattern.len().saturating_sub(1));
    match size {
        Some(size) if !until.inclusive && safe >= size.max(1) => Some(Piece {
            take: size.max(1),
            skip: 0,
            found: false,
        }),
        _ => None,
    }
}

/// A `receiveuntil` iterator call's step.
fn until_step(
    lua: &Lua,
    (sock, ptr, first, until, size): (Value, LightUserData, bool, UserDataRef<Until>, Option<i64>),
) -> mlua::Result<Step> {
    disabled()?;
    let socket = socket_ref(&sock, ptr);
    let Some(mut conn) = socket.take_readable() else {
        return fail(lua, "closed");
    };
    if first {
        if until.found.replace(false) {
            socket.put(conn);
            return Ok((2, Value::Nil, Value::Nil, Value::Nil));
        }
        conn.timer.reset();
    }
    let size = size.map(|s| s.max(0) as usize);
    let limit = socket.read_timeout.get();
    let read = poll_find(&mut conn, limit, |buf| until_piece(buf, &until, size));
    let step = match read {
        Poll::Pending => Ok(wait()),
        Poll::Ready(Ok(piece)) => {
            let data = lua_string(lua, &conn.buf[..piece.take]);
            conn.buf.advance(piece.take + piece.skip);
            until.found.set(piece.found);
            data.map(done)
        }
        Poll::Ready(Err(e)) => {
            conn.read_closed |= e != "timeout";
            let partial = conn.buf.split();
            fail_partial(lua, &e, &partial)
        }
    };
    socket.put(conn);
    step
}

/// `receiveuntil(pattern, options)`: the state of the iterator its Lua half makes.
fn until_state(
    _: &Lua,
    (_sock, _ptr, pattern, options): (Value, LightUserData, Value, Value),
) -> mlua::Result<Until> {
    let Value::String(pattern) = pattern else {
        return Err(mlua::Error::runtime(
            "bad argument #2 to 'receiveuntil' (string expected)",
        ));
    };
    let pattern = pattern.as_bytes().to_vec();
    if pattern.is_empty() {
        return Err(mlua::Error::runtime(
            "bad argument #2 to 'receiveuntil' (pattern is empty)",
        ));
    }
    let inclusive = match options {
        Value::Table(options) => options.get::<Option<bool>>("inclusive")?.unwrap_or(false),
        _ => false,
    };
    Ok(Until {
        pattern,
        inclusive,
        found: Cell::new(false),
    })
}

/// The bytes of `send`'s argument: a string, a number, or an array of them (nested).
pub(super) fn flatten(value: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::String(s) => out.extend_from_slice(&s.as_bytes()),
        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Number(n) => out.extend_from_slice(super::ngx_util::format_number(*n).as_bytes()),
        Value::Table(t) => {
            for item in t.sequence_values::<Value>() {
                flatten(&item?, out)?;
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument #1 to 'send' (bad data type {} found)",
                other.type_name()
            )))
        }
    }
    Ok(())
}

/// `send(data)`'s step. The first writes from the script's string itself (its Lua half
/// joins a flat table into one); only what had to wait is copied, to go on from.
fn send_step(
    lua: &Lua,
    (sock, ptr, first, data): (Value, LightUserData, bool, Value),
) -> mlua::Result<Step> {
    disabled()?;
    let socket = socket_ref(&sock, ptr);
    let limit = socket.send_timeout.get();
    if !first {
        let Some(mut conn) = socket.take() else {
            return fail(lua, "closed");
        };
        let mut unsent = socket.unsent.borrow_mut();
        let mut sent = 0;
        let wrote = poll_write_all(&mut conn, &unsent.bytes, &mut sent, limit);
        unsent.bytes.drain(..sent);
        return match wrote {
            Poll::Pending => {
                socket.put(conn);
                Ok(wait())
            }
            Poll::Ready(Ok(())) => {
                socket.put(conn);
                Ok(done(Value::Integer(unsent.total as i64)))
            }
            // Any failure to send closes the connection, as in nginx.
            Poll::Ready(Err(e)) => fail(lua, &e),
        };
    }
    SCRATCH.with_borrow_mut(|(_, flat)| {
        let string;
        let bytes: &[u8] = match &data {
            Value::String(s) => {
                string = s.as_bytes();
                &string
            }
            other => {
                flat.clear();
                flatten(other, flat)?;
                flat
            }
        };
        match send_first(socket, bytes) {
            Poll::Pending => Ok(wait()),
            Poll::Ready(Ok(len)) => Ok(done(Value::Integer(len as i64))),
            Poll::Ready(Err(e)) => fail(lua, &e),
        }
    })
}

/// A `send`'s first write of `bytes`: done (its length), the error's text (the connection is
/// then closed, as nginx closes it on any failure to send), or pending, with what is left kept
/// to go on from.
fn send_first(socket: &TcpSocket, bytes: &[u8]) -> Poll<Result<usize, String>> {
    let Some(mut conn) = socket.take() else {
        return Poll::Ready(Err("closed".to_string()));
    };
    conn.timer.reset();
    let mut sent = 0;
    match poll_write_all(&mut conn, bytes, &mut sent, socket.send_timeout.get()) {
        Poll::Pending => {
            let mut unsent = socket.unsent.borrow_mut();
            unsent.bytes.clear();
            unsent.bytes.extend_from_slice(&bytes[sent..]);
            unsent.total = bytes.len();
            drop(unsent);
            socket.put(conn);
            Poll::Pending
        }
        Poll::Ready(Ok(())) => {
            socket.put(conn);
            Poll::Ready(Ok(bytes.len()))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
    }
}

impl Pool {
    /// An idle connection the peer has not closed, if there is one.
    fn checkout(&mut self, now: Instant) -> Option<Box<Conn>> {
        while let Some(mut idle) = self.idle.pop_back() {
            if idle.usable(now) {
                idle.conn.reused += 1;
                return Some(idle.conn);
            }
        }
        None
    }
}

impl Idle {
    /// Whether the connection may serve again: not past its idle timeout, and nothing
    /// readable on it (its end, or stray bytes, make it unusable).
    fn usable(&self, now: Instant) -> bool {
        if self.expires.is_some_and(|at| at <= now) {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(
            self.conn.io.try_read(&mut probe),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        )
    }
}

/// How often the worker's pools are swept while they hold connections.
const POOL_SWEEP: Duration = Duration::from_secs(1);

/// Closes, every [`POOL_SWEEP`], the idle connections past their timeout or closed by their
/// peer (nginx watches each one; a sweep costs a `recv` a connection); ends once the pools
/// are empty, and starts again with the next connection pooled.
async fn sweep_pools() {
    let ticker = match Ticker::new(POOL_SWEEP) {
        Ok(ticker) => ticker,
        Err(e) => {
            crate::log_error!("lua: the cosocket pool cannot sweep: {e}");
            return;
        }
    };
    loop {
        if ticker.tick().await.is_err() {
            return;
        }
        let now = Instant::now();
        let empty = POOLS.with_borrow_mut(|pools| {
            for pool in pools.values_mut() {
                pool.idle.retain(|i| i.usable(now));
            }
            pools.retain(|_, pool| !pool.idle.is_empty());
            pools.is_empty()
        });
        if empty {
            SWEEPING.set(false);
            return;
        }
    }
}

/// Puts `conn` into pool `key`, evicting the longest idle when the pool holds `size`.
fn check_in(key: Rc<[u8]>, conn: Box<Conn>, idle_for: Option<Duration>, size: usize) {
    let now = Instant::now();
    POOLS.with_borrow_mut(|pools| {
        let pool = pools.entry(key.clone()).or_insert_with(|| Pool {
            key,
            idle: VecDeque::new(),
        });
        pool.idle.retain(|i| i.expires.is_none_or(|at| at > now));
        while pool.idle.len() >= size.max(1) {
            pool.idle.pop_front();
        }
        pool.idle.push_back(Idle {
            conn,
            expires: idle_for.map(|d| now + d),
        });
    });
    if !SWEEPING.replace(true) {
        tokio::task::spawn_local(sweep_pools());
    }
}

/// Makes `socket` belong to pool `key` (the key the pool has, if it exists: no new string)
/// and takes an idle connection from it, if there is one.
fn join_pool(socket: &TcpSocket, key: &[u8]) -> Option<Box<Conn>> {
    POOLS.with_borrow_mut(|pools| match pools.get_mut(key) {
        Some(pool) => {
            *socket.key.borrow_mut() = Some(pool.key.clone());
            pool.checkout(Instant::now())
        }
        None => {
            *socket.key.borrow_mut() = Some(Rc::from(key));
            None
        }
    })
}

/// `connect`'s arguments: the host, the port (none for a unix socket path) and the `pool`
/// option, or (`Err`) the failure to answer.
#[allow(clippy::type_complexity)]
fn connect_args(
    host: &Value,
    second: &Value,
    third: &Value,
) -> mlua::Result<Result<(String, Option<u16>, Option<String>), String>> {
    let host = match host {
        Value::String(s) => s.to_str()?.to_string(),
        _ => {
            return Err(mlua::Error::runtime(
                "bad argument #1 to 'connect' (string expected)",
            ))
        }
    };
    let (port, options) = if host.starts_with("unix:") {
        (None, second)
    } else {
        let port = match second {
            Value::Integer(n) => *n,
            Value::Number(n) => *n as i64,
            Value::String(s) => s.to_str()?.trim().parse::<i64>().unwrap_or(-1),
            _ => {
                return Err(mlua::Error::runtime(
                    "bad argument #2 to 'connect' (number expected)",
                ))
            }
        };
        let Ok(port) = u16::try_from(port) else {
            return Ok(Err(format!("bad port number: {port}")));
        };
        (Some(port), third)
    };
    let named = match options {
        Value::Table(options) => options.get::<Option<String>>("pool")?,
        _ => None,
    };
    Ok(Ok((host, port, named)))
}

/// Makes `socket` belong to the pool of `host` and `port` (or the one `named`), closing the
/// connection it had, and takes an idle connection from that pool if there is one.
fn connect_target(
    socket: &TcpSocket,
    host: &str,
    port: Option<u16>,
    named: Option<&str>,
) -> Option<Box<Conn>> {
    // Connecting again closes the connection the object had.
    drop(socket.take());
    SCRATCH.with_borrow_mut(|(key, _)| {
        key.clear();
        match (named, port) {
            (Some(name), _) => key.extend_from_slice(name.as_bytes()),
            (None, Some(port)) => {
                key.extend_from_slice(host.as_bytes());
                key.push(b':');
                crate::http::codec::push_decimal(key, u64::from(port));
            }
            (None, None) => key.extend_from_slice(host.as_bytes()),
        }
        join_pool(socket, key)
    })
}

/// `connect`'s step: done when the pool has a connection; else 0, and the Lua half calls
/// [`connect`], which opens one.
fn connect_step(
    lua: &Lua,
    (sock, ptr, host, second, third): (Value, LightUserData, Value, Value, Value),
) -> mlua::Result<Step> {
    disabled()?;
    let socket = socket_ref(&sock, ptr);
    let (host, port, named) = match connect_args(&host, &second, &third)? {
        Err(e) => return fail(lua, &e),
        Ok(args) => args,
    };
    match connect_target(socket, &host, port, named.as_deref()) {
        Some(conn) => {
            socket.put(conn);
            Ok(done(Value::Integer(1)))
        }
        None => Ok(wait()),
    }
}

/// The address of `host`: a literal IP as it is, a name resolved on tokio's blocking pool
/// (the worker's event loop never waits for the resolver).
pub(super) async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let found = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|e| format!("{host} could not be resolved ({e})"))?
        .next();
    found.ok_or_else(|| format!("{host} could not be resolved (no address)"))
}

async fn connect(
    _: Lua,
    (sock, ptr, host, second, third): (Value, LightUserData, Value, Value, Value),
) -> mlua::Result<Answer<i64>> {
    disabled()?;
    // `sock`, held by this future, keeps the socket alive across its waits.
    let socket = socket_ref(&sock, ptr);
    let (host, port, named) = match connect_args(&host, &second, &third)? {
        Err(e) => return Ok(Err(e)),
        Ok(args) => args,
    };
    if let Some(conn) = connect_target(socket, &host, port, named.as_deref()) {
        socket.put(conn);
        return Ok(Ok(1));
    }
    let limit = socket.connect_timeout.get();
    let mut timer = Timer::default();
    let connected = match port {
        None => {
            let path = host.trim_start_matches("unix:");
            within(&mut timer, limit, UnixStream::connect(path))
                .await
                .map(|done| done.map(Stream::Unix))
        }
        Some(port) => {
            let addr = match resolve(&host, port).await {
                Ok(addr) => addr,
                Err(e) => return Ok(Err(e)),
            };
            within(&mut timer, limit, connect_from(socket.local.get(), addr))
                .await
                .map(|done| {
                    done.map(|stream| {
                        let _ = stream.set_nodelay(true);
                        Stream::Net(UpstreamIo::Plain(stream))
                    })
                })
        }
    };
    match connected {
        Ok(Ok(io)) => {
            socket.put(Box::new(Conn {
                io,
                buf: BytesMut::new(),
                timer,
                reused: 0,
                read_closed: false,
            }));
            Ok(Ok(1))
        }
        Ok(Err(e)) => Ok(Err(error_text(&e))),
        Err(waited) => Ok(Err(waited.text())),
    }
}

/// A TCP connection to `addr`, from the local address `local` when a script bound one (the
/// socket is made for the peer's family, as nginx makes it: an IPv6 `local` to an IPv4 peer
/// fails with "address family not supported by protocol").
async fn connect_from(local: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let Some(local) = local else {
        return TcpStream::connect(addr).await;
    };
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(local, 0))?;
    socket.connect(addr).await
}

/// `tcpsock:bind(address)`: the local IP address the next connection it opens starts from
/// (lua-nginx-module 0.10.23's answers: `1`, or `nil, "bad address"` for anything but an IP
/// address; a connection taken from the pool keeps its own).
fn bind(
    lua: &Lua,
    (sock, ptr, args): (Value, LightUserData, mlua::MultiValue),
) -> mlua::Result<(Value, Option<&'static str>)> {
    if args.len() != 1 {
        return Err(mlua::Error::runtime(format!(
            "expecting 2 arguments, but got {}",
            args.len() + 1
        )));
    }
    // A number is taken as its text, as `luaL_checklstring` takes it.
    let text = match &args[0] {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => {
            lua.coerce_string(args[0].clone())?
        }
        _ => None,
    };
    let Some(text) = text else {
        return Err(mlua::Error::runtime(format!(
            "bad argument #2 to 'bind' (string expected, got {})",
            args[0].type_name()
        )));
    };
    let Ok(ip) = text.to_str()?.parse::<IpAddr>() else {
        return Ok((Value::Nil, Some("bad address")));
    };
    socket_ref(&sock, ptr).local.set(Some(ip));
    Ok((Value::Boolean(true), None))
}

/// The TLS client settings `sslhandshake` uses: the system's roots, or none checked.
fn tls_config(verify: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    thread_local! {
        static CONFIGS: RefCell<[Option<Arc<rustls::ClientConfig>>; 2]> = RefCell::default();
    }
    if let Some(config) = CONFIGS.with_borrow(|c| c[usize::from(verify)].clone()) {
        return Ok(config);
    }
    let settings = weir_config::UpstreamTls {
        ca: None,
        server_name: None,
        insecure_skip_verify: !verify,
        certificate: None,
        pos: Default::default(),
    };
    let http = crate::listen::tls::client_config(&settings, weir_config::UpstreamProtocol::Http1)?;
    let mut plain = (*http).clone();
    plain.alpn_protocols.clear();
    let config = Arc::new(plain);
    CONFIGS.with_borrow_mut(|c| c[usize::from(verify)] = Some(config.clone()));
    Ok(config)
}

#[allow(clippy::type_complexity)]
async fn sslhandshake(
    _: Lua,
    (sock, ptr, reused_session, server_name, verify): (
        Value,
        LightUserData,
        Value,
        Option<String>,
        Option<bool>,
    ),
) -> mlua::Result<Answer<bool>> {
    disabled()?;
    // `sock`, held by this future, keeps the socket alive across its waits.
    let socket = socket_ref(&sock, ptr);
    let Some(conn) = socket.take() else {
        return Ok(Err("closed".to_string()));
    };
    if matches!(conn.io, Stream::Net(UpstreamIo::Tls(_))) {
        // Already TLS (a pooled connection): nothing to do.
        socket.put(conn);
        return Ok(Ok(true));
    }
    let Conn {
        io,
        buf,
        mut timer,
        reused,
        read_closed,
    } = *conn;
    let stream = match io {
        Stream::Net(UpstreamIo::Plain(stream)) => stream,
        // TLS over a unix domain socket: not in weir (the connection is closed).
        _ => {
            return Ok(Err(
                "sslhandshake over a unix domain socket is not supported by weir".to_string(),
            ))
        }
    };
    let config = match tls_config(verify.unwrap_or(false)) {
        Ok(config) => config,
        Err(e) => return Ok(Err(e)),
    };
    let name = match &server_name {
        Some(name) => rustls::pki_types::ServerName::try_from(name.clone()),
        None => stream
            .peer_addr()
            .map_err(|_| ())
            .map(|addr| rustls::pki_types::ServerName::IpAddress(addr.ip().into()))
            .or_else(|()| rustls::pki_types::ServerName::try_from("localhost".to_string())),
    };
    let Ok(name) = name else {
        return Ok(Err("bad server name".to_string()));
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    let limit = socket.connect_timeout.get();
    match within(&mut timer, limit, connector.connect(name, stream)).await {
        Ok(Ok(session)) => {
            socket.put(Box::new(Conn {
                io: Stream::Net(UpstreamIo::Tls(Box::new(session))),
                buf,
                timer,
                reused,
                read_closed,
            }));
            // nginx answers a session object to pass back as `reused_session`; weir does
            // not resume sessions, so `true` stands for it.
            let _ = reused_session;
            Ok(Ok(true))
        }
        Ok(Err(e)) => Ok(Err(format!("handshake failed: {e}"))),
        Err(Waited::Timeout) => Ok(Err("timeout".to_string())),
        Err(Waited::Timer(e)) => Ok(Err(format!("timer: {e}"))),
    }
}

/// A timeout argument in milliseconds; 0 or none keeps lua-nginx-module's default.
pub(super) fn millis(value: Option<f64>) -> Duration {
    match value {
        Some(ms) if ms > 0.0 => Duration::from_secs_f64(ms / 1000.0),
        _ => DEFAULT_TIMEOUT,
    }
}

/// `setkeepalive(timeout, size)`: the connection into its pool, or why not.
fn keepalive(
    socket: &TcpSocket,
    timeout: Option<f64>,
    size: Option<i64>,
) -> Result<(), &'static str> {
    let Some(conn) = socket.take() else {
        return Err("closed");
    };
    if !conn.buf.is_empty() {
        return Err("unread data in buffer");
    }
    if conn.read_closed {
        return Err("closed");
    }
    let idle_for = match timeout {
        None => Some(DEFAULT_TIMEOUT),
        Some(ms) if ms <= 0.0 => None,
        Some(ms) => Some(Duration::from_secs_f64(ms / 1000.0)),
    };
    let size = size.map_or(DEFAULT_POOL_SIZE, |s| s.max(1) as usize);
    let key = socket
        .key
        .borrow()
        .clone()
        .unwrap_or_else(|| Rc::from(&b""[..]));
    check_in(key, conn, idle_for, size);
    Ok(())
}

/// `ngx.socket.tcp` and `ngx.socket.connect` on `ngx`, and the socket's methods: the hottest
/// against Lua's C API (`raw_tcp.rs`), each over its general version here for the arguments
/// it does not take itself; those that may wait are Lua halves over steps.
pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    use super::raw::c_closure;
    use mlua::Function;
    let socket = match ngx.get::<Option<Table>>("socket")? {
        Some(socket) => socket,
        None => lua.create_table()?,
    };
    let meta = lua.create_table()?;
    let methods = lua.create_table()?;
    meta.set("__index", &methods)?;
    // Hidden, so that no script calls `__gc` on a live socket.
    meta.set("__metatable", false)?;
    meta.set("__gc", c_closure(lua, raw_tcp::collect, &meta)?)?;
    // A raw method: the sockets' metatable is its upvalue 1 (to check its first argument),
    // its general version (if it has one) upvalue 2.
    let raw = |function: mlua::ffi::lua_CFunction, general: Option<Function>| match general {
        Some(general) => c_closure(lua, function, (&meta, general)),
        None => c_closure(lua, function, &meta),
    };
    // A socket, or where cosockets are disabled, `nil` and the context.
    let new_socket = raw(raw_tcp::new_socket, None)?;
    // In Lua, so that the refusal is the plain message nginx raises (not a Rust error value).
    let (tcp, shortcut): (Function, Function) =
        lua.load(TCP).set_name("=ngx.socket").call(new_socket)?;
    socket.set("tcp", tcp)?;
    socket.set("connect", shortcut)?;
    let settimeout =
        lua.create_function(|_, (sock, ptr, ms): (Value, LightUserData, Option<f64>)| {
            let socket = socket_ref(&sock, ptr);
            let limit = millis(ms);
            socket.connect_timeout.set(limit);
            socket.send_timeout.set(limit);
            socket.read_timeout.set(limit);
            Ok(())
        })?;
    methods.set("settimeout", raw(raw_tcp::settimeout, Some(settimeout))?)?;
    #[allow(clippy::type_complexity)]
    let settimeouts = lua.create_function(
        |_,
         (sock, ptr, connect, send, read): (
            Value,
            LightUserData,
            Option<f64>,
            Option<f64>,
            Option<f64>,
        )| {
            let socket = socket_ref(&sock, ptr);
            socket.connect_timeout.set(millis(connect));
            socket.send_timeout.set(millis(send));
            socket.read_timeout.set(millis(read));
            Ok(())
        },
    )?;
    methods.set("settimeouts", raw(raw_tcp::settimeouts, Some(settimeouts))?)?;
    #[allow(clippy::type_complexity)]
    let setkeepalive = lua.create_function(
        |_, (sock, ptr, timeout, size): (Value, LightUserData, Option<f64>, Option<i64>)| {
            disabled()?;
            Ok(keepalive(socket_ref(&sock, ptr), timeout, size).map(|()| 1))
        },
    )?;
    methods.set(
        "setkeepalive",
        raw(raw_tcp::setkeepalive, Some(setkeepalive))?,
    )?;
    methods.set("close", raw(raw_tcp::close, None)?)?;
    methods.set("getreusedtimes", raw(raw_tcp::getreusedtimes, None)?)?;
    let bind = lua.create_function(bind)?;
    methods.set("bind", raw(raw_tcp::checked, Some(bind))?)?;
    let steps = lua.create_table()?;
    let general = |step| Some(step);
    steps.set(
        "connect",
        raw(
            raw_tcp::connect,
            general(lua.create_function(connect_step)?),
        )?,
    )?;
    steps.set("connect_wait", lua.create_async_function(connect)?)?;
    steps.set("sslhandshake", lua.create_async_function(sslhandshake)?)?;
    steps.set("socket_of", raw(raw_tcp::socket_of, None)?)?;
    steps.set(
        "send",
        raw(raw_tcp::send, general(lua.create_function(send_step)?))?,
    )?;
    steps.set(
        "receive",
        raw(
            raw_tcp::receive,
            general(lua.create_function(receive_step)?),
        )?,
    )?;
    steps.set(
        "receiveany",
        raw(
            raw_tcp::checked,
            general(lua.create_function(receiveany_step)?),
        )?,
    )?;
    steps.set(
        "until_state",
        raw(raw_tcp::checked, general(lua.create_function(until_state)?))?,
    )?;
    steps.set(
        "until",
        raw(raw_tcp::checked, general(lua.create_function(until_step)?))?,
    )?;
    let pending = Value::LightUserData(Lua::poll_pending());
    lua.load(METHODS)
        .set_name("=ngx.socket")
        .call::<()>((methods, steps, pending.clone()))?;
    lua.load(NESTED_WAITS)
        .set_name("=coroutine")
        .call::<()>(pending)?;
    ngx.set("socket", socket)?;
    Ok(())
}

/// `ngx.socket.tcp` (refused where nginx disables cosockets) and `ngx.socket.connect`.
const TCP: &str = r#"
local new_socket = ...
local error = error
local function tcp()
  local sock, context = new_socket()
  if not sock then error("API disabled in the context of " .. context, 0) end
  return sock
end
local function connect(...)
  local sock = tcp()
  local ok, err = sock:connect(...)
  if not ok then return nil, err end
  return sock
end
return tcp, connect
"#;

/// The methods that may wait: each calls its Rust step, and while the step answers 0 (it
/// registered the task to wake), yields the "pending" marker to the coroutine's driver and
/// calls the step again once resumed. `send` joins a flat table here (as nginx does, with
/// Lua's number format), so that the step gets one string.
const METHODS: &str = r#"
local methods, steps, pending = ...
local yield, pcall, concat, type = coroutine.yield, pcall, table.concat, type
local connect_step, connect_wait = steps.connect, steps.connect_wait
local socket_of, sslhandshake = steps.socket_of, steps.sslhandshake
local send_step, receive_step, any_step = steps.send, steps.receive, steps.receiveany
local until_state, until_step = steps.until_state, steps["until"]
local function settle(n, a, b, c)
  if n == 1 then return a elseif n == 2 then return a, b end
  return a, b, c
end
local function waiting(step, sock, x, y)
  local n, a, b, c = step(sock, true, x, y)
  while n == 0 do
    yield(pending)
    n, a, b, c = step(sock, false, x, y)
  end
  return settle(n, a, b, c)
end
function methods.connect(sock, ...)
  local n, a, b = connect_step(sock, ...)
  if n == 0 then return connect_wait(sock, socket_of(sock), ...) end
  return settle(n, a, b)
end
function methods.sslhandshake(sock, ...)
  return sslhandshake(sock, socket_of(sock), ...)
end
function methods.send(sock, data)
  if type(data) == "table" then
    local ok, flat = pcall(concat, data)
    if ok then data = flat end
  end
  return waiting(send_step, sock, data)
end
function methods.receive(sock, pattern)
  return waiting(receive_step, sock, pattern)
end
function methods.receiveany(sock, max)
  return waiting(any_step, sock, max)
end
function methods.receiveuntil(sock, pattern, options)
  local state = until_state(sock, pattern, options)
  return function(size)
    return waiting(until_step, sock, state, size)
  end
end
"#;

/// `coroutine.resume` and `coroutine.wrap` passing a wait up: a cosocket (or `ngx.sleep`)
/// waiting in a coroutine the script made (lua-resty-http's body reader is one) yields the
/// "pending" marker to it; that goes on up to the request's coroutine, whose driver then
/// waits, and the inner coroutine is resumed when the outer one is.
const NESTED_WAITS: &str = r##"
local pending = ...
local resume, yield, status, create = coroutine.resume, coroutine.yield, coroutine.status, coroutine.create
local select, error = select, error
local function passed_up(co, ok, first, ...)
  if ok and first == pending and select("#", ...) == 0 and status(co) == "suspended" then
    yield(pending)
    return passed_up(co, resume(co))
  end
  return ok, first, ...
end
local function resume_passing_waits(co, ...)
  return passed_up(co, resume(co, ...))
end
local function raised(ok, ...)
  if not ok then error((...), 0) end
  return ...
end
coroutine.resume = resume_passing_waits
coroutine.wrap = function(f)
  local co = create(f)
  return function(...) return raised(resume_passing_waits(co, ...)) end
end
"##;
