//! Read buffers: their size, how room is made for the next read, and how much of a file is
//! read at a time where it cannot go by `sendfile`.

use bytes::BytesMut;

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
