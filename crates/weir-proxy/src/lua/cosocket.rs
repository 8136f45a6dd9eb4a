//! `ngx.socket.tcp` and `ngx.socket.connect` as lua-nginx-module's cosockets: `connect` (a
//! connection from this worker's keep-alive pool first), `sslhandshake` (rustls), `send`,
//! `receive`, `receiveany`, `receiveuntil`, the timeouts, `setkeepalive`, `getreusedtimes`, `close`. Every
//! wait yields the script's coroutine to the worker's event loop, under a timerfd that the
//! connection keeps (and takes into the pool) so that a wait costs one syscall to arm it; a
//! wait inside a coroutine the script made itself is passed up the same way.

use crate::io::ticker::Ticker;
use crate::io::upstream_io::UpstreamIo;
use bytes::{Bytes, BytesMut};
use mlua::{
    AnyUserData, Lua, MultiValue, Table, UserData, UserDataMethods, UserDataRef, Value, Variadic,
};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// lua-nginx-module's defaults: `lua_socket_connect_timeout`, `lua_socket_send_timeout`,
/// `lua_socket_read_timeout` and `lua_socket_keepalive_timeout` are 60s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
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

/// An open connection: its stream, bytes read and not yet returned, its timer.
struct Conn {
    io: Stream,
    buf: BytesMut,
    /// Made at the first wait that needs it, then re-armed for each wait.
    timer: Option<Ticker>,
    /// How many times it was taken from the pool (`getreusedtimes`).
    reused: u32,
    /// A read failed (other than by its timeout): reads answer `closed` from now on, while
    /// sends go on, as lua-nginx-module ends only the reading part then.
    read_closed: bool,
}

/// A connection at rest in the pool.
struct Idle {
    conn: Conn,
    /// When it stops being reusable (`None`: kept until evicted).
    expires: Option<Instant>,
}

thread_local! {
    /// This worker's keep-alive pools, by key (`host:port` or the `pool` option).
    static POOLS: RefCell<HashMap<String, VecDeque<Idle>>> = RefCell::default();
    /// Whether [`sweep_pools`] runs on this worker.
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
    /// The context a phase that may not wait runs in (`header_filter_by_lua*`), while it runs.
    static DISABLED_IN: Cell<Option<&'static str>> = const { Cell::new(None) };
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

/// The error a cosocket call raises where nginx disables the API.
fn disabled() -> mlua::Result<()> {
    match DISABLED_IN.get() {
        Some(context) => Err(mlua::Error::runtime(format!(
            "API disabled in the context of {context}"
        ))),
        None => Ok(()),
    }
}

/// A socket object (`ngx.socket.tcp()`).
struct TcpSocket {
    conn: RefCell<Option<Conn>>,
    /// The pool key it was connected with (`setkeepalive` puts it back there).
    key: RefCell<String>,
    connect_timeout: Cell<Duration>,
    send_timeout: Cell<Duration>,
    read_timeout: Cell<Duration>,
}

impl TcpSocket {
    fn new() -> TcpSocket {
        TcpSocket {
            conn: RefCell::new(None),
            key: RefCell::new(String::new()),
            connect_timeout: Cell::new(DEFAULT_TIMEOUT),
            send_timeout: Cell::new(DEFAULT_TIMEOUT),
            read_timeout: Cell::new(DEFAULT_TIMEOUT),
        }
    }

    /// The connection, taken for an operation (put back by [`TcpSocket::put`] unless the
    /// operation's error closed it).
    fn take(&self) -> Option<Conn> {
        self.conn.borrow_mut().take()
    }

    /// The connection, for a read: none once its reading part is over.
    fn take_readable(&self) -> Option<Conn> {
        let mut slot = self.conn.borrow_mut();
        match slot.as_ref() {
            Some(conn) if !conn.read_closed => slot.take(),
            _ => None,
        }
    }

    fn put(&self, conn: Conn) {
        *self.conn.borrow_mut() = Some(conn);
    }
}

/// A failed call's values: `nil, err` (and the partial data where there is some).
fn failure(lua: &Lua, err: &str, partial: Option<&[u8]>) -> mlua::Result<MultiValue> {
    let mut values = vec![Value::Nil, Value::String(lua.create_string(err)?)];
    if let Some(partial) = partial {
        values.push(Value::String(lua.create_string(partial)?));
    }
    Ok(MultiValue::from_iter(values))
}

fn success(value: impl mlua::IntoLua, lua: &Lua) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([value.into_lua(lua)?]))
}

