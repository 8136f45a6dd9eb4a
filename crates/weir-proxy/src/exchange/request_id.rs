//! Request ids (`server.request_id`): a request keeps the client's id when it is one sane
//! token, else gets a new random one; the id goes upstream on the request, back on the answer
//! and into the access log. Only runtimes with `request_id.enabled` call this.

use crate::http::codec::RequestHead;

/// The longest id taken from a client (longer ones are replaced): enough for a UUID, a W3C
/// trace id or a composite id, too short to bloat every log line.
pub const MAX_LEN: usize = 128;

/// Whether a client's id is taken as it is: 1 to `MAX_LEN` printable ASCII characters without
/// spaces, so it cannot break a log line or a header.
pub fn is_valid(id: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&id.len()) && id.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// A new id: 16 random bytes in hex. Ids correlate log lines and need not be secret, so the
/// worker's fast generator is enough.
pub fn made() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = fastrand::u128(..);
    let mut id = String::with_capacity(32);
    for shift in (0..32).rev() {
        id.push(char::from(HEX[(bits >> (shift * 4)) as usize & 0xf]));
    }
    id
}

/// The request's id in `header`: the client's one valid value, or a new id set on the request
/// in its place (replacing a bad or repeated one).
pub fn adopt(head: &mut RequestHead, header: &str) -> String {
    {
        let mut values = head.head.get_all(header);
        if let (Some(id), None) = (values.next(), values.next()) {
            if is_valid(id) {
                return String::from_utf8_lossy(id).into_owned();
            }
        }
    }
    let id = made();
    head.head.set(header, id.as_bytes());
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::codec;
    use bytes::BytesMut;

    fn head(fields: &str) -> RequestHead {
        let raw = format!("GET / HTTP/1.1\r\nHost: t\r\n{fields}\r\n");
        let parsed = codec::parse_request(&mut BytesMut::from(raw.as_bytes()));
        parsed.expect("a valid head").expect("a whole head")
    }

    #[test]
    fn adopts_one_valid_id_and_replaces_the_rest() {
        let mut given = head("X-Request-Id: abc-1\r\n");
        assert_eq!(adopt(&mut given, "x-request-id"), "abc-1");
        for fields in [
            "",
            "X-Request-Id: a b\r\n",
            "X-Request-Id: a\r\nX-Request-Id: b\r\n",
        ] {
            let mut replaced = head(fields);
            let id = adopt(&mut replaced, "x-request-id");
            assert_eq!(id.len(), 32, "{fields:?}");
            let on_request: Vec<&[u8]> = replaced.head.get_all("x-request-id").collect();
            assert_eq!(on_request, [id.as_bytes()], "{fields:?}");
        }
    }

    #[test]
    fn takes_sane_ids_and_replaces_the_rest() {
        assert!(is_valid(b"3f2c-11ef_a.b:c"));
        assert!(is_valid(&[b'a'; MAX_LEN]));
        assert!(!is_valid(&[b'a'; MAX_LEN + 1]));
        assert!(!is_valid(b""));
        assert!(!is_valid(b"two words"));
        assert!(!is_valid(b"tab\there"));
        assert!(!is_valid("é".as_bytes()));
        let id = made();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(made(), id);
    }
}
