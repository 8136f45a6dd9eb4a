//! Client connections: the byte stream a connection driver speaks over, generic so each
//! transport (plain TCP, TLS) gets its own monomorphised copy of the driver. The HTTP/1.1
//! driver is [`h1`], the HTTP/2 one [`h2`] (ALPN `h2` after TLS, or the `h2c` preface), the
//! HTTP/3 one [`h3`] (QUIC on a TLS entrypoint's port, its own endpoint per worker); TLS
//! entrypoints go through [`tls`] first. Their deadlines are `io/watch.rs`'s; plain
//! connections idle for a while wait in `io/idle.rs` without a task.

pub mod h1;
pub mod h2;
pub mod h3;
pub mod tls;

use crate::reply::client::TlsInfo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A client byte stream: anything a driver can read requests from and write answers to.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + Sized {
    /// Whether an idle connection on this stream can be parked (see `io/idle.rs`).
    const PARKS: bool;

    /// The bare socket, for parking (called only when `PARKS`); `None` if it could not be
    /// taken out of the reactor, and the connection is closed as if its idle time had ended.
    fn into_parkable(self) -> Option<std::net::TcpStream>;

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

    fn into_parkable(self) -> Option<std::net::TcpStream> {
        self.into_std().ok()
    }

    fn as_tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl ClientIo for TlsStream<TcpStream> {
    const PARKS: bool = false;

    fn into_parkable(self) -> Option<std::net::TcpStream> {
        None
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
