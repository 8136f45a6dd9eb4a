//! Hostile clients on every kind of entrypoint (plain HTTP/1.1, h2c, TLS with and without TCP
//! routers, a TCP router, a TCP router whose service sends the PROXY header, UDP): partial
//! request heads, partial ClientHellos, partial HTTP/2 prefaces and partial PROXY headers, 50 of
//! each at once, then left silent, half-closed or closed. While they sit there weir must use
//! next to no CPU (a detect loop that spins on a closed socket fails this clearly), serve
//! normal clients of every kind, and close each half-closed one before its timeout and each
//! silent one within it. (weir reads no PROXY header from clients: a partial one is just
//! bytes that are not yet a request, a ClientHello or a preface.)

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Copies of each hostile client per payload, ending and entrypoint.
const EACH: usize = 50;
/// `client_idle_timeout`, `handshake_timeout` and the TCP services' idle timeout.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The sweep fires a deadline up to two ticks late; a relay's idle time counts from the echo
/// of the payload; and a busy machine may take a while to accept thousands of connections.
const LATE: Duration = Duration::from_secs(2);
/// The most weir may use, in percent of one core, while the hostile clients sit there.
const CPU_LIMIT_PERCENT: f64 = 15.0;

/// First bytes that never become whole.
const PAYLOADS: [(&str, &[u8]); 5] = [
    (
        "partial head",
        b"GET / HTTP/1.1\r\nHost: hostile.example\r\nAcc",
    ),
    // A ClientHello's record and handshake headers, promising 256 bytes that never come.
    (
        "partial ClientHello",
        &[
            0x16, 0x03, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0xfc, 0x03, 0x03,
        ],
    ),
    ("partial HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM"),
    ("partial PROXY v1 header", b"PROXY TCP4 203.0.113.7 19"),
    (
        "partial PROXY v2 header",
        b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00",
    ),
];

/// A whole ClientHello for `name` (Python's ssl module writes it), and no more of the
/// handshake.
fn client_hello(name: &str) -> Vec<u8> {
    python(
        "import ssl, sys
ctx = ssl.create_default_context()
incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ctx.wrap_bio(incoming, outgoing, server_hostname=sys.argv[1])
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
sys.stdout.buffer.write(outgoing.read())",
        &[name],
    )
}

#[derive(Debug, Clone, Copy)]
enum Ending {
    Silent,
    HalfClosed,
    Closed,
}

/// A hostile connection still open on the client's side.
struct Held {
    io: TcpStream,
    what: String,
    /// By when weir must have closed it.
    deadline: Instant,
}

/// Notes when weir closes each connection it is given (EOF or reset), on a runtime of its own,
/// so the time is right however long the test takes to look. Returns, once the channel is
/// closed and every connection has closed or passed its deadline, the ones that were late.
fn watch_closes() -> (
    tokio::sync::mpsc::UnboundedSender<Held>,
    std::thread::JoinHandle<Vec<String>>,
) {
    let (sender, mut held) = tokio::sync::mpsc::unbounded_channel::<Held>();
    let watching = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut tasks = Vec::new();
            while let Some(Held { io, what, deadline }) = held.recv().await {
                tasks.push(tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    io.set_nonblocking(true).unwrap();
                    let mut io = tokio::net::TcpStream::from_std(io).unwrap();
                    let mut buf = [0u8; 4096];
                    // What weir answers first (a 408, a 400, an echo) is read and dropped.
                    let until_closed = async { while let Ok(1..) = io.read(&mut buf).await {} };
                    let closed = tokio::time::timeout_at(deadline.into(), until_closed).await;
                    closed.is_err().then_some(what)
                }));
            }
            let mut late = Vec::new();
            for task in tasks {
                late.extend(task.await.unwrap());
            }
            late
        })
    });
    (sender, watching)
}

/// An echo server for the TCP routers, on a runtime of its own: hundreds of connections.
fn tcp_echo() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((mut io, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut from, mut to) = io.split();
                    let _ = tokio::io::copy(&mut from, &mut to).await;
                });
            }
        });
    });
    addr
}

/// A UDP server answering each datagram with `echo: PAYLOAD`.
fn udp_echo() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let mut reply = b"echo: ".to_vec();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, peer);
        }
    });
    addr
}

/// The process's user and system CPU time so far, from `/proc/PID/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses: utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second: u64 = String::from_utf8(stdout_of(
        std::process::Command::new("getconf").arg("CLK_TCK"),
        "getconf",
    ))
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    Duration::from_micros(ticks * 1_000_000 / per_second)
}

