//! Client connections: the byte stream a connection driver speaks over, generic so each
//! transport (plain TCP, TLS) gets its own monomorphised copy of the driver. The HTTP/1.1
//! driver is [`h1`], the HTTP/2 one [`h2`] (ALPN `h2` after TLS, or the `h2c` preface), the
//! HTTP/3 one [`h3`] (QUIC on a TLS entrypoint's port, its own endpoint per worker); TLS
//! entrypoints go through [`tls`] first. Their deadlines are `io/watch.rs`'s; HTTP/1 and
//! HTTP/2 connections (plain or TLS) idle for a while wait in `io/idle.rs` without a task.

pub mod h1;
pub mod h2;
pub mod h3;
pub mod tls;

use crate::io::idle::{H2Io, IdleConnections, ParkedH2, ParkedTls};
use crate::reply::client::TlsInfo;
use std::net::SocketAddr;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A client byte stream: anything a driver can read requests from and write answers to.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + Sized {
    /// Whether an idle connection on this stream can be parked (see `io/idle.rs`).
    const PARKS: bool;

    /// Parks the idle connection in `idle` (called only when `PARKS`); one that cannot be
    /// taken out of the reactor is closed as if its idle time had ended.
    fn park(self, idle: &IdleConnections, peer: SocketAddr, entrypoint: usize, expires: Instant);

    /// The stream as a parked HTTP/2 connection holds it (called only when `PARKS`); `None`
    /// when it cannot be taken out of the reactor (the connection is then closed).
    fn into_parked_h2(self) -> Option<H2Io>;

    /// Parks an idle HTTP/2 connection with its codec's state, as `park` does.
    fn park_h2(
        self,
        idle: &IdleConnections,
        codec: weir_h2::Connection,
        (peer, entrypoint): (SocketAddr, usize),
        expires: Instant,
    ) {
        if let Some(io) = self.into_parked_h2() {
            let parked = ParkedH2 {
                io,
                codec,
                timed_out: false,
            };
            idle.park_h2(Box::new(parked), peer, entrypoint, expires);
        }
    }

    /// The plain TCP socket under the stream, when bytes written to it reach the client as
    /// they are (so files can go by `sendfile`).
    fn as_tcp(&self) -> Option<&TcpStream>;

    /// The TLS session, read from the stream when asked (for the access log).
    fn tls(&self) -> Option<TlsInfo<'_>> {
        None
    }
}

impl ClientIo for TcpStream {
    const PARKS: bool = true;

    fn park(self, idle: &IdleConnections, peer: SocketAddr, entrypoint: usize, expires: Instant) {
        if let Ok(io) = self.into_std() {
            idle.park(io, peer, entrypoint, expires);
        }
    }

    fn into_parked_h2(self) -> Option<H2Io> {
        self.into_std().ok().map(H2Io::Plain)
    }

    fn as_tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl ClientIo for ParkedTls {
    const PARKS: bool = true;

    /// With its session, boxed.
    fn park(self, idle: &IdleConnections, peer: SocketAddr, entrypoint: usize, expires: Instant) {
        idle.park_tls(Box::new(self), peer, entrypoint, expires);
    }

    fn into_parked_h2(self) -> Option<H2Io> {
        Some(H2Io::Tls(Box::new(self)))
    }

    fn as_tcp(&self) -> Option<&TcpStream> {
        None
    }

    fn tls(&self) -> Option<TlsInfo<'_>> {
        let session = self.get_ref().1;
        let version = match session.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "TLS",
        };
        Some(TlsInfo {
            version,
            sni: session.server_name(),
        })
    }
}
