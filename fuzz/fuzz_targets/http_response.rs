//! Fuzz target: HTTP/1 response heads as an upstream sends them (`codec::parse_response`), the
//! first input byte saying whether the request was HEAD: never panics, every field lies in the
//! bytes it was parsed from, framing follows the status, and a head cut short is "need more".
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::{check_in_input, parsed_head};
use weir_proxy::fuzzing::{parse_response, Framing, MAX_HEADERS};

fuzz_target!(|data: &[u8]| {
    let Some((&flag, data)) = data.split_first() else {
        return;
    };
    let request_is_head = flag & 1 == 1;
    let mut buf = BytesMut::from(data);
    let base = buf.as_ptr() as usize;
    let parsed = parse_response(&mut buf, request_is_head);
    let Some((res, consumed)) = parsed_head(data, &buf, parsed) else {
        return;
    };

    let check = |part: &[u8], what: &str| check_in_input(data, base, consumed, part, what);
    if !res.reason().is_empty() {
        check(res.reason().as_bytes(), "reason");
    }
    let mut fields = 0;
    for (name, value) in res.head.iter() {
        check(name, "a field name");
        check(value, "a field value");
        fields += 1;
    }
    assert!(fields <= MAX_HEADERS);

    assert!(res.status <= 999);
    assert!(res.minor_version <= 1);
    if request_is_head || res.status < 200 || res.status == 204 || res.status == 304 {
        assert_eq!(
            res.framing,
            Framing::None,
            "a bodiless answer was given a body"
        );
    }
    if res.framing == Framing::Chunked {
        assert_eq!(res.minor_version, 1, "chunked framing on HTTP/1.0");
    }
    if res.framing == Framing::UntilClose {
        assert!(
            !res.keep_alive,
            "a body read until close on a kept connection"
        );
    }

    for cut in [consumed / 2, consumed - 1] {
        let mut part = BytesMut::from(&data[..cut]);
        assert!(
            matches!(parse_response(&mut part, request_is_head), Ok(None)),
            "a prefix of {cut} bytes of a {consumed}-byte head was not incomplete"
        );
    }
    let mut alone = BytesMut::from(&data[..consumed]);
    let again = parse_response(&mut alone, request_is_head)
        .unwrap()
        .unwrap();
    assert!(alone.is_empty());
    assert_eq!((again.status, again.framing), (res.status, res.framing));
});