#[test]
fn hostile_clients_cost_nothing_and_are_closed_in_time() {
    let dir = temp_dir("hostile");
    let cert = make_cert(&dir, "own", &["own.example"], false);
    let echo = tcp_echo();
    let udp = udp_echo();
    let certs = format!(
        "certificates: [{{ cert: \"{}\", key: \"{}\" }}], handshake_timeout: 2s",
        cert.cert.display(),
        cert.key.display()
    );
    let yaml = format!(
        "server: {{ workers: 2, client_idle_timeout: 2s }}
entrypoints:
  web: {{ address: \"127.0.0.1:0\" }}
  h2c: {{ address: \"127.0.0.1:0\", h2c: true }}
  tls: {{ address: \"127.0.0.1:0\", tls: {{ {certs} }} }}
  tls_tcp: {{ address: \"127.0.0.1:0\", tls: {{ {certs} }} }}
  tcp: {{ address: \"127.0.0.1:0\" }}
  proxied: {{ address: \"127.0.0.1:0\" }}
  dns: {{ address: \"127.0.0.1:0/udp\" }}
routers:
  own: {{ entrypoints: [web, h2c, tls, tls_tcp], rule: \"PathPrefix(`/`)\", respond: {{ body: served }} }}
tcp:
  routers:
    sni: {{ entrypoints: [tls_tcp], rule: \"HostSNI(`pass.example`)\", tls: {{ passthrough: true }}, service: echo }}
    term: {{ entrypoints: [tls_tcp], rule: \"HostSNI(`term.example`)\", service: echo }}
    all: {{ entrypoints: [tcp], rule: \"HostSNI(`*`)\", service: echo }}
    pp: {{ entrypoints: [proxied], rule: \"HostSNI(`*`)\", service: pp }}
  services:
    echo: {{ servers: [{{ address: \"{echo}\" }}], timeouts: {{ idle: 2s }} }}
    pp: {{ servers: [{{ address: \"{echo}\" }}], proxy_protocol: {{ version: 2 }}, timeouts: {{ idle: 2s }} }}
udp:
  routers:
    u: {{ entrypoints: [dns], service: u }}
  services:
    u: {{ servers: [{{ address: \"{udp}\" }}] }}
"
    );
    let weir = Weir::start(&yaml);
    let pid = weir.child.id();
    let tcp_entrypoints = ["web", "h2c", "tls", "tls_tcp", "tcp", "proxied"];
    // On `tls_tcp` this hello takes the router that terminates TLS, which then waits for the
    // rest of the handshake.
    let whole_hello = client_hello("term.example");
    let mut payloads = PAYLOADS.to_vec();
    payloads.push(("whole ClientHello, no more", &whole_hello));

    // Every hostile client at once: each entrypoint, payload and ending, EACH times.
    let started = Instant::now();
    let (held, closes) = watch_closes();
    let mut holding = 0;
    let mut udp_clients = Vec::new();
    for name in tcp_entrypoints {
        for &(kind, payload) in &payloads {
            for ending in [Ending::Silent, Ending::HalfClosed, Ending::Closed] {
                for _ in 0..EACH {
                    let opened = Instant::now();
                    let mut io = TcpStream::connect(weir.addrs[name]).unwrap();
                    io.write_all(payload).unwrap();
                    // Weir's timeouts count from the accept, after `opened`: a half-closed
                    // connection closed before its timeout was closed for its close.
                    let deadline = match ending {
                        Ending::Closed => continue,
                        Ending::HalfClosed => {
                            io.shutdown(Shutdown::Write).unwrap();
                            opened + TIMEOUT - Duration::from_millis(100)
                        }
                        Ending::Silent => opened + TIMEOUT + LATE,
                    };
                    let what = format!("{name}: {kind}, {ending:?}");
                    holding += 1;
                    held.send(Held { io, what, deadline }).unwrap();
                }
            }
        }
    }
    // UDP has no partial datagram: empty ones, a byte, half a DNS header.
    for payload in [&b""[..], b"\x00", b"\x12\x34\x01\x00\x00"] {
        for _ in 0..EACH {
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            client.send_to(payload, weir.addrs["dns"]).unwrap();
            udp_clients.push(client);
        }
    }
    let connecting = started.elapsed();

    // Let weir take them all in, then watch it while they sit there.
    std::thread::sleep(Duration::from_millis(300));
    let (cpu_before, at) = (cpu_time(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time(pid) - cpu_before;
    let percent = 100.0 * used.as_secs_f64() / at.elapsed().as_secs_f64();
    assert!(
        percent < CPU_LIMIT_PERCENT,
        "weir used {percent:.0}% of a core ({used:?}) while {holding} hostile clients sat idle"
    );

    println!("hostile clients sent in {connecting:?}; weir used {percent:.1}% of a core");

    // Normal clients of every kind are served meanwhile.
    for name in ["web", "h2c"] {
        let resp = get(weir.addrs[name], "own.example", "/");
        assert_eq!(
            (resp.status, resp.text().as_str()),
            (200, "served"),
            "{name}"
        );
    }
    let h2c = format!("http://127.0.0.1:{}/", weir.addrs["h2c"].port());
    let body = curl_ok(&["--max-time", "5", "--http2-prior-knowledge", &h2c]);
    assert_eq!(body, b"served");
    for name in ["tls", "tls_tcp"] {
        let (ok, body) = curl_https(weir.addrs[name].port(), "own.example", &cert.cert);
        assert!(ok && body == "served", "{name}: {body}");
    }
    for name in ["tcp", "proxied"] {
        let mut c = TcpStream::connect(weir.addrs[name]).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        c.write_all(b"ping").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert!(back.ends_with(b"ping"), "{name}: {back:?}");
    }
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    client.send_to(b"hello", weir.addrs["dns"]).unwrap();
    let mut buf = [0u8; 64];
    let n = client.recv(&mut buf).expect("a UDP answer");
    assert_eq!(&buf[..n], b"echo: hello");
    // Each held connection is closed: a half-closed one before its timeout (nothing can
    // complete it), a silent one within its timeout.
    drop(held);
    let late = closes.join().unwrap();
    assert!(
        late.is_empty(),
        "{} of {holding} connections not closed in time, e.g. {:?}",
        late.len(),
        &late[..late.len().min(10)]
    );
}
