//! The socket under a client's TLS session: registered with tokio while a task serves the
//! connection, or bare while the connection is parked (`io/idle.rs`), so a parked TLS
//! connection keeps its session (keys, sequence numbers, a partial record) without a task or
//! a tokio registration, and gets both back when its client writes.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A client's TLS connection over a socket that can be parked.
pub type ParkableTls = tokio_rustls::server::TlsStream<TlsSocket>;

/// The socket a TLS session reads and writes.
pub enum TlsSocket {
    /// Served by a task: registered with the worker's reactor.
    Served(TcpStream),
    /// Parked: out of the reactor, watched by the worker's idle set.
    Parked(std::net::TcpStream),
    /// Could not be taken out of (or put back into) the reactor; reads and writes fail.
    Lost,
}

impl TlsSocket {
    /// Takes the socket out of the reactor; false if that failed (the connection is lost).
    pub fn park(&mut self) -> bool {
        if let TlsSocket::Served(_) = self {
            if let TlsSocket::Served(io) = std::mem::replace(self, TlsSocket::Lost) {
                if let Ok(io) = io.into_std() {
                    *self = TlsSocket::Parked(io);
                }
            }
        }
        matches!(self, TlsSocket::Parked(_))
    }

    /// Registers a parked socket with the reactor again (on a worker thread).
    pub fn wake(&mut self) -> io::Result<()> {
        if let TlsSocket::Parked(_) = self {
            if let TlsSocket::Parked(io) = std::mem::replace(self, TlsSocket::Lost) {
                *self = TlsSocket::Served(TcpStream::from_std(io)?);
            }
        }
        Ok(())
    }

    /// The descriptor, for the idle set's epoll (`None` when lost).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            TlsSocket::Served(io) => Some(io.as_fd()),
            TlsSocket::Parked(io) => Some(io.as_fd()),
            TlsSocket::Lost => None,
        }
    }
}

fn not_served() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "TLS socket not registered")
}

impl AsyncRead for TlsSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsSocket::Served(io) => Pin::new(io).poll_read(cx, buf),
            _ => Poll::Ready(Err(not_served())),
        }
    }
}

impl AsyncWrite for TlsSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TlsSocket::Served(io) => Pin::new(io).poll_write(cx, buf),
            _ => Poll::Ready(Err(not_served())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TlsSocket::Served(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            _ => Poll::Ready(Err(not_served())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        // As the TcpStream's: rustls writes its records with one `writev`.
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsSocket::Served(io) => Pin::new(io).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsSocket::Served(io) => Pin::new(io).poll_shutdown(cx),
            _ => Poll::Ready(Err(not_served())),
        }
    }
}
