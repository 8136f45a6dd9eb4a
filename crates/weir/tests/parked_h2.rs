//! Idle HTTP/2 connections park as HTTP/1 ones do (io/idle.rs: no task; the socket, or the TLS
//! session, and the codec's state boxed in the worker's idle set) and must behave exactly as
//! before across that boundary: woken by the next request with the HPACK table the client filled
//! before (its fields sent as indexes), by a PING, by a frame split across writes and pauses;
//! clients that vanish; the idle timeout counted from the start of the wait and still said with
//! GOAWAY; a reload that leaves them parked; a stop's GOAWAY. A raw HTTP/2 client over blocking sockets (cleartext, and rustls
//! with ALPN h2) against the real binary; `weir_connections_parked` shows that they did park.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

// Frame types (RFC 9113 §6).
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

// Flags: END_STREAM on DATA and HEADERS, ACK on SETTINGS and PING.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A client connection speaking HTTP/2 frames by hand over `S`.
struct H2<S> {
    io: S,
    buf: Vec<u8>,
    /// The GOAWAY frames received: their error code and when each came.
    goaways: Vec<(u32, Instant)>,
    scheme_index: u8,
}

/// The first request's head: GET, `/`, `:authority: t` and `x-kept: in the table`, the last
/// two added to the HPACK dynamic table (literals with incremental indexing).
fn first_block(scheme_index: u8) -> Vec<u8> {
    let mut block = vec![0x82, 0x80 | scheme_index, 0x84, 0x41, 1, b't', 0x40, 6];
    block.extend_from_slice(b"x-kept");
    block.push(12);
    block.extend_from_slice(b"in the table");
    block
}

/// The same head sent as indexes into the dynamic table: 62 `x-kept`, 63 `:authority`. A
/// server that lost its table cannot decode it.
fn indexed_block(scheme_index: u8) -> Vec<u8> {
    vec![0x82, 0x80 | scheme_index, 0x84, 0x80 | 63, 0x80 | 62]
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl<S: Read + Write> H2<S> {
    /// The preface and an empty SETTINGS; `scheme_index` is `:scheme`'s static index (6
    /// http, 7 https).
    fn start(io: S, scheme_index: u8) -> H2<S> {
        let mut conn = H2 {
            io,
            buf: Vec::new(),
            goaways: Vec::new(),
            scheme_index,
        };
        conn.write(PREFACE);
        conn.send(SETTINGS, 0, 0, &[]);
        conn
    }

    fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.write(&Self::frame_bytes(kind, flags, stream, payload));
    }

    fn write(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).unwrap();
        self.io.flush().unwrap();
    }

    /// The next frame; `None` once the server closed (or reset) the connection. The
    /// server's SETTINGS and PINGs are acknowledged, its GOAWAYs noted.
    fn frame(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let frame = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes(self.buf[5..9].try_into().unwrap()) & !(1 << 31),
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    match frame.kind {
                        SETTINGS if frame.flags & ACK == 0 => self.send(SETTINGS, ACK, 0, &[]),
                        PING if frame.flags & ACK == 0 => self.send(PING, ACK, 0, &frame.payload),
                        GOAWAY => {
                            let code = u32::from_be_bytes(frame.payload[4..8].try_into().unwrap());
                            self.goaways.push((code, Instant::now()));
                        }
                        _ => {}
                    }
                    return Some(frame);
                }
            }
            let mut chunk = [0u8; 16384];
            match self.io.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads until stream `id`'s answer ends: its status and body.
    fn answer(&mut self, id: u32) -> (u16, String) {
        let mut status = 0;
        let mut body = Vec::new();
        loop {
            let frame = self.frame().unwrap_or_else(|| {
                panic!("closed before stream {id}'s answer: {:?}", self.goaways)
            });
            if frame.stream != id {
                continue;
            }
            match frame.kind {
                // weir's encoder indexes no field: `:status` comes from the static table.
                HEADERS => {
                    status = match frame.payload[0] {
                        0x88 => 200,
                        0x8d => 404,
                        other => panic!("a :status weir does not send: {other:#x}"),
                    }
                }
                DATA => body.extend_from_slice(&frame.payload),
                _ => {}
            }
            if frame.flags & END_STREAM != 0 && matches!(frame.kind, HEADERS | DATA) {
                return (status, String::from_utf8(body).unwrap());
            }
        }
    }

    /// A GET on stream `id` with `block` as its head; the answer's body (its status 200).
    fn get(&mut self, id: u32, block: &[u8]) -> String {
        self.send(HEADERS, END_STREAM | END_HEADERS, id, block);
        let (status, body) = self.answer(id);
        assert_eq!(status, 200);
        body
    }

    /// The first request (its fields added to the dynamic table) on stream 1.
    fn first(&mut self) -> String {
        let block = first_block(self.scheme_index);
        self.get(1, &block)
    }

    /// The same request on stream `id`, as indexes into the dynamic table.
    fn indexed(&mut self, id: u32) -> String {
        let block = indexed_block(self.scheme_index);
        self.get(id, &block)
    }

    /// A PING answered with its payload.
    fn ping(&mut self) {
        self.send(PING, 0, 0, b"parked!!");
        loop {
            let frame = self.frame().expect("a PING ack");
            if frame.kind == PING && frame.flags & ACK != 0 {
                assert_eq!(frame.payload, b"parked!!");
                return;
            }
        }
    }

    /// Reads (acknowledging PINGs) until the server closes; the GOAWAYs it said.
    fn until_closed(&mut self) -> Vec<(u32, Instant)> {
        while self.frame().is_some() {}
        self.goaways.clone()
    }
}

