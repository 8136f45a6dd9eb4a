//! Client connections: the byte stream a connection driver speaks over, generic so each
//! transport (plain TCP today, TLS next) gets its own monomorphised copy of the driver, and the
//! per-connection deadlines. The HTTP/1.1 driver is [`h1`].

pub mod h1;
pub mod watch;

use tokio::io::{AsyncRead, AsyncWrite};

/// A client byte stream: anything a driver can read requests from and write answers to.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin {}

impl<T: AsyncRead + AsyncWrite + Unpin> ClientIo for T {}