/// An I/O error as nginx words it: the system's message in lower case
/// (`connection refused`), `closed` for a connection the peer ended.
fn error_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_lowercase(),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => "closed".to_string(),
        None => e.to_string(),
    }
}

/// Why a wait under a deadline ended without its result.
enum Waited {
    Timeout,
    /// The timer itself failed.
    Timer(std::io::Error),
}

/// `op` under `limit`. The timer is armed only when `op` has to wait, and kept in `timer` for
/// the connection's next wait.
async fn within<T>(
    timer: &mut Option<Ticker>,
    limit: Duration,
    op: impl Future<Output = T>,
) -> Result<T, Waited> {
    let mut op = pin!(op);
    if let Poll::Ready(done) = poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await {
        return Ok(done);
    }
    let ticker = match timer {
        Some(ticker) => {
            ticker.rearm_once(limit).map_err(Waited::Timer)?;
            &*ticker
        }
        None => &*timer.insert(Ticker::once(limit).map_err(Waited::Timer)?),
    };
    let mut tick = pin!(ticker.tick());
    poll_fn(|cx| {
        if let Poll::Ready(done) = op.as_mut().poll(cx) {
            return Poll::Ready(Ok(done));
        }
        match tick.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Err(Waited::Timeout)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(Waited::Timer(e))),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Reads more into `conn`'s buffer within `limit`: the bytes read, or the error's text
/// (`closed` at the end of the stream).
async fn fill(conn: &mut Conn, limit: Duration) -> Result<usize, String> {
    let Conn { io, buf, timer, .. } = conn;
    buf.reserve(READ_CHUNK);
    match within(timer, limit, io.read_buf(buf)).await {
        Ok(Ok(0)) => Err("closed".to_string()),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(error_text(&e)),
        Err(Waited::Timeout) => Err("timeout".to_string()),
        Err(Waited::Timer(e)) => Err(format!("timer: {e}")),
    }
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
        let text = match arg {
            None | Some(Value::Nil) => return Ok(Pattern::Line),
            Some(Value::Integer(n)) => return Ok(Pattern::Bytes(n.max(0) as usize)),
            Some(Value::Number(n)) => return Ok(Pattern::Bytes(n.max(0.0) as usize)),
            Some(Value::String(s)) => s.to_string_lossy(),
            Some(other) => {
                return Err(mlua::Error::runtime(format!(
                    "bad argument #2 to 'receive' (string expected, got {})",
                    other.type_name()
                )))
            }
        };
        if let Ok(n) = text.trim().parse::<f64>() {
            return Ok(Pattern::Bytes(n.max(0.0) as usize));
        }
        match text.as_bytes().get(..2) {
            Some(b"*l") => Ok(Pattern::Line),
            Some(b"*a") => Ok(Pattern::All),
            _ => Err(mlua::Error::runtime(
                "bad argument #2 to 'receive' (bad pattern argument)",
            )),
        }
    }
}

/// `line` without its CRs (lua-nginx-module's `*l` ignores every CR).
fn without_cr(line: &[u8]) -> Vec<u8> {
    line.iter().copied().filter(|&b| b != b'\r').collect()
}

/// Reads what `pattern` asks for: the data, or the error and the partial data read.
async fn receive(
    conn: &mut Conn,
    pattern: &Pattern,
    limit: Duration,
) -> Result<Bytes, (String, Bytes)> {
    loop {
        match pattern {
            Pattern::Line => {
                if let Some(at) = memchr::memchr(b'\n', &conn.buf) {
                    let line = conn.buf.split_to(at + 1).freeze();
                    let text = line[..at].strip_suffix(b"\r").unwrap_or(&line[..at]);
                    // The usual line (CRLF or LF, no other CR) goes out without a copy.
                    if memchr::memchr(b'\r', text).is_none() {
                        return Ok(line.slice(..text.len()));
                    }
                    return Ok(Bytes::from(without_cr(&line[..at])));
                }
            }
            Pattern::Bytes(n) if conn.buf.len() >= *n => {
                return Ok(conn.buf.split_to(*n).freeze());
            }
            _ => {}
        }
        if let Err(e) = fill(conn, limit).await {
            let partial = conn.buf.split().freeze();
            return match (pattern, e.as_str()) {
                (Pattern::All, "closed") => Ok(partial),
                (Pattern::Line, _) => Err((e, Bytes::from(without_cr(&partial)))),
                _ => Err((e, partial)),
            };
        }
    }
}

/// One call of a `receiveuntil` iterator: with `size`, at most about that many bytes before
/// the pattern, then `None` once the pattern has been read; without, all the data before
/// it (and the pattern itself when `inclusive`).
async fn receive_until(
    conn: &mut Conn,
    pattern: &[u8],
    inclusive: bool,
    size: Option<usize>,
    found: &Cell<bool>,
    limit: Duration,
) -> Result<Option<Bytes>, (String, Bytes)> {
    if found.replace(false) {
        return Ok(None);
    }
    loop {
        if let Some(at) = memchr::memmem::find(&conn.buf, pattern) {
            let end = at + pattern.len();
            let data_end = if inclusive { end } else { at };
            match size {
                // As nginx: a full piece while at least `size` bytes precede the pattern,
                // then the rest (empty, maybe) with the pattern consumed, then `nil`.
                Some(size) if data_end >= size.max(1) => {
                    return Ok(Some(conn.buf.split_to(size.max(1)).freeze()))
                }
                Some(_) => {
                    let data = conn.buf.split_to(data_end).freeze();
                    let _ = conn.buf.split_to(end - data_end);
                    found.set(true);
                    return Ok(Some(data));
                }
                None => {
                    let data = conn.buf.split_to(data_end).freeze();
                    let _ = conn.buf.split_to(end - data_end);
                    return Ok(Some(data));
                }
            }
        }
        // Bytes that cannot begin the pattern may go out in `size` pieces already.
        let safe = conn
            .buf
            .len()
            .saturating_sub(pattern.len().saturating_sub(1));
        if let Some(size) = size {
            if !inclusive && safe >= size.max(1) {
                return Ok(Some(conn.buf.split_to(size.max(1)).freeze()));
            }
        }
        if let Err(e) = fill(conn, limit).await {
            return Err((e, conn.buf.split().freeze()));
        }
    }
}

/// The bytes of `send`'s argument: a string, a number, or an array of them (nested).
fn flatten(value: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
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

/// An idle connection of pool `key` the peer has not closed, if there is one.
fn checkout(key: &str) -> Option<Conn> {
    let now = Instant::now();
    POOLS.with_borrow_mut(|pools| {
        let idle = pools.get_mut(key)?;
        while let Some(mut idle) = idle.pop_back() {
            if idle.usable(now) {
                idle.conn.reused += 1;
                return Some(idle.conn);
            }
        }
        None
    })
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
            for idle in pools.values_mut() {
                idle.retain(|i| i.usable(now));
            }
            pools.retain(|_, idle| !idle.is_empty());
            pools.is_empty()
        });
        if empty {
            SWEEPING.set(false);
            return;
        }
    }
}

