//! Writing an HTTP/2 codec's output (weir-h2's server or client side) to its socket: one loop
//! for the client-facing driver and the upstream connections.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

/// Slices handed to one vectored write.
const WRITE_SLICES: usize = 32;

/// A codec whose output waits to be written: both sides of weir-h2.
pub trait CodecOutput {
    fn has_output(&self) -> bool;
    fn output_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize;
    fn advance_output(&mut self, n: usize);
}

impl CodecOutput for weir_h2::Connection {
    fn has_output(&self) -> bool {
        weir_h2::Connection::has_output(self)
    }
    fn output_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        weir_h2::Connection::output_slices(self, dst)
    }
    fn advance_output(&mut self, n: usize) {
        weir_h2::Connection::advance_output(self, n)
    }
}

impl CodecOutput for weir_h2::ClientConnection {
    fn has_output(&self) -> bool {
        weir_h2::ClientConnection::has_output(self)
    }
    fn output_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        weir_h2::ClientConnection::output_slices(self, dst)
    }
    fn advance_output(&mut self, n: usize) {
        weir_h2::ClientConnection::advance_output(self, n)
    }
}

/// Writes what the socket takes of `codec`'s output, then flushes (TLS may hold records a
/// write could not pass on until flushed; a plain socket's flush does nothing). `Ok(true)`
/// when something was written.
pub fn write_output<S: AsyncWrite + Unpin>(
    io: &mut S,
    codec: &mut impl CodecOutput,
    cx: &mut Context<'_>,
) -> std::io::Result<bool> {
    let mut wrote = false;
    while codec.has_output() {
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
        let n = codec.output_slices(&mut slices);
        match Pin::new(&mut *io).poll_write_vectored(cx, &slices[..n]) {
            Poll::Ready(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(written)) => {
                codec.advance_output(written);
                wrote = true;
            }
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => break,
        }
    }
    if let Poll::Ready(Err(e)) = Pin::new(&mut *io).poll_flush(cx) {
        return Err(e);
    }
    Ok(wrote)
}
