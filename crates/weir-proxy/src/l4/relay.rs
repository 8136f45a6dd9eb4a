//! Moving a TCP router's bytes both ways until both sides are done: by `splice(2)` through a
//! pipe per direction when both ends are plain sockets (the bytes never enter user space),
//! else through a buffer per direction (TLS terminated by weir). A side that finishes sending
//! (FIN) has the other side's writing shut down in turn, so half-closed protocols work; the
//! connection ends when both directions have, on an error, or after `idle` with no byte
//! moving either way.

use crate::conn::watch::{Clock, ConnWatch, Waiting};
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

/// Relays between two plain sockets by `splice`. Returns the bytes moved (client to server,
/// server to client).
pub async fn splice_both(
    client: &TcpStream,
    server: &TcpStream,
    idle: Idle<'_>,
) -> io::Result<(u64, u64)> {
    let mut up = SpliceDirection::new()?;
    let mut down = SpliceDirection::new()?;
    loop {
        if up.done && down.done {
            return Ok((up.moved, down.moved));
        }
        let step = poll_fn(|cx| {
            if !up.done {
                if let Poll::Ready(r) = up.poll_step(cx, client, server) {
                    return Poll::Ready(r);
                }
            }
            if !down.done {
                if let Poll::Ready(r) = down.poll_step(cx, server, client) {
                    return Poll::Ready(r);
                }
            }
            Poll::Pending
        });
        match idle
            .watch
            .within(idle.clock, Waiting::StreamIdle, idle.limit, step)
            .await
        {
            Ok(Ok(Step::Moved | Step::Done)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        }
    }
}

struct SpliceDirection {
    pipe_read: OwnedFd,
    pipe_write: OwnedFd,
    /// Bytes read from the source waiting in the pipe.
    in_pipe: usize,
    source_ended: bool,
    done: bool,
    moved: u64,
}

impl SpliceDirection {
    fn new() -> io::Result<SpliceDirection> {
        let (pipe_read, pipe_write) =
            rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(SpliceDirection {
            pipe_read,
            pipe_write,
            in_pipe: 0,
            source_ended: false,
            done: false,
            moved: 0,
        })
    }

    fn poll_step(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
    ) -> Poll<io::Result<Step>> {
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            if self.in_pipe > 0 {
                ready!(to.poll_write_ready(cx))?;
                let spliced = to.try_io(Interest::WRITABLE, || {
                    rustix::pipe::splice(&self.pipe_read, None, to, None, self.in_pipe, flags)
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
            let spliced = from.try_io(Interest::READABLE, || {
                rustix::pipe::splice(from, None, &self.pipe_write, None, STEP_BYTES, flags)
                    .map_err(io::Error::from)
            });
            match spliced {
                Ok(0) => self.source_ended = true,
                Ok(n) => self.in_pipe += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
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
        match idle
            .watch
            .within(idle.clock, Waiting::StreamIdle, idle.limit, step)
            .await
        {
            Ok(Ok(Step::Moved | Step::Done)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        }
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
