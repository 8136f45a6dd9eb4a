//! Moving a TCP router's bytes both ways until both sides are done (and a WebSocket tunnel's,
//! after `101`: `conn/h1.rs`). Between two plain sockets a direction copies through the
//! worker's scratch buffer (`recv` then `send`: cheapest for small messages such as Redis
//! commands) until a read fills that buffer, and from then on splices through a pipe
//! (`splice(2)`: bulk bytes never enter user space), as HAProxy does. Under TLS each direction
//! has a buffer of its own. A side that finishes sending (FIN) has the other side's writing
//! shut down in turn, so half-closed protocols work; the connection ends when both directions
//! have, on an error, or after `idle` with no byte moving either way.

use crate::io::buffers::Buffers;
use crate::io::watch::{Clock, ConnWatch, Waiting};
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::future::poll_fn;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Bytes moved per step: a pipe's default capacity.
const STEP_BYTES: usize = 64 * 1024;
/// Bytes read per copying step; a read that fills them switches the direction to splicing.
const COPY_BYTES: usize = 16 * 1024;

/// What one step of a direction did.
enum Step {
    Moved,
    /// This direction is finished (its source sent FIN, and that was passed on).
    Done,
}

/// How long the relay waits, in both directions, before it gives up on an idle connection.
pub struct Idle<'a> {
    pub watch: &'a ConnWatch,
    pub clock: &'a Clock,
    pub limit: Duration,
}

