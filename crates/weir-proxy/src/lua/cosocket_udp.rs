//! `ngx.socket.udp` as lua-nginx-module's UDP cosocket: `setpeername` (a host and port, or
//! `unix:` and a datagram socket's path), `send`, `receive` (one datagram), `settimeout`,
//! `close`. A wait yields the script's coroutine to the worker's event loop under the
//! socket's timer, as the TCP cosocket's do (`cosocket.rs`, whose helpers it uses).

use super::cosocket::{
    disabled, disabled_in, error_text, flatten, millis, resolve, within, Timer, DEFAULT_TIMEOUT,
};
use mlua::{Lua, MultiValue, Table, UserData, UserDataMethods, UserDataRef, Value};
use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::net::{UdpSocket, UnixDatagram};

/// `receive`'s buffer when no size (or a larger one) is asked for: lua-nginx-module 0.10.23's
/// (its README still says 8192, but it answers a 10,000-byte datagram whole).
const MAX_DATAGRAM: usize = 65536;

/// A connected datagram socket: UDP or a unix domain one.
enum Datagram {
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

impl Datagram {
    async fn send(&self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Datagram::Udp(io) => io.send(data).await,
            Datagram::Unix(io) => io.send(data).await,
        }
    }

    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Datagram::Udp(io) => io.recv(buf).await,
            Datagram::Unix(io) => io.recv(buf).await,
        }
    }
}

/// The socket to the peer, and the timer its waits are armed on.
struct Peer {
    io: Datagram,
    timer: Timer,
}

/// A socket object (`ngx.socket.udp()`).
struct UdpCosocket {
    /// Taken out for an operation, put back after it unless its error closed the socket.
    peer: RefCell<Option<Peer>>,
    timeout: Cell<Duration>,
}

impl UdpCosocket {
    fn take(&self) -> Option<Peer> {
        self.peer.borrow_mut().take()
    }

    fn put(&self, peer: Peer) {
        *self.peer.borrow_mut() = Some(peer);
    }
}

/// `nil, err`.
fn failure(lua: &Lua, err: &str) -> mlua::Result<MultiValue> {
    let err = Value::String(lua.create_string(err)?);
    Ok(MultiValue::from_iter([Value::Nil, err]))
}

fn success(value: impl mlua::IntoLua, lua: &Lua) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([value.into_lua(lua)?]))
}

/// A UDP socket on an ephemeral port of `addr`'s family, connected to `addr`.
async fn udp_to(addr: SocketAddr) -> std::io::Result<Datagram> {
    let any = match addr.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let socket = UdpSocket::bind(SocketAddr::new(any, 0)).await?;
    socket.connect(addr).await?;
    Ok(Datagram::Udp(socket))
}

/// A unix datagram socket connected to `path` (unbound, as nginx's: it can send only).
fn unix_to(path: &str) -> std::io::Result<Datagram> {
    let socket = UnixDatagram::unbound()?;
    socket.connect(path)?;
    Ok(Datagram::Unix(socket))
}

async fn setpeername(
    lua: Lua,
    socket: UserDataRef<UdpCosocket>,
    args: MultiValue,
) -> mlua::Result<MultiValue> {
    disabled()?;
    let args: Vec<Value> = args.into_iter().collect();
    let host = match args.first() {
        Some(Value::String(s)) => s.to_str()?.to_string(),
        _ => {
            return Err(mlua::Error::runtime(
                "bad argument #1 to 'setpeername' (string expected)",
            ))
        }
    };
    // Naming another peer closes the socket the object had.
    drop(socket.take());
    let opened = match host.strip_prefix("unix:") {
        Some(path) => unix_to(path),
        None => {
            let port = match args.get(1) {
                Some(Value::Integer(n)) => *n,
                Some(Value::Number(n)) => *n as i64,
                Some(Value::String(s)) => s.to_str()?.trim().parse::<i64>().unwrap_or(-1),
                _ => {
                    return Err(mlua::Error::runtime(
                        "bad argument #2 to 'setpeername' (number expected)",
                    ))
                }
            };
            let Ok(port) = u16::try_from(port) else {
                return failure(&lua, &format!("bad port number: {port}"));
            };
            let addr = match resolve(&host, port).await {
                Ok(addr) => addr,
                Err(e) => return failure(&lua, &e),
            };
            udp_to(addr).await
        }
    };
    match opened {
        Ok(io) => {
            socket.put(Peer {
                io,
                timer: Timer::default(),
            });
            success(1, &lua)
        }
        Err(e) => failure(&lua, &error_text(&e)),
    }
}