/// Puts `conn` into pool `key`, evicting the longest idle when the pool holds `size`.
fn check_in(key: String, conn: Conn, idle_for: Option<Duration>, size: usize) {
    let now = Instant::now();
    POOLS.with_borrow_mut(|pools| {
        let idle = pools.entry(key).or_default();
        idle.retain(|i| i.expires.is_none_or(|at| at > now));
        while idle.len() >= size.max(1) {
            idle.pop_front();
        }
        idle.push_back(Idle {
            conn,
            expires: idle_for.map(|d| now + d),
        });
    });
    if !SWEEPING.replace(true) {
        tokio::task::spawn_local(sweep_pools());
    }
}

/// Where `connect`'s arguments point: a host and port, or a unix socket path.
fn pool_key(host: &str, port: Option<u16>) -> String {
    match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// The address of `host`: a literal IP as it is, a name resolved on tokio's blocking pool
/// (the worker's event loop never waits for the resolver).
async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
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
    lua: Lua,
    socket: UserDataRef<TcpSocket>,
    args: MultiValue,
) -> mlua::Result<MultiValue> {
    disabled()?;
    let args: Vec<Value> = args.into_iter().collect();
    let host = match args.first() {
        Some(Value::String(s)) => s.to_str()?.to_string(),
        _ => {
            return Err(mlua::Error::runtime(
                "bad argument #1 to 'connect' (string expected)",
            ))
        }
    };
    let (port, options) = if host.starts_with("unix:") {
        (None, args.get(1))
    } else {
        let port = match args.get(1) {
            Some(Value::Integer(n)) => *n,
            Some(Value::Number(n)) => *n as i64,
            Some(Value::String(s)) => s.to_str()?.trim().parse::<i64>().unwrap_or(-1),
            _ => {
                return Err(mlua::Error::runtime(
                    "bad argument #2 to 'connect' (number expected)",
                ))
            }
        };
        let Ok(port) = u16::try_from(port) else {
            return failure(&lua, &format!("bad port number: {port}"), None);
        };
        (Some(port), args.get(2))
    };
    let key = match options {
        Some(Value::Table(options)) => options
            .get::<Option<String>>("pool")?
            .unwrap_or_else(|| pool_key(&host, port)),
        _ => pool_key(&host, port),
    };
    // Connecting again closes the connection the object had.
    drop(socket.take());
    *socket.key.borrow_mut() = key.clone();
    if let Some(conn) = checkout(&key) {
        socket.put(conn);
        return success(1, &lua);
    }
    let limit = socket.connect_timeout.get();
    let mut timer = None;
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
                Err(e) => return failure(&lua, &e, None),
            };
            within(&mut timer, limit, TcpStream::connect(addr))
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
            socket.put(Conn {
                io,
                buf: BytesMut::new(),
                timer,
                reused: 0,
                read_closed: false,
            });
            success(1, &lua)
        }
        Ok(Err(e)) => failure(&lua, &error_text(&e), None),
        Err(Waited::Timeout) => failure(&lua, "timeout", None),
        Err(Waited::Timer(e)) => failure(&lua, &format!("timer: {e}"), None),
    }
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

