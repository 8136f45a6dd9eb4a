//! UDP routers on the real binary: DNS through weir to Debian's dnsmasq queried with dig, and
//! against in-process UDP servers: datagrams never merged or split, a session per client held
//! on one server (round robin across clients), `session_timeout` expiry, and `max_sessions`
//! ending the oldest session first under a flood of source ports.

mod common;
use common::*;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A UDP server on a thread answering each datagram with `NAME PEER_PORT PAYLOAD`.
fn udp_echo(name: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let mut reply = format!("{name} {} ", peer.port()).into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, peer);
        }
    });
    addr
}

fn udp_config(servers: &[SocketAddr], service_extra: &str) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|s| format!("{{ address: \"{s}\" }}"))
        .collect();
    format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  dns: {{ address: \"127.0.0.1:0/udp\" }}\nudp:\n  routers:\n    r: {{ entrypoints: [dns], service: s }}\n  services:\n    s: {{ servers: [{}]{service_extra} }}\n",
        list.join(", ")
    )
}

/// Sends `payload` from `client` to weir and returns the reply's server name and the port the
/// server saw (weir's session socket).
fn ask(client: &UdpSocket, weir: SocketAddr, payload: &[u8]) -> (String, u16) {
    client.send_to(payload, weir).unwrap();
    let mut buf = [0u8; 65536];
    let (n, from) = client.recv_from(&mut buf).expect("a reply");
    assert_eq!(from, weir, "replies come from the entrypoint's address");
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    let mut parts = text.splitn(3, ' ');
    let name = parts.next().unwrap().to_string();
    let port = parts.next().unwrap().parse().unwrap();
    assert_eq!(parts.next().unwrap().as_bytes(), payload);
    (name, port)
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

struct Dnsmasq(Child);

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dns_through_weir_to_dnsmasq() {
    let dir = temp_dir("udp-dns");
    let port = free_port();
    let dnsmasq = Dnsmasq(
        Command::new("dnsmasq")
            .args([
                "-k",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--no-resolv",
                "--no-hosts",
            ])
            .arg(format!("--port={port}"))
            .arg("--address=/weir.test/10.1.2.3")
            .arg("--user=root")
            .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq must be installed (scripts/test installs dnsmasq-base)"),
    );
    let server: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let weir = Weir::start(&udp_config(&[server], ""));
    let dig = |name: &str| {
        let out = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &weir.addrs["dns"].port().to_string(),
                name,
                "+short",
                "+tries=5",
                "+time=1",
            ])
            .output()
            .expect("dig must be installed (scripts/test installs bind9-dnsutils)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // dnsmasq may still be starting: the first query retries.
    assert_eq!(dig("weir.test"), "10.1.2.3");
    assert_eq!(dig("www.weir.test"), "10.1.2.3");
    drop(dnsmasq);
}

#[test]
fn datagrams_sessions_and_balancing() {
    let one = udp_echo("one");
    let two = udp_echo("two");
    let weir = Weir::start(&udp_config(&[one, two], ""));
    let addr = weir.addrs["dns"];
    let a = client();
    let (server_a, port_a) = ask(&a, addr, b"first");
    // Many datagrams back to back: each arrives alone and whole, on the same session.
    for i in 0..50 {
        a.send_to(format!("d{i}").as_bytes(), addr).unwrap();
    }
    let mut seen = Vec::new();
    let mut buf = [0u8; 65536];
    for _ in 0..50 {
        let (n, _) = a.recv_from(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(
            text.starts_with(&format!("{server_a} {port_a} d")),
            "{text}"
        );
        seen.push(text.rsplit(' ').next().unwrap().to_string());
    }
    seen.sort();
    let mut want: Vec<String> = (0..50).map(|i| format!("d{i}")).collect();
    want.sort();
    assert_eq!(seen, want);
    // A large datagram is not split.
    let big = vec![b'z'; 60_000];
    assert_eq!(ask(&a, addr, &big), (server_a.clone(), port_a));
    // The next client's session goes to the other server (round robin per session).
    let b = client();
    let (server_b, port_b) = ask(&b, addr, b"hello");
    assert_ne!(server_a, server_b);
    assert_ne!(port_a, port_b);
    assert_eq!(ask(&b, addr, b"again"), (server_b, port_b));
}

#[test]
fn sessions_expire_and_the_oldest_make_room() {
    let echo = udp_echo("e");
    let weir = Weir::start(&udp_config(
        &[echo],
        ", session_timeout: 1s, max_sessions: 2",
    ));
    let addr = weir.addrs["dns"];
    let a = client();
    let (_, first) = ask(&a, addr, b"1");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ask(&a, addr, b"2").1, first, "still the same session");
    // Idle past the timeout: a new session (a new socket towards the server).
    std::thread::sleep(Duration::from_millis(1600));
    let (_, renewed) = ask(&a, addr, b"3");
    assert_ne!(renewed, first);
    // Two more clients with a cap of two: a's session (the oldest) ends to make room.
    let b = client();
    let c = client();
    let (_, port_b) = ask(&b, addr, b"b");
    let (_, port_c) = ask(&c, addr, b"c");
    assert_eq!(ask(&c, addr, b"c2").1, port_c);
    let (_, after) = ask(&a, addr, b"4");
    assert_ne!(after, renewed, "a's session was ended for room");
    // ... which in turn ended b's, now the oldest; c's goes on.
    assert_ne!(ask(&b, addr, b"b2").1, port_b);
    // A flood from many source ports keeps at most two sessions, and weir keeps serving.
    let flood: Vec<UdpSocket> = (0..200).map(|_| client()).collect();
    for f in &flood {
        f.send_to(b"flood", addr).unwrap();
    }
    let answered = flood
        .iter()
        .filter(|f| {
            let mut buf = [0u8; 100];
            f.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            f.recv_from(&mut buf).is_ok()
        })
        .count();
    assert!(answered > 150, "{answered} of 200 answered");
    assert!(ask(&a, addr, b"5").0 == "e");
}
