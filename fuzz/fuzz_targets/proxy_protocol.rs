//! Fuzz target: the PROXY protocol header weir writes to a TCP service (`l4::proxy_protocol`).
//! weir has no PROXY protocol reader (it only sends the header), so this target checks the
//! writer instead: for any version and pair of addresses (IPv4, IPv6 or IPv4-mapped, drawn from
//! the input), the header is well-formed per HAProxy's spec, as read back by a reader written
//! here from the spec, and names the same addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use weir_proxy::fuzzing::proxy_protocol_header;

const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// An address from the input: its first byte picks IPv4, IPv4-mapped IPv6 or IPv6.
fn address(input: &mut &[u8]) -> Option<SocketAddr> {
    let (&kind, rest) = input.split_first()?;
    let (port, rest) = rest.split_first_chunk::<2>()?;
    let port = u16::from_be_bytes(*port);
    let (ip, rest): (IpAddr, &[u8]) = match kind % 3 {
        0 => {
            let (octets, rest) = rest.split_first_chunk::<4>()?;
            (Ipv4Addr::from(*octets).into(), rest)
        }
        1 => {
            let (octets, rest) = rest.split_first_chunk::<4>()?;
            (Ipv4Addr::from(*octets).to_ipv6_mapped().into(), rest)
        }
        _ => {
            let (octets, rest) = rest.split_first_chunk::<16>()?;
            (Ipv6Addr::from(*octets).into(), rest)
        }
    };
    *input = rest;
    Some(SocketAddr::new(ip, port))
}

/// How the header must name an address: IPv4-mapped IPv6 as plain IPv4.
fn unmapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// Version 1: `PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n` or `PROXY UNKNOWN\r\n`, at most 107
/// bytes. `None` for UNKNOWN.
fn read_v1(header: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    assert!(header.len() <= 107, "a version 1 header over 107 bytes");
    let line = std::str::from_utf8(header).expect("version 1 is text");
    let line = line.strip_suffix("\r\n").expect("ends in CRLF");
    assert!(!line.contains(['\r', '\n']));
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[0], "PROXY");
    if fields[1..] == ["UNKNOWN"] {
        return None;
    }
    let [_, family, src, dst, sport, dport] = fields[..] else {
        panic!("version 1 header with {} fields", fields.len());
    };
    let ip = |text: &str| -> IpAddr {
        let ip: IpAddr = text.parse().expect("an address");
        match family {
            "TCP4" => assert!(ip.is_ipv4()),
            "TCP6" => assert!(ip.is_ipv6()),
            other => panic!("family {other}"),
        }
        ip
    };
    let port = |text: &str| -> u16 {
        assert!(
            text == "0" || !text.starts_with('0'),
            "port {text} with a leading zero"
        );
        text.parse().expect("a port")
    };
    Some((
        SocketAddr::new(ip(src), port(sport)),
        SocketAddr::new(ip(dst), port(dport)),
    ))
}

/// Version 2: signature, version and command, family, length, addresses. `None` for
/// AF_UNSPEC.
fn read_v2(header: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    assert_eq!(&header[..12], V2_SIGNATURE);
    assert_eq!(header[12], 0x21, "version 2, PROXY command");
    let len = usize::from(u16::from_be_bytes([header[14], header[15]]));
    assert_eq!(header.len(), 16 + len, "length field");
    let body = &header[16..];
    let port = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
    match header[13] {
        0x00 => {
            assert_eq!(len, 0);
            None
        }
        0x11 => {
            assert_eq!(len, 12);
            let ip = |at: usize| IpAddr::from(<[u8; 4]>::try_from(&body[at..at + 4]).unwrap());
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        0x21 => {
            assert_eq!(len, 36);
            let ip = |at: usize| IpAddr::from(<[u8; 16]>::try_from(&body[at..at + 16]).unwrap());
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        other => panic!("family and protocol byte {other:#x}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&version, mut rest)) = data.split_first() else {
        return;
    };
    let (Some(client), Some(local)) = (address(&mut rest), address(&mut rest)) else {
        return;
    };
    let header = proxy_protocol_header(version, client, local);
    let read = if version == 1 {
        read_v1(&header)
    } else {
        read_v2(&header)
    };
    let (client, local) = (unmapped(client), unmapped(local));
    let same_family = client.is_ipv4() == local.is_ipv4();
    match read {
        Some(addresses) => {
            assert!(same_family);
            assert_eq!(addresses, (client, local));
        }
        None => assert!(!same_family, "addresses of one family left unsaid"),
    }
});
