//! The PROXY protocol header (HAProxy's spec, versions 1 and 2) that tells a TCP service
//! who the client is: written to the server before any of the client's bytes.

use std::net::SocketAddr;

/// The twelve bytes every version 2 header starts with.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The header for a connection from `client` that arrived at `local`.
pub fn header(version: u8, client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    // An IPv4 client on a dual-stack socket shows as ::ffff:a.b.c.d: say it as IPv4.
    let unmap = |a: SocketAddr| match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    };
    let (client, local) = (unmap(client), unmap(local));
    if version == 1 {
        let family = match (client, local) {
            (SocketAddr::V4(_), SocketAddr::V4(_)) => "TCP4",
            (SocketAddr::V6(_), SocketAddr::V6(_)) => "TCP6",
            _ => return b"PROXY UNKNOWN\r\n".to_vec(),
        };
        return format!(
            "PROXY {family} {} {} {} {}\r\n",
            client.ip(),
            local.ip(),
            client.port(),
            local.port()
        )
        .into_bytes();
    }
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x21); // version 2, PROXY command
    match (client, local) {
        (SocketAddr::V4(c), SocketAddr::V4(l)) => {
            out.push(0x11); // TCP over IPv4
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&c.ip().octets());
            out.extend_from_slice(&l.ip().octets());
        }
        (SocketAddr::V6(c), SocketAddr::V6(l)) => {
            out.push(0x21); // TCP over IPv6
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&c.ip().octets());
            out.extend_from_slice(&l.ip().octets());
        }
        _ => {
            out.push(0x00); // unspecified: the server uses the connection's own addresses
            out.extend_from_slice(&0u16.to_be_bytes());
            return out;
        }
    }
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&local.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_is_one_text_line() {
        let h = header(
            1,
            "10.1.2.3:5555".parse().unwrap(),
            "10.0.0.1:443".parse().unwrap(),
        );
        assert_eq!(h, b"PROXY TCP4 10.1.2.3 10.0.0.1 5555 443\r\n");
        let h = header(
            1,
            "[::ffff:10.1.2.3]:5555".parse().unwrap(),
            "[::ffff:10.0.0.1]:443".parse().unwrap(),
        );
        assert_eq!(h, b"PROXY TCP4 10.1.2.3 10.0.0.1 5555 443\r\n");
        let h = header(
            1,
            "[2001:db8::1]:5555".parse().unwrap(),
            "[::1]:443".parse().unwrap(),
        );
        assert_eq!(h, b"PROXY TCP6 2001:db8::1 ::1 5555 443\r\n");
    }

    #[test]
    fn version_2_is_binary() {
        let h = header(
            2,
            "10.1.2.3:5555".parse().unwrap(),
            "10.0.0.1:443".parse().unwrap(),
        );
        assert_eq!(&h[..12], &V2_SIGNATURE);
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..20], &[10, 1, 2, 3]);
        assert_eq!(&h[20..24], &[10, 0, 0, 1]);
        assert_eq!(&h[24..28], &[0x15, 0xb3, 0x01, 0xbb]);
        assert_eq!(h.len(), 28);
        let h6 = header(
            2,
            "[2001:db8::1]:1".parse().unwrap(),
            "[::1]:2".parse().unwrap(),
        );
        assert_eq!(h6.len(), 16 + 36);
    }
}
