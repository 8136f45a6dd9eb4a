//! The listening sockets: each entrypoint is bound once per worker (SO_REUSEPORT, so the kernel
//! spreads connections), and the control thread keeps a duplicate of every worker's socket. A
//! reload diffs entrypoints by name against that table (a kept one is never closed), and a
//! binary upgrade hands the same sockets to the new process, so no queued connection is lost.

use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use weir_config::{Entrypoint, Transport};

/// An entrypoint's socket on one worker.
pub enum Listener {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
    /// An `http3` entrypoint's UDP socket on its TCP port, for a QUIC endpoint.
    Quic(std::net::UdpSocket),
}

impl Listener {
    /// Binds with SO_REUSEPORT, so every worker has its own socket on the address.
    fn bind(addr: SocketAddr, transport: Transport) -> std::io::Result<Listener> {
        let (kind, protocol) = match transport {
            Transport::Tcp => (Type::STREAM, Protocol::TCP),
            Transport::Udp => (Type::DGRAM, Protocol::UDP),
        };
        let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&addr.into())?;
        if transport == Transport::Tcp {
            socket.set_nodelay(true)?;
            socket.listen(4096)?;
        }
        Listener::adopt(socket.into(), transport)
    }

    /// A socket bound before (by this process or the one it upgrades), made non-blocking.
    pub fn adopt(fd: OwnedFd, transport: Transport) -> std::io::Result<Listener> {
        let socket = Socket::from(fd);
        socket.set_nonblocking(true)?;
        Ok(match transport {
            Transport::Tcp => Listener::Tcp(socket.into()),
            Transport::Udp => Listener::Udp(socket.into()),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Udp(u) | Listener::Quic(u) => u.local_addr(),
        }
    }

    fn duplicate(&self) -> std::io::Result<OwnedFd> {
        match self {
            Listener::Tcp(l) => l.as_fd().try_clone_to_owned(),
            Listener::Udp(u) | Listener::Quic(u) => u.as_fd().try_clone_to_owned(),
        }
    }
}

/// One entrypoint's sockets as the control thread keeps them.
pub struct Bound {
    /// The address as configured (`:0` stays `:0`, so an unchanged entrypoint is kept).
    pub configured: SocketAddr,
    /// The address the sockets listen on.
    pub actual: SocketAddr,
    pub transport: Transport,
    /// Duplicates of the workers' sockets, by worker.
    pub sockets: Vec<OwnedFd>,
    /// Whether the workers also have a QUIC socket each on the port (`http3`). Those are not
    /// duplicated: a binary upgrade's new process binds its own.
    pub http3: bool,
}

impl Bound {
    /// Logs where entrypoint `name` listens (tests and operators read this line), and its
    /// QUIC sockets' port, the same, when it has them.
    pub fn announce(&self, name: &str) {
        crate::log_info!(
            "entrypoint {name} listening on {}{}",
            self.actual,
            udp_suffix(self.transport)
        );
        if self.http3 {
            crate::log_info!("entrypoint {name} listening on {}/udp", self.actual);
        }
    }

    /// Whether `ep` can keep these sockets.
    pub fn serves(&self, ep: &Entrypoint) -> bool {
        self.configured == ep.address && self.transport == ep.transport
    }

    /// Whether a reload keeps these sockets for `ep`: turning `http3` on or off binds them
    /// again, with or without QUIC sockets.
    pub fn keeps(&self, ep: &Entrypoint) -> bool {
        self.serves(ep) && self.http3 == ep.http3.is_some()
    }
}

/// Every entrypoint's sockets, by entrypoint name.
#[derive(Default)]
pub struct BoundEntrypoints {
    pub by_name: HashMap<String, Bound>,
}