async fn sslhandshake(
    lua: Lua,
    socket: UserDataRef<TcpSocket>,
    (reused_session, server_name, verify): (Value, Option<String>, Option<bool>),
) -> mlua::Result<MultiValue> {
    disabled()?;
    let Some(conn) = socket.take() else {
        return failure(&lua, "closed", None);
    };
    if matches!(conn.io, Stream::Net(UpstreamIo::Tls(_))) {
        // Already TLS (a pooled connection): nothing to do.
        socket.put(conn);
        return success(true, &lua);
    }
    let Conn {
        io,
        buf,
        mut timer,
        reused,
        read_closed,
    } = conn;
    let stream = match io {
        Stream::Net(UpstreamIo::Plain(stream)) => stream,
        // TLS over a unix domain socket: not in weir (the connection is closed).
        _ => {
            return failure(
                &lua,
                "sslhandshake over a unix domain socket is not supported by weir",
                None,
            )
        }
    };
    let config = match tls_config(verify.unwrap_or(false)) {
        Ok(config) => config,
        Err(e) => return failure(&lua, &e, None),
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
        return failure(&lua, "bad server name", None);
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    let limit = socket.connect_timeout.get();
    match within(&mut timer, limit, connector.connect(name, stream)).await {
        Ok(Ok(session)) => {
            socket.put(Conn {
                io: Stream::Net(UpstreamIo::Tls(Box::new(session))),
                buf,
                timer,
                reused,
                read_closed,
            });
            // nginx answers a session object to pass back as `reused_session`; weir does
            // not resume sessions, so `true` stands for it.
            let _ = reused_session;
            success(true, &lua)
        }
        Ok(Err(e)) => failure(&lua, &format!("handshake failed: {e}"), None),
        Err(Waited::Timeout) => failure(&lua, "timeout", None),
        Err(Waited::Timer(e)) => failure(&lua, &format!("timer: {e}"), None),
    }
}

async fn send(lua: Lua, socket: UserDataRef<TcpSocket>, data: Value) -> mlua::Result<MultiValue> {
    disabled()?;
    let mut bytes = Vec::new();
    flatten(&data, &mut bytes)?;
    let Some(mut conn) = socket.take() else {
        return failure(&lua, "closed", None);
    };
    let Conn { io, timer, .. } = &mut conn;
    let write = async {
        io.write_all(&bytes).await?;
        io.flush().await
    };
    // Any failure to send closes the connection, as in nginx.
    match within(timer, socket.send_timeout.get(), write).await {
        Ok(Ok(())) => {
            socket.put(conn);
            success(bytes.len() as i64, &lua)
        }
        Ok(Err(e)) => failure(&lua, &error_text(&e), None),
        Err(Waited::Timeout) => failure(&lua, "timeout", None),
        Err(Waited::Timer(e)) => failure(&lua, &format!("timer: {e}"), None),
    }
}

async fn receive_method(
    lua: Lua,
    socket: UserDataRef<TcpSocket>,
    arg: Option<Value>,
) -> mlua::Result<MultiValue> {
    disabled()?;
    let pattern = Pattern::from_lua(arg)?;
    let Some(mut conn) = socket.take_readable() else {
        return failure(&lua, "closed", None);
    };
    let result = receive(&mut conn, &pattern, socket.read_timeout.get()).await;
    finish_read(&lua, &socket, conn, result.map(Some))
}

/// `receiveany(max)`: what is read already, or what the next read brings, up to `max` bytes.
async fn receiveany(
    lua: Lua,
    socket: UserDataRef<TcpSocket>,
    max: i64,
) -> mlua::Result<MultiValue> {
    disabled()?;
    // As nginx: a closed socket answers so before its argument is looked at.
    let Some(mut conn) = socket.take_readable() else {
        return failure(&lua, "closed", None);
    };
    if max <= 0 {
        socket.put(conn);
        return Err(mlua::Error::runtime(
            "bad argument #2 to 'receiveany' (bad max argument)",
        ));
    }
    if conn.buf.is_empty() {
        if let Err(e) = fill(&mut conn, socket.read_timeout.get()).await {
            conn.read_closed |= e != "timeout";
            socket.put(conn);
            return failure(&lua, &e, None);
        }
    }
    let data = conn.buf.split_to(conn.buf.len().min(max as usize));
    socket.put(conn);
    success(lua.create_string(&data)?, &lua)
}

/// A read's values. After an error other than a timeout, the connection reads no more (its
/// reading part is over, as in lua-nginx-module) but stays for sends.
fn finish_read(
    lua: &Lua,
    socket: &TcpSocket,
    mut conn: Conn,
    result: Result<Option<Bytes>, (String, Bytes)>,
) -> mlua::Result<MultiValue> {
    let values = match result {
        Ok(Some(data)) => success(lua.create_string(&data)?, lua),
        Ok(None) => Ok(MultiValue::from_iter([Value::Nil, Value::Nil])),
        Err((e, partial)) => {
            conn.read_closed |= e != "timeout";
            failure(lua, &e, Some(&partial))
        }
    };
    socket.put(conn);
    values
}

/// `receiveuntil(pattern, options)`: the iterator reading up to `pattern`.
fn receiveuntil(
    lua: &Lua,
    socket: AnyUserData,
    (pattern, options): (mlua::String, Option<Table>),
) -> mlua::Result<mlua::Function> {
    let pattern = pattern.as_bytes().to_vec();
    if pattern.is_empty() {
        return Err(mlua::Error::runtime(
            "bad argument #2 to 'receiveuntil' (pattern is empty)",
        ));
    }
    let inclusive = match options {
        Some(options) => options.get::<Option<bool>>("inclusive")?.unwrap_or(false),
        None => false,
    };
    let found = Rc::new(Cell::new(false));
    lua.create_async_function(move |lua, size: Option<i64>| {
        let socket = socket.clone();
        let pattern = pattern.clone();
        let found = found.clone();
        async move {
            disabled()?;
            let socket = socket.borrow::<TcpSocket>()?;
            let Some(mut conn) = socket.take_readable() else {
                return failure(&lua, "closed", None);
            };
            let size = size.map(|s| s.max(0) as usize);
            let limit = socket.read_timeout.get();
            let result = receive_until(&mut conn, &pattern, inclusive, size, &found, limit).await;
            finish_read(&lua, &socket, conn, result)
        }
    })
}

/// A timeout argument in milliseconds; 0 or none keeps lua-nginx-module's default.
fn millis(value: Option<f64>) -> Duration {
    match value {
        Some(ms) if ms > 0.0 => Duration::from_secs_f64(ms / 1000.0),
        _ => DEFAULT_TIMEOUT,
    }
}

impl UserData for TcpSocket {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_async_method("connect", connect);
        methods.add_async_method("sslhandshake", sslhandshake);
        methods.add_async_method("send", send);
        methods.add_async_method("receive", receive_method);
        methods.add_async_method("receiveany", receiveany);
        methods.add_function(
            "receiveuntil",
            |lua, (socket, rest): (AnyUserData, Variadic<Value>)| {
                let mut rest = rest.into_iter();
                let pattern = match rest.next() {
                    Some(Value::String(s)) => s,
                    _ => {
                        return Err(mlua::Error::runtime(
                            "bad argument #2 to 'receiveuntil' (string expected)",
                        ))
                    }
                };
                let options = match rest.next() {
                    Some(Value::Table(t)) => Some(t),
                    _ => None,
                };
                receiveuntil(lua, socket, (pattern, options))
            },
        );
        methods.add_method("settimeout", |_, socket, ms: Option<f64>| {
            let limit = millis(ms);
            socket.connect_timeout.set(limit);
            socket.send_timeout.set(limit);
            socket.read_timeout.set(limit);
            Ok(())
        });
        methods.add_method(
            "settimeouts",
            |_, socket, (connect, send, read): (Option<f64>, Option<f64>, Option<f64>)| {
                socket.connect_timeout.set(millis(connect));
                socket.send_timeout.set(millis(send));
                socket.read_timeout.set(millis(read));
                Ok(())
            },
        );
        methods.add_method("getreusedtimes", |lua, socket, ()| {
            match socket.conn.borrow().as_ref() {
                Some(conn) => success(conn.reused, lua),
                None => failure(lua, "closed", None),
            }
        });
        methods.add_method(
            "setkeepalive",
            |lua, socket, (timeout, size): (Option<f64>, Option<i64>)| {
                disabled()?;
                let Some(conn) = socket.take() else {
                    return failure(lua, "closed", None);
                };
                if !conn.buf.is_empty() {
                    return failure(lua, "unread data in buffer", None);
                }
                if conn.read_closed {
                    return failure(lua, "closed", None);
                }
                let idle_for = match timeout {
                    None => Some(DEFAULT_TIMEOUT),
                    Some(ms) if ms <= 0.0 => None,
                    Some(ms) => Some(Duration::from_secs_f64(ms / 1000.0)),
                };
                let size = size.map_or(DEFAULT_POOL_SIZE, |s| s.max(1) as usize);
                check_in(socket.key.borrow().clone(), conn, idle_for, size);
                success(1, lua)
            },
        );
        methods.add_method("close", |lua, socket, ()| match socket.take() {
            Some(_) => success(1, lua),
            None => failure(lua, "closed", None),
        });
    }
}