impl Idle<'_> {
    /// Waits for one step of either direction; none within `limit` is a timeout.
    async fn wait_for(
        &self,
        step: impl std::future::Future<Output = io::Result<Step>>,
    ) -> io::Result<()> {
        match self
            .watch
            .within(self.clock, Waiting::StreamIdle, self.limit, step)
            .await
        {
            Ok(Ok(Step::Moved | Step::Done)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }
}

/// Relays between two plain sockets, copying small reads through `scratch` and splicing bulk.
/// Returns the bytes moved (client to server, server to client).
pub async fn splice_both(
    client: &TcpStream,
    server: &TcpStream,
    scratch: &Buffers,
    idle: Idle<'_>,
) -> io::Result<(u64, u64)> {
    let mut up = SpliceDirection::default();
    let mut down = SpliceDirection::default();
    loop {
        if up.done && down.done {
            return Ok((up.moved, down.moved));
        }
        let step = poll_fn(|cx| {
            if !up.done {
                if let Poll::Ready(r) = up.poll_step(cx, client, server, scratch) {
                    return Poll::Ready(r);
                }
            }
            if !down.done {
                if let Poll::Ready(r) = down.poll_step(cx, server, client, scratch) {
                    return Poll::Ready(r);
                }
            }
            Poll::Pending
        });
        idle.wait_for(step).await?;
    }
}

#[derive(Default)]
struct SpliceDirection {
    /// The pipe, once this direction splices.
    pipe: Option<(OwnedFd, OwnedFd)>,
    /// Bytes read from the source waiting in the pipe.
    in_pipe: usize,
    /// Copied bytes the destination did not take yet.
    pending: Vec<u8>,
    /// The last read took less than it asked for, so the socket is (almost surely) empty: the
    /// next read attempt reports "would block" without a syscall, which clears tokio's
    /// readiness (unless an edge came since, so nothing is missed). nginx does the same.
    drained: bool,
    source_ended: bool,
    done: bool,
    moved: u64,
}

impl SpliceDirection {
    fn poll_step(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        scratch: &Buffers,
    ) -> Poll<io::Result<Step>> {
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            if !self.pending.is_empty() {
                ready!(to.poll_write_ready(cx))?;
                match to.try_io(Interest::WRITABLE, || send(to, &self.pending)) {
                    Ok(n) => {
                        self.pending.drain(..n);
                        self.moved += n as u64;
                        return Poll::Ready(Ok(Step::Moved));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            if let (Some((pipe_read, _)), true) = (&self.pipe, self.in_pipe > 0) {
                ready!(to.poll_write_ready(cx))?;
                let spliced = to.try_io(Interest::WRITABLE, || {
                    rustix::pipe::splice(pipe_read, None, to, None, self.in_pipe, flags)
                        .map_err(io::Error::from)
                });
                match spliced {
                    Ok(n) => {
                        self.in_pipe -= n;
                        self.moved += n as u64;
                        return Poll::Ready(Ok(Step::Moved));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            if self.source_ended {
                self.done = true;
                let _ = socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write);
                return Poll::Ready(Ok(Step::Done));
            }
            ready!(from.poll_read_ready(cx))?;
            if let Some((_, pipe_write)) = &self.pipe {
                let spliced = from.try_io(Interest::READABLE, || {
                    rustix::pipe::splice(from, None, pipe_write, None, STEP_BYTES, flags)
                        .map_err(io::Error::from)
                });
                match spliced {
                    Ok(0) => self.source_ended = true,
                    // (A short splice does not mean the socket is empty: the pipe's slots
                    // may have filled with partial pages.)
                    Ok(n) => self.in_pipe += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
                continue;
            }
            let mut buf = scratch.scratch(COPY_BYTES);
            let buf = &mut buf[..COPY_BYTES];
            let read = from.try_io(Interest::READABLE, || {
                if std::mem::take(&mut self.drained) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                rustix::net::recv(from, &mut *buf, rustix::net::RecvFlags::empty())
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            });
            let n = match read {
                Ok(0) => {
                    self.source_ended = true;
                    continue;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            };
            self.drained = n < COPY_BYTES;
            if n == COPY_BYTES {
                // A full read: bulk data; splice from now on.
                self.pipe = Some(rustix::pipe::pipe_with(
                    PipeFlags::CLOEXEC | PipeFlags::NONBLOCK,
                )?);
            }
            let sent = match to.try_io(Interest::WRITABLE, || send(to, &buf[..n])) {
                Ok(sent) => sent,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => return Poll::Ready(Err(e)),
            };
            self.moved += sent as u64;
            self.pending.extend_from_slice(&buf[sent..n]);
            return Poll::Ready(Ok(Step::Moved));
        }
    }
}

fn send(to: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    rustix::net::send(to, bytes, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from)
}

/// Relays between any two byte streams through a buffer per direction.
pub async fn copy_both<C, S>(
    client: &mut C,
    server: &mut S,
    idle: Idle<'_>,
) -> io::Result<(u64, u64)>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut up = BufferDirection::default();
    let mut down = BufferDirection::default();
    loop {
        if up.done && down.done {
            return Ok((up.moved, down.moved));
        }
        let step = poll_fn(|cx| {
            if !up.done {
                if let Poll::Ready(r) = up.poll_step(cx, &mut *client, &mut *server) {
                    return Poll::Ready(r);
                }
            }
            if !down.done {
                if let Poll::Ready(r) = down.poll_step(cx, &mut *server, &mut *client) {
                    return Poll::Ready(r);
                }
            }
            Poll::Pending
        });
        idle.wait_for(step).await?;
    }
}

#[derive(Default)]
struct BufferDirection {
    /// Allocated on first use, `STEP_BYTES` long.
    buf: Vec<u8>,
    /// `buf[sent..filled]` is still to be written.
    sent: usize,
    filled: usize,
    /// Written but perhaps held by the writer (TLS keeps records until flushed).
    unflushed: bool,
    source_ended: bool,
    done: bool,
    moved: u64,
}

impl BufferDirection {
    fn poll_step<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut R,
        to: &mut W,
    ) -> Poll<io::Result<Step>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        if self.sent < self.filled {
            let n = ready!(Pin::new(&mut *to).poll_write(cx, &self.buf[self.sent..self.filled]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
            self.moved += n as u64;
            self.unflushed = true;
            return Poll::Ready(Ok(Step::Moved));
        }
        if self.unflushed {
            ready!(Pin::new(&mut *to).poll_flush(cx))?;
            self.unflushed = false;
        }
        if self.source_ended {
            ready!(Pin::new(&mut *to).poll_shutdown(cx))?;
            self.done = true;
            return Poll::Ready(Ok(Step::Done));
        }
        if self.buf.is_empty() {
            self.buf = vec![0; STEP_BYTES];
        }
        let mut read = ReadBuf::new(&mut self.buf);
        ready!(Pin::new(&mut *from).poll_read(cx, &mut read))?;
        let n = read.filled().len();
        self.source_ended = n == 0;
        self.sent = 0;
        self.filled = n;
        Poll::Ready(Ok(Step::Moved))
    }
}