/// `send(data)`: one datagram of `data` (a string, a number, or an array of them, nested).
async fn send(lua: Lua, socket: UserDataRef<UdpCosocket>, data: Value) -> mlua::Result<MultiValue> {
    disabled()?;
    let mut bytes = Vec::new();
    flatten(&data, &mut bytes)?;
    let Some(mut peer) = socket.take() else {
        return failure(&lua, "closed");
    };
    let Peer { io, timer } = &mut peer;
    let sent = within(timer, socket.timeout.get(), io.send(&bytes)).await;
    socket.put(peer);
    match sent {
        Ok(Ok(_)) => success(1, &lua),
        Ok(Err(e)) => failure(&lua, &error_text(&e)),
        Err(waited) => failure(&lua, &waited.text()),
    }
}

/// `receive(size?)`: the next datagram, cut to `size` (at most [`MAX_DATAGRAM`]) bytes.
async fn receive(
    lua: Lua,
    socket: UserDataRef<UdpCosocket>,
    size: Option<f64>,
) -> mlua::Result<MultiValue> {
    disabled()?;
    let size = match size {
        Some(size) if size >= 1.0 => (size as usize).min(MAX_DATAGRAM),
        Some(_) => {
            return Err(mlua::Error::runtime(
                "bad argument #2 to 'receive' (bad size)",
            ))
        }
        None => MAX_DATAGRAM,
    };
    let Some(mut peer) = socket.take() else {
        return failure(&lua, "closed");
    };
    let mut buf = vec![0u8; size];
    let Peer { io, timer } = &mut peer;
    let read = within(timer, socket.timeout.get(), io.recv(&mut buf)).await;
    socket.put(peer);
    match read {
        Ok(Ok(n)) => success(lua.create_string(&buf[..n])?, &lua),
        Ok(Err(e)) => failure(&lua, &error_text(&e)),
        Err(waited) => failure(&lua, &waited.text()),
    }
}

impl UserData for UdpCosocket {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_async_method("setpeername", setpeername);
        methods.add_async_method("send", send);
        methods.add_async_method("receive", receive);
        methods.add_method("settimeout", |_, socket, ms: Option<f64>| {
            socket.timeout.set(millis(ms));
            Ok(())
        });
        methods.add_method("close", |lua, socket, ()| match socket.take() {
            Some(_) => success(1, lua),
            None => failure(lua, "closed"),
        });
    }
}

/// `ngx.socket.udp` on `ngx` (refused where nginx disables cosockets).
pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let socket = match ngx.get::<Option<Table>>("socket")? {
        Some(socket) => socket,
        None => lua.create_table()?,
    };
    let new_socket = lua.create_function(|lua, ()| {
        lua.create_userdata(UdpCosocket {
            peer: RefCell::new(None),
            timeout: Cell::new(DEFAULT_TIMEOUT),
        })
    })?;
    let disabled_in = lua.create_function(|_, ()| Ok(disabled_in()))?;
    // In Lua, so that the refusal is the plain message nginx raises.
    let udp: mlua::Function = lua
        .load(UDP)
        .set_name("=ngx.socket")
        .call((new_socket, disabled_in))?;
    socket.set("udp", udp)?;
    ngx.set("socket", socket)?;
    Ok(())
}

const UDP: &str = r#"
local new_socket, disabled_in = ...
local error = error
return function()
  local context = disabled_in()
  if context then error("API disabled in the context of " .. context, 0) end
  return new_socket()
end
"#;