fn h2c(addr: SocketAddr) -> H2<TcpStream> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    H2::start(tcp, 6)
}

/// An h2c connection that has had its first request answered.
fn served(addr: SocketAddr) -> H2<TcpStream> {
    let mut conn = h2c(addr);
    assert_eq!(conn.first(), "kept");
    conn
}

/// Waits until `n` connections are parked (a loaded machine may park them a tick or two
/// late).
fn await_parked(weir: &Weir, n: u64) {
    let parked = (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            weir.parked()
        })
        .find(|&now| now == n);
    assert_eq!(parked, Some(n), "{n} idle HTTP/2 connections park");
}

/// Routers answering `kept` to a request that carries `x-kept: in the table`, `ok` otherwise.
const ROUTERS: &str = "routers:\n  kept: { rule: \"Header(`x-kept`, `in the table`)\", priority: 100, respond: { body: kept } }\n  \
                       r: { rule: \"PathPrefix(`/`)\", respond: { body: ok } }\n";

fn h2c_weir(idle_timeout: &str) -> Weir {
    Weir::start(&format!(
        "server: {{ workers: 1, client_idle_timeout: {idle_timeout}, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n{ROUTERS}"
    ))
}

/// When the first GOAWAY came; every one said NO_ERROR (the idle timeout's or a stop's).
fn said_goaway(goaways: &[(u32, Instant)]) -> Instant {
    let (code, at) = *goaways.first().expect("a GOAWAY before the close");
    assert!(goaways.iter().all(|g| g.0 == 0), "{goaways:?}");
    assert_eq!(code, 0);
    at
}

/// Waits for the server to close `conn`: its idle timeout (`idle` from `idle_since`, give or
/// take the sweep's ticks and a loaded machine), said with GOAWAY, as it was in a task.
fn closed_by_idle_timeout<S: Read + Write>(conn: &mut H2<S>, idle_since: Instant, idle: u64) {
    let waited = said_goaway(&conn.until_closed()) - idle_since;
    let idle = Duration::from_secs(idle);
    assert!(
        waited >= idle && waited < idle + Duration::from_millis(1500),
        "{waited:?}"
    );
}

