//! Fuzz target: HTTP/1 request heads as a client sends them (`codec::parse_request`): never
//! panics, every span of a parsed head lies in the bytes it was parsed from, the bytes after
//! the head are left in the buffer, and a head cut short is "need more", not an error.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::{check_in_input, parsed_head};
use weir_proxy::fuzzing::{parse_request, Framing, MAX_HEADERS};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let base = buf.as_ptr() as usize;
    let parsed = parse_request(&mut buf);
    let Some((req, consumed)) = parsed_head(data, &buf, parsed) else {
        return;
    };
    assert!(data[..consumed].ends_with(b"\n"));

    // The head's bytes stay where they were read, unless an absolute-form target without a
    // path had `/` appended (which copies the head): then the method anchors the offsets.
    let method = req.method();
    assert!(!method.is_empty());
    let method_at = data.iter().position(|&b| b != b'\r' && b != b'\n').unwrap();
    let mut base = base;
    let moved = (method.as_ptr() as usize) < base || method.as_ptr() as usize >= base + consumed;
    if moved {
        base = method.as_ptr() as usize - method_at;
    }
    let check = |part: &[u8], what: &str| check_in_input(data, base, consumed, part, what);
    check(method.as_bytes(), "method");
    check(req.target().as_bytes(), "target");
    check(req.query().as_bytes(), "query");
    if moved {
        assert_eq!(req.path(), "/", "only a path-less target is given `/`");
    } else {
        check(req.path().as_bytes(), "path");
    }
    if !req.host().is_empty() {
        check(req.host().as_bytes(), "host");
    }
    let mut fields = 0;
    for (name, value) in req.head.iter() {
        check(name, "a field name");
        check(value, "a field value");
        fields += 1;
    }
    assert!(fields <= MAX_HEADERS);

    assert!(req.target().contains(req.query()));
    assert!(req.minor_version <= 1);
    if req.framing == Framing::Chunked {
        assert_eq!(req.minor_version, 1, "chunked framing on HTTP/1.0");
    }
    assert!(!matches!(
        req.framing,
        Framing::UntilClose | Framing::Length(0)
    ));
    assert!(!req.expect_continue || (req.has_expect_continue && req.minor_version == 1));

    // The same head read in two pieces: the first piece asks for more, then the whole head
    // parses alone, whatever followed it.
    for cut in [consumed / 2, consumed - 1] {
        let mut part = BytesMut::from(&data[..cut]);
        assert!(
            matches!(parse_request(&mut part), Ok(None)),
            "a prefix of {cut} bytes of a {consumed}-byte head was not incomplete"
        );
    }
    let mut alone = BytesMut::from(&data[..consumed]);
    let again = parse_request(&mut alone).unwrap().unwrap();
    assert!(alone.is_empty());
    assert_eq!(again.target(), req.target());
    assert_eq!(again.framing, req.framing);
});