/// `ngx.socket.tcp` and `ngx.socket.connect` on `ngx`.
pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let socket = match ngx.get::<Option<Table>>("socket")? {
        Some(socket) => socket,
        None => lua.create_table()?,
    };
    let new_socket = lua.create_function(|lua, ()| lua.create_userdata(TcpSocket::new()))?;
    let disabled_in = lua.create_function(|_, ()| Ok(DISABLED_IN.get()))?;
    // In Lua, so that the refusal is the plain message nginx raises (not a Rust error value).
    let (tcp, connect): (mlua::Function, mlua::Function) = lua
        .load(TCP)
        .set_name("=ngx.socket")
        .call((new_socket, disabled_in))?;
    socket.set("tcp", tcp)?;
    socket.set("connect", connect)?;
    lua.load(NESTED_WAITS)
        .set_name("=coroutine")
        .call::<()>(Value::LightUserData(Lua::poll_pending()))?;
    ngx.set("socket", socket)?;
    Ok(())
}

/// `ngx.socket.tcp` (refused where nginx disables cosockets) and `ngx.socket.connect`.
const TCP: &str = r#"
local new_socket, disabled_in = ...
local error = error
local function tcp()
  local context = disabled_in()
  if context then error("API disabled in the context of " .. context, 0) end
  return new_socket()
end
local function connect(...)
  local sock = tcp()
  local ok, err = sock:connect(...)
  if not ok then return nil, err end
  return sock
end
return tcp, connect
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
