//! Idle HTTP/1.1 connections over TLS 1.3 park as plain ones do (io/idle.rs: no task, the
//! session boxed, the socket out of the reactor) and must behave exactly as before across that
//! boundary: woken by the next request, pipelined requests, a head or a body split across
//! records and pauses, clients that vanish, the idle timeout and the head deadline counted as
//! before, a stop's grace. Real rustls clients over blocking sockets against the real binary;
//! `weir_connections_parked` shows that the connections did park.

mod common;
use common::*;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS 1.3 client connection (ALPN http/1.1) reading HTTP/1.1 answers.
struct TlsConn {
    reader: BufReader<TlsStream>,
}

impl TlsConn {
    fn open(addr: SocketAddr, client: &Arc<rustls::ClientConfig>) -> TlsConn {
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let name = "parked.test".try_into().unwrap();
        let session = rustls::ClientConnection::new(client.clone(), name).unwrap();
        TlsConn {
            reader: BufReader::new(rustls::StreamOwned::new(session, tcp)),
        }
    }

    /// A connection that has had one request answered and waits for the next.
    fn served(addr: SocketAddr, client: &Arc<rustls::ClientConfig>) -> TlsConn {
        let mut conn = TlsConn::open(addr, client);
        conn.send(REQUEST);
        assert_eq!(conn.body(), "ok");
        conn
    }

    fn send(&mut self, raw: &[u8]) {
        let stream = self.reader.get_mut();
        stream.write_all(raw).unwrap();
        stream.flush().unwrap();
    }

    fn read(&mut self) -> Option<Resp> {
        read_response(&mut self.reader, false)
    }

    fn body(&mut self) -> String {
        let answer = self.read().expect("an answer");
        assert_eq!(answer.status, 200);
        answer.text()
    }

    /// True when weir has closed the connection (EOF, with or without close_notify).
    fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.reader.read(&mut byte), Ok(0) | Err(_))
    }
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";

/// weir with a TLS entrypoint `web` (answering `ok`, `client_idle_timeout` as given) and an
/// admin listener, and a TLS 1.3 client configuration that trusts its certificate.
fn weir_and_client(tag: &str, idle_timeout: &str) -> (Weir, Arc<rustls::ClientConfig>) {
    let dir = temp_dir(tag);
    let cert = make_cert(&dir, "parked", &["parked.test"], false);
    let weir = Weir::start(&format!(
        "server: {{ workers: 1, client_idle_timeout: {idle_timeout}, admin: {{ address: \"127.0.0.1:0\" }} }}\n\
         entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n\
         routers:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    respond: {{ body: ok }}\n",
        cert.cert.display(),
        cert.key.display()
    ));
    let client = tls13_client(&cert.cert, b"http/1.1");
    (weir, client)
}

#[test]
fn parked_tls_connections_wake_expire_and_stop() {
    let (mut weir, client) = weir_and_client("parked-tls", "4s");
    let addr = weir.addr();
    let open = || TlsConn::served(addr, &client);
    let (mut woken, mut pipelined, mut split) = (open(), open(), open());
    let (mut slow, mut with_body) = (open(), open());
    // Its wait starts as its answer is read: opened last, just before the clock starts.
    let mut expiring = open();
    let idle_since = Instant::now();
    let abandoned = open();
    std::thread::sleep(Duration::from_millis(1600));
    // All seven wait without a task (a loaded machine may park them a tick or two late).
    let parked = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            weir.parked()
        })
        .find(|&n| n == 7);
    assert_eq!(parked, Some(7), "TLS connections idle for a second park");
    // A client that vanishes while parked (no close_notify) costs nothing and breaks nothing.
    drop(abandoned);
    // A parked connection serves its next request with the session it had: the sequence
    // numbers and keys go on.
    woken.send(REQUEST);
    assert_eq!(woken.body(), "ok");
    // Two pipelined requests in one record, and a head that arrives in two records.
    pipelined.send(&[REQUEST, REQUEST].concat());
    assert_eq!(pipelined.body(), "ok");
    assert_eq!(pipelined.body(), "ok");
    split.send(b"GET / HTTP/1.1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    split.send(b"Host: t\r\n\r\n");
    assert_eq!(split.body(), "ok");
    // A 64 KB body across many records after the wake is read (and dropped) before the answer.
    let body = vec![b'x'; 64 * 1024];
    with_body.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 65536\r\n\r\n");
    for chunk in body.chunks(5000) {
        with_body.send(chunk);
    }
    assert_eq!(with_body.body(), "ok");
    // A woken connection parks again and wakes again.
    std::thread::sleep(Duration::from_millis(1300));
    woken.send(REQUEST);
    assert_eq!(woken.body(), "ok");
    // A head that never completes after the wake gets 408 once the head deadline passes.
    slow.send(b"GET / HTTP/1.1\r\n");
    let slow_since = Instant::now();
    // The idle timeout counts from the start of the wait, parked or not.
    assert!(expiring.is_closed());
    let waited = idle_since.elapsed();
    assert!(
        waited >= Duration::from_millis(4000) && waited < Duration::from_millis(5500),
        "{waited:?}"
    );
    assert_eq!(slow.read().expect("a 408").status, 408);
    assert!(slow_since.elapsed() >= Duration::from_millis(3900));
    assert!(slow.is_closed());
    drop((pipelined, split, with_body));
    // A stop gives parked connections the drain's grace (1 s): a request sent within it is
    // answered with `Connection: close`; a connection still idle after it is closed.
    let (mut parked, mut late) = (open(), open());
    std::thread::sleep(Duration::from_millis(1600));
    let stopping = Instant::now();
    weir.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    late.send(REQUEST);
    let answer = late.read().expect("an answer within the grace");
    assert_eq!((answer.status, answer.text().as_str()), (200, "ok"));
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(late.is_closed());
    assert!(parked.is_closed());
    let closed_after = stopping.elapsed();
    assert!(
        closed_after >= Duration::from_millis(1000) && closed_after < Duration::from_millis(2500),
        "{closed_after:?}"
    );
    assert!(woken.is_closed());
    drop((parked, woken));
    assert!(weir.child.wait().unwrap().success());
}

#[test]
fn a_parked_tls_connection_keeps_only_its_session() {
    // Served idle in its task, a TLS connection held about 20 KB (bench/run idle); parked, the
    // rustls session and its 4 KB record buffer, about 8. A bound on gross leftovers: a debug
    // build lays memory out otherwise than the release one, where a waker left in the socket's
    // registration kept the ended task and 12 KB with it (this build shows 0.6 KB of that).
    let (weir, client) = weir_and_client("parked-tls-memory", "60s");
    let addr = weir.addr();
    let per_connection = weir.rss_per_parked(400, || TlsConn::served(addr, &client));
    assert!(
        per_connection < 13.0,
        "{per_connection:.2} KB per parked TLS connection"
    );
}
