//! Peeking at a connection's first bytes without consuming them, for the detect phases (the
//! TCP routers' ClientHello, the `h2c` preface): one loop that always either learns something
//! new, waits for the next segment, or ends.

use std::io;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Peeks into `buf` until `decide` says what the bytes are (`Some`). Waits for more bytes while
/// it says `None`; fails with `UnexpectedEof` when the client closes its side (or fills `buf`)
/// before that, since no byte will ever complete what is there.
///
/// Run it under a deadline: it does not end while a client trickles nothing.
pub async fn peek_until<T>(
    io: &TcpStream,
    buf: &mut [u8],
    mut decide: impl FnMut(&[u8]) -> Option<T>,
) -> io::Result<T> {
    let mut seen = 0;
    loop {
        // Waiting on readiness costs no budget, so without this a loop that misjudged its
        // socket would never yield: not to other connections, not to the sweep that fires
        // its deadline.
        tokio::task::coop::consume_budget().await;
        let ready = io.ready(Interest::READABLE).await?;
        let peeked = io.try_io(Interest::READABLE, || {
            let (_, n) = rustix::net::recv(io, &mut *buf, rustix::net::RecvFlags::PEEK)
                .map_err(io::Error::from)?;
            // Nothing new, and the client may still send: clear the readiness and wait for
            // the next segment. (Once the client has closed, the readiness stays set: tokio
            // never clears a closed state, so waiting would return at once, forever.)
            if n == seen && n > 0 && !ready.is_read_closed() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match peeked {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if n > 0 {
            if let Some(decided) = decide(&buf[..n]) {
                return Ok(decided);
            }
        }
        // The readiness was read before the peek, so a close it reports came after every byte
        // the peek saw: they are all there will ever be.
        if n == 0 || ready.is_read_closed() || n == buf.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        seen = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::Shutdown;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap()
    }

    /// Eight bytes decide; fewer do not.
    fn eight(bytes: &[u8]) -> Option<usize> {
        (bytes.len() >= 8).then_some(bytes.len())
    }

    #[test]
    fn a_close_before_the_bytes_decide_ends_the_peek() {
        runtime().block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().await.unwrap();
            client.write_all(b"abc").unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            let mut buf = [0u8; 16];
            let peeked = peek_until(&server, &mut buf, eight).await;
            assert_eq!(peeked.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
            // Nothing was consumed.
            let mut left = [0u8; 3];
            assert_eq!(server.try_read(&mut left).unwrap(), 3);
        });
    }

    #[test]
    fn the_peek_waits_for_the_next_segment() {
        runtime().block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().await.unwrap();
            client.write_all(b"abc").unwrap();
            let mut buf = [0u8; 16];
            let later = async {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                client.write_all(b"defgh").unwrap();
            };
            let (peeked, ()) = tokio::join!(peek_until(&server, &mut buf, eight), later);
            assert_eq!(peeked.unwrap(), 8);
        });
    }
}