#[test]
fn parked_h2c_connections_wake_expire_and_stop() {
    let weir = h2c_weir("8s");
    let addr = weir.addr();
    let (mut woken, mut pinged, mut split) = (served(addr), served(addr), served(addr));
    // Its wait starts as its answer is read: opened last, just before the clock starts.
    let mut expiring = served(addr);
    let idle_since = Instant::now();
    let abandoned = served(addr);
    std::thread::sleep(Duration::from_millis(1600));
    await_parked(&weir, 5);
    // A client that vanishes while parked costs nothing and breaks nothing.
    drop(abandoned);
    // A parked connection serves its next request with the HPACK table it had.
    assert_eq!(woken.indexed(3), "kept");
    // A PING wakes it and is answered; the connection goes on.
    pinged.ping();
    assert_eq!(pinged.indexed(3), "kept");
    // A HEADERS frame in two writes, a pause between.
    let frame =
        H2::<TcpStream>::frame_bytes(HEADERS, END_STREAM | END_HEADERS, 3, &indexed_block(6));
    split.write(&frame[..7]);
    std::thread::sleep(Duration::from_millis(300));
    split.write(&frame[7..]);
    let (status, body) = split.answer(3);
    assert_eq!((status, body.as_str()), (200, "kept"));
    // A woken connection parks again and wakes again, its table still in step.
    std::thread::sleep(Duration::from_millis(1600));
    await_parked(&weir, 4);
    assert_eq!(woken.indexed(5), "kept");
    assert_eq!(woken.indexed(7), "kept");
    // The idle timeout counts from the start of the wait, parked or not.
    closed_by_idle_timeout(&mut expiring, idle_since, 8);
    drop((pinged, split, woken));

    // A reload leaves parked connections parked; woken, one serves from the new config.
    let mut weir = weir;
    let mut parked = served(addr);
    let mut reloaded = served(addr);
    std::thread::sleep(Duration::from_millis(1600));
    await_parked(&weir, 2);
    let config = std::fs::read_to_string(weir.config_path()).unwrap();
    std::fs::write(
        weir.config_path(),
        config.replace("body: kept", "body: kept anew"),
    )
    .unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    assert_eq!(weir.parked(), 2);
    assert_eq!(reloaded.indexed(3), "kept anew");
    // A stop hands parked connections a task again: GOAWAY, then the close.
    std::thread::sleep(Duration::from_millis(1600));
    await_parked(&weir, 2);
    let stopping = Instant::now();
    weir.signal("TERM");
    said_goaway(&parked.until_closed());
    said_goaway(&reloaded.until_closed());
    assert!(
        stopping.elapsed() < Duration::from_millis(2500),
        "{:?}",
        stopping.elapsed()
    );
    assert!(weir.child.wait().unwrap().success());
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

#[test]
fn parked_h2_over_tls_keeps_its_session_and_table() {
    let dir = temp_dir("parked-h2-tls");
    let cert = make_cert(&dir, "parked", &["parked.test"], false);
    let weir = Weir::start(&format!(
        "server: {{ workers: 1, client_idle_timeout: 7s, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n{ROUTERS}",
        cert.cert.display(),
        cert.key.display()
    ));
    let client = tls13_client(&cert.cert, b"h2");
    let open = || -> H2<TlsStream> {
        let tcp = TcpStream::connect(weir.addr()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let session =
            rustls::ClientConnection::new(client.clone(), "parked.test".try_into().unwrap())
                .unwrap();
        let mut conn = H2::start(rustls::StreamOwned::new(session, tcp), 7);
        assert_eq!(conn.first(), "kept");
        assert_eq!(conn.io.conn.alpn_protocol(), Some(&b"h2"[..]));
        conn
    };
    let (mut woken, mut expiring) = (open(), open());
    let idle_since = Instant::now();
    std::thread::sleep(Duration::from_millis(1600));
    await_parked(&weir, 2);
    // The session's keys and sequence numbers, and the HPACK table, go on.
    assert_eq!(woken.indexed(3), "kept");
    std::thread::sleep(Duration::from_millis(1300));
    await_parked(&weir, 2);
    assert_eq!(woken.indexed(5), "kept");
    closed_by_idle_timeout(&mut expiring, idle_since, 7);
}

#[test]
fn a_parked_h2c_connection_keeps_only_its_codec_state() {
    // In its task an idle h2c connection held 2.0 KB (bench/run idle): the task and its
    // future, the connection's shared state and deadline watch, the socket's tokio
    // registration (3.1 KB in this debug build). Parked, its slot and the boxed codec state
    // (0.6-0.9 KB here). A bound on gross leftovers: a debug build lays memory out otherwise
    // than the release one.
    let weir = h2c_weir("60s");
    let addr = weir.addr();
    // As the bench's clients: nothing added to the HPACK table, whose entries (kept while
    // parked) would count here with the allocator pages they pin.
    let served = |addr| {
        let mut conn = h2c(addr);
        assert_eq!(conn.get(1, &[0x82, 0x86, 0x84, 0x01, 1, b't']), "ok");
        conn
    };
    let per_connection = weir.rss_per_parked(3000, || served(addr));
    println!("{per_connection:.2} KB per parked h2c connection");
    assert!(
        per_connection < 1.6,
        "{per_connection:.2} KB per parked h2c connection"
    );
}
