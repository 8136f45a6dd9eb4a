//! Heap per idle HTTP/2 connection, weir-h2 against the `h2` crate: 200 cleartext connections
//! over loopback TCP, each after one GET answered, then left idle; a counting allocator measures
//! what the server side holds (its task, socket registration and protocol state).
//! The only test in this file, so no other test's allocations are counted.

mod support;

use bytes::{Bytes, BytesMut};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;
use support::frame;
use tokio::io::AsyncWriteExt;
use weir_h2::hpack::{Encoder, Indexing};
use weir_h2::{Config, Connection, Event, PREFACE};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CONNECTIONS: usize = 200;

/// One client: preface, SETTINGS, a GET; reads until the answer's last DATA frame, then acks
/// the server's SETTINGS. The socket stays open.
fn one_request(addr: SocketAddr) -> TcpStream {
    let mut e = Encoder::new(Indexing::None, false);
    let block = support::encode_block(
        &mut e,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "t"),
        ],
    );
    let mut out = PREFACE.to_vec();
    frame(&mut out, 4, 0, 0, &[]);
    frame(&mut out, 1, 0x5, 1, &block);
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.write_all(&out).expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    'read: loop {
        let n = sock.read(&mut buf).expect("read");
        assert!(n > 0, "server closed");
        got.extend_from_slice(&buf[..n]);
        let mut at = 0;
        while got.len() >= at + 9 {
            let len = (got[at] as usize) << 16 | (got[at + 1] as usize) << 8 | got[at + 2] as usize;
            if got[at + 3] == 0 && got[at + 4] & 1 != 0 {
                break 'read;
            }
            at += 9 + len;
        }
    }
    let mut ack = Vec::new();
    frame(&mut ack, 4, 1, 0, &[]);
    sock.write_all(&ack).expect("ack");
    sock
}

async fn weir_h2_connection(sock: tokio::net::TcpStream) {
    let mut conn = Connection::new(Config::default());
    let mut sock = sock;
    loop {
        while let Some(event) = conn.poll_event() {
            if let Event::Request { stream_id, .. } = event {
                conn.send_head(stream_id, 200, &[("content-length", "5")], false)
                    .ok();
                conn.send_data(stream_id, Bytes::from_static(b"hello"), true)
                    .ok();
            }
        }
        let out: BytesMut = conn.take_output();
        if !out.is_empty() && sock.write_all(&out).await.is_err() {
            return;
        }
        if conn.is_done() {
            return;
        }
        // Parked: nothing held but the codec's state and the socket.
        conn.release_idle_buffers();
        if sock.readable().await.is_err() {
            return;
        }
        match sock.try_read_buf(conn.input()) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

async fn h2_crate_connection(sock: tokio::net::TcpStream) {
    let Ok(mut conn) = h2::server::handshake(sock).await else {
        return;
    };
    while let Some(Ok((_request, mut respond))) = conn.accept().await {
        let response = http::Response::builder()
            .status(200)
            .header("content-length", "5")
            .body(())
            .expect("response");
        if let Ok(mut send) = respond.send_response(response, false) {
            send.send_data(Bytes::from_static(b"hello"), true).ok();
        }
    }
}

fn start(weir: bool) -> SocketAddr {
    if weir {
        support::listen(weir_h2_connection)
    } else {
        support::listen(h2_crate_connection)
    }
}

/// Heap bytes the server holds per idle connection.
fn per_idle_connection(weir: bool) -> isize {
    let addr = start(weir);
    // Warm up: the runtime's and the crates' first-use allocations.
    let warm: Vec<_> = (0..5).map(|_| one_request(addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut clients = Vec::with_capacity(CONNECTIONS);
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..CONNECTIONS {
        clients.push(one_request(addr));
    }
    // Let the server read the SETTINGS acks and settle: until the count holds still for
    // 200 ms (a loaded machine may take a while), at most 10 s.
    let mut after = LIVE.load(Ordering::Relaxed);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = LIVE.load(Ordering::Relaxed);
        if now == after {
            break;
        }
        after = now;
    }
    drop(warm);
    (after - before) / CONNECTIONS as isize
}

#[test]
fn idle_connection_heap_weir_h2_against_the_h2_crate() {
    let weir = per_idle_connection(true);
    let h2 = per_idle_connection(false);
    println!("heap per idle h2c connection: weir-h2 {weir} bytes, h2 crate {h2} bytes");
    assert!(
        weir < 2048,
        "weir-h2 holds {weir} bytes per idle connection"
    );
    assert!(
        weir * 4 < h2,
        "weir-h2 {weir} bytes against the h2 crate's {h2}"
    );
}
