//! Client connections: the byte stream a connection driver speaks over, generic so each
//! transport (plain TCP today, TLS next) gets its own monomorphised copy of the driver, and the
//! per-connection deadlines. The HTTP/1.1 driver is [`h1`]; TLS entrypoints go through [`tls`]
//! first.

pub mod h1;
pub mod tls;
pub mod watch;

use tokio::io::{AsyncRead, AsyncWrite};

/// A client byte stream: anything a driver can read requests from and write answers to.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin {}

impl<T: AsyncRead + AsyncWrite + Unpin> ClientIo for T {}

/// The scheme the client used, for `X-Forwarded-Proto`, `redirect_scheme` and routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}