impl BoundEntrypoints {
    /// Binds `ep` once per worker, taking sockets from `inherited` (a binary upgrade's) first.
    /// Returns the listeners, one per worker, or more when more were inherited: the caller
    /// deals them out to the workers in turn.
    pub fn bind(
        ep: &Entrypoint,
        workers: usize,
        inherited: &mut Inherited,
    ) -> Result<(Bound, Vec<Listener>), String> {
        let err = |e: std::io::Error| {
            format!(
                "entrypoint `{}`: cannot listen on {}: {e}",
                ep.name, ep.address
            )
        };
        // HTTP/3: a UDP socket per worker on the port the TCP ones took, bound after them so
        // that port 0 is resolved; the workers get them after their TCP sockets.
        let http3 = ep.http3.is_some() && ep.transport == Transport::Tcp;
        let mut quic = Vec::new();
        let mut listeners = Vec::with_capacity(workers);
        for fd in inherited.take(ep) {
            listeners.push(Listener::adopt(fd, ep.transport).map_err(err)?);
        }
        let actual = match listeners.first() {
            Some(first) => first.local_addr().map_err(err)?,
            None => {
                let (first, probe) = bind_first(ep, http3).map_err(err)?;
                let actual = first.local_addr().map_err(err)?;
                listeners.push(first);
                quic.extend(probe);
                actual
            }
        };
        // The first socket resolved port 0 to a real port; the others join it.
        while listeners.len() < workers {
            listeners.push(Listener::bind(actual, ep.transport).map_err(err)?);
        }
        let sockets = listeners
            .iter()
            .map(Listener::duplicate)
            .collect::<Result<_, _>>()
            .map_err(err)?;
        while http3 && quic.len() < workers {
            quic.push(bind_quic(actual).map_err(err)?);
        }
        listeners.extend(quic.into_iter().map(Listener::Quic));
        let bound = Bound {
            configured: ep.address,
            actual,
            transport: ep.transport,
            sockets,
            http3,
        };
        Ok((bound, listeners))
    }
}

/// The first socket of an entrypoint bound afresh, and with `http3` its first QUIC socket on
/// the same port. For port 0, a port whose UDP side is taken (a client's ephemeral port, say)
/// is given up for another.
fn bind_first(
    ep: &Entrypoint,
    http3: bool,
) -> std::io::Result<(Listener, Option<std::net::UdpSocket>)> {
    const TRIES: usize = 16;
    let mut tried = 0;
    loop {
        let first = Listener::bind(ep.address, ep.transport)?;
        if !http3 {
            return Ok((first, None));
        }
        match bind_quic(first.local_addr()?) {
            Ok(quic) => return Ok((first, Some(quic))),
            Err(_) if ep.address.port() == 0 && tried < TRIES => tried += 1,
            Err(e) => return Err(e),
        }
    }
}

/// A QUIC socket on `addr` (`SO_REUSEPORT`, like the TCP ones).
fn bind_quic(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    match Listener::bind(addr, Transport::Udp) {
        Ok(Listener::Udp(socket)) => Ok(socket),
        Ok(_) => Err(std::io::ErrorKind::Unsupported.into()),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{addr}/udp for HTTP/3: {e}"),
        )),
    }
}

/// Sockets handed over by the process this one upgrades, by entrypoint name.
#[derive(Default)]
pub struct Inherited {
    pub by_name: HashMap<String, Bound>,
    /// The admin listener's socket (`admin/mod.rs` adopts it when the address is unchanged).
    pub admin: Option<Bound>,
}

impl Inherited {
    /// The inherited sockets for `ep`, when its address and transport are unchanged. All of
    /// them, even more than there are workers: one closed here would stay in the kernel's
    /// `SO_REUSEPORT` group while the old process holds it, and the connections queued in it
    /// then would be reset when that process exits.
    fn take(&mut self, ep: &Entrypoint) -> Vec<OwnedFd> {
        match self.by_name.remove(&ep.name) {
            Some(bound) if bound.serves(ep) => bound.sockets,
            _ => Vec::new(),
        }
    }
}

/// `/udp` after a UDP entrypoint's address in log lines.
fn udp_suffix(transport: Transport) -> &'static str {
    match transport {
        Transport::Udp => "/udp",
        Transport::Tcp => "",
    }
}
