//! Read buffers: their size, how room is made for the next read, how much of a file is read
//! at a time where it cannot go by `sendfile`, and the worker's pool of buffers lent to
//! connections ([`Buffers`]).

use bytes::BytesMut;
use std::cell::RefCell;

/// Size of the read buffers the worker lends to connections.
pub const READ_CHUNK: usize = 16 * 1024;

/// Makes room for a read. Under half a `READ_CHUNK` free, the room already read past is taken
/// back when nothing else shares the buffer; failing that, under 1 KiB free it grows by
/// `READ_CHUNK`.
/// Without taking back, a connection whose earlier answers left 3 KiB at the buffer's tail
/// read an 8 KiB answer in two syscalls, and the read that filled the tail left the socket
/// marked readable, so the pool's liveness probe cost a third.
pub fn make_room(buf: &mut BytesMut) {
    let room = buf.capacity() - buf.len();
    if room >= READ_CHUNK / 2 || buf.try_reclaim(READ_CHUNK) {
        return;
    }
    if room < 1024 {
        buf.reserve(READ_CHUNK);
    }
}

/// How much of a file is read into memory at a time (TLS, HTTP/2, a body filter).
pub const FILE_READ_CHUNK: u64 = 64 * 1024;

/// Buffers lent to connections while they read or answer a request, so an idle keep-alive
/// connection holds none (nginx's approach: memory follows active requests, not connections).
#[derive(Default)]
pub struct Buffers {
    reads: RefCell<Vec<BytesMut>>,
    outs: RefCell<Vec<Vec<u8>>>,
    /// Where file bytes are read before they are framed (borrowed, never across an await).
    scratch: RefCell<Vec<u8>>,
}

/// Buffers kept for reuse per worker, of each kind; more are freed.
const KEPT_BUFFERS: usize = 256;

impl Buffers {
    pub fn take_read(&self) -> BytesMut {
        self.reads
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(READ_CHUNK))
    }

    /// Takes back an empty read buffer (one still holding bytes stays with its connection).
    pub fn give_read(&self, mut buf: BytesMut) {
        let mut reads = self.reads.borrow_mut();
        if buf.is_empty() && buf.capacity() > 0 && reads.len() < KEPT_BUFFERS {
            buf.clear();
            reads.push(buf);
        }
    }

    /// The worker's scratch buffer, at least `len` bytes, zeroed once when it grows (so a
    /// read into it costs no `memset` per request).
    pub fn scratch(&self, len: usize) -> std::cell::RefMut<'_, Vec<u8>> {
        let mut scratch = self.scratch.borrow_mut();
        if scratch.len() < len {
            scratch.resize(len, 0);
        }
        scratch
    }

    pub fn take_out(&self) -> Vec<u8> {
        self.outs
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(READ_CHUNK))
    }

    pub fn give_out(&self, mut out: Vec<u8>) {
        let mut outs = self.outs.borrow_mut();
        // Outputs that grew for a large body are not kept.
        if out.capacity() > 0 && out.capacity() <= 4 * READ_CHUNK && outs.len() < KEPT_BUFFERS {
            out.clear();
            outs.push(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    #[test]
    fn a_read_gets_back_the_room_already_read_past() {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        buf.resize(READ_CHUNK - 3 * 1024, b'x');
        buf.advance(READ_CHUNK - 3 * 1024);
        assert!(buf.capacity() < READ_CHUNK / 2);
        make_room(&mut buf);
        assert!(buf.capacity() >= READ_CHUNK);
    }

    #[test]
    fn a_shared_buffer_keeps_its_tail_until_it_is_nearly_full() {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        buf.resize(READ_CHUNK - 3 * 1024, b'x');
        // A parsed head keeps the front of the allocation alive.
        let head = buf.split_to(READ_CHUNK - 3 * 1024);
        make_room(&mut buf);
        assert_eq!(buf.capacity(), 3 * 1024);
        buf.resize(2 * 1024 + 512, b'y');
        make_room(&mut buf);
        assert!(buf.capacity() - buf.len() >= READ_CHUNK);
        assert_eq!(head.len(), READ_CHUNK - 3 * 1024);
    }
}
