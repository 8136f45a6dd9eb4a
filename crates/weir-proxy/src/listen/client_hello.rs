//! Reading a TLS ClientHello's server name (SNI) and ALPN protocols from bytes peeked off a
//! connection, without consuming them: what TCP routers match on. The hello may span several
//! TLS records and arrive in many segments; the caller peeks again until this says it is
//! complete.

/// Bytes peeked at most while waiting for a complete ClientHello (records of 16 KiB; real
/// hellos, post-quantum key shares included, are a few KiB).
pub const MAX_HELLO_BYTES: usize = 32 * 1024;

/// What the first bytes of a connection say.
#[derive(Debug, PartialEq, Eq)]
pub enum Peeked {
    /// Not a TLS handshake (plain bytes: HTTP, Redis, ...).
    NotTls,
    /// TLS, but the hello is not complete yet: peek more.
    Incomplete,
    /// TLS whose hello could not be read (malformed, or longer than [`MAX_HELLO_BYTES`]).
    Unreadable,
    Hello(Hello),
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The server name, lowercased, without a trailing dot.
    pub sni: Option<String>,
    pub alpn: Vec<String>,
}

const HANDSHAKE_RECORD: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;

pub fn parse(bytes: &[u8]) -> Peeked {
    let Some(&first) = bytes.first() else {
        return Peeked::Incomplete;
    };
    if first != HANDSHAKE_RECORD {
        return Peeked::NotTls;
    }
    // Join the handshake records' payloads until the hello's declared length is there.
    let mut message = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = bytes.get(at..at + 5) else {
            return incomplete(bytes);
        };
        if header[0] != HANDSHAKE_RECORD || header[1] != 3 {
            return Peeked::Unreadable;
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        let Some(payload) = bytes.get(at + 5..at + 5 + len) else {
            message.extend_from_slice(&bytes[(at + 5).min(bytes.len())..]);
            if message.len() >= 4 && message[0] != CLIENT_HELLO {
                return Peeked::Unreadable;
            }
            return incomplete(bytes);
        };
        message.extend_from_slice(payload);
        at += 5 + len;
        if message.len() >= 4 {
            if message[0] != CLIENT_HELLO {
                return Peeked::Unreadable;
            }
            let want = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            if message.len() >= 4 + want {
                return match hello(&message[4..4 + want]) {
                    Some(hello) => Peeked::Hello(hello),
                    None => Peeked::Unreadable,
                };
            }
        }
    }
}

fn incomplete(bytes: &[u8]) -> Peeked {
    if bytes.len() >= MAX_HELLO_BYTES {
        Peeked::Unreadable
    } else {
        Peeked::Incomplete
    }
}

/// A cursor over a hello's fields; `None` from any read means malformed.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| b[0] as usize)
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    /// A field preceded by its one- or two-byte length.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

fn hello(body: &[u8]) -> Option<Hello> {
    let mut f = Fields(body);
    f.take(2 + 32)?; // legacy version, random
    f.vec8()?; // session id
    f.vec16()?; // cipher suites
    f.vec8()?; // compression methods
    let mut hello = Hello::default();
    if f.0.is_empty() {
        return Some(hello); // no extensions at all
    }
    let mut exts = Fields(f.vec16()?);
    while !exts.0.is_empty() {
        let kind = exts.u16()? as u16;
        let mut data = Fields(exts.vec16()?);
        match kind {
            EXT_SERVER_NAME => {
                let mut names = Fields(data.vec16()?);
                while !names.0.is_empty() {
                    let name_type = names.u8()?;
                    let name = names.vec16()?;
                    if name_type == 0 && hello.sni.is_none() {
                        let name = std::str::from_utf8(name).ok()?;
                        let name = name.strip_suffix('.').unwrap_or(name);
                        hello.sni = Some(name.to_ascii_lowercase());
                    }
                }
            }
            EXT_ALPN => {
                let mut protocols = Fields(data.vec16()?);
                while !protocols.0.is_empty() {
                    let protocol = protocols.vec8()?;
                    hello
                        .alpn
                        .push(String::from_utf8_lossy(protocol).into_owned());
                }
            }
            _ => {}
        }
    }
    Some(hello)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as a client library writes it, from rustls.
    fn real_hello(sni: &str, alpn: &[&str]) -> Vec<u8> {
        use std::sync::Arc;
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots_none());
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    fn webpki_roots_none() -> Vec<rustls::pki_types::TrustAnchor<'static>> {
        Vec::new()
    }

    #[test]
    fn reads_sni_and_alpn_of_a_real_hello() {
        let bytes = real_hello("DB.Example.com", &["x-custom", "http/1.1"]);
        assert_eq!(
            parse(&bytes),
            Peeked::Hello(Hello {
                sni: Some("db.example.com".into()),
                alpn: vec!["x-custom".into(), "http/1.1".into()],
            })
        );
    }

    #[test]
    fn every_prefix_is_incomplete_and_plain_bytes_are_not_tls() {
        let bytes = real_hello("a.example", &[]);
        for cut in 0..bytes.len() {
            assert_eq!(parse(&bytes[..cut]), Peeked::Incomplete, "cut at {cut}");
        }
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Peeked::NotTls);
        assert_eq!(parse(b"*1\r\n$4\r\nPING\r\n"), Peeked::NotTls);
    }

    #[test]
    fn a_hello_split_over_records_is_joined() {
        let bytes = real_hello("split.example", &["h2"]);
        let body = &bytes[5..];
        // The same handshake message in records of 7 bytes each.
        let mut split = Vec::new();
        for part in body.chunks(7) {
            split.extend_from_slice(&[0x16, 3, 1]);
            split.extend_from_slice(&(part.len() as u16).to_be_bytes());
            split.extend_from_slice(part);
        }
        let Peeked::Hello(hello) = parse(&split) else {
            panic!("not read")
        };
        assert_eq!(hello.sni.as_deref(), Some("split.example"));
        assert_eq!(hello.alpn, vec!["h2".to_string()]);
    }

    #[test]
    fn garbage_after_the_record_byte_is_unreadable() {
        assert_eq!(parse(&[0x16, 9, 9, 0, 1, 0]), Peeked::Unreadable);
        let mut bad = real_hello("x.example", &[]);
        bad[5] = 2; // a ServerHello
        assert_eq!(parse(&bad), Peeked::Unreadable);
        let mut huge = vec![0x16, 3, 1, 0x40, 0];
        huge.resize(MAX_HELLO_BYTES, 0);
        huge[5] = 1;
        huge[6] = 0xff;
        assert_eq!(parse(&huge), Peeked::Unreadable);
    }
}
