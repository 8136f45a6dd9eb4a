//! Fuzz target: HTTP/1 response heads as an upstream sends them (`codec::parse_response`), the
//! first input byte saying whether the request was HEAD: never panics, every field lies in the
//! bytes it was parsed from, framing follows the status, and a head cut short is "need more".
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_fuzz::offset_within;
use weir_proxy::fuzzing::{parse_response, Framing, MAX_HEADERS, MAX_HEAD_BYTES};

fuzz_target!(|data: &[u8]| {
    let Some((&flag, data)) = data.split_first() else {
        return;
    };
    let request_is_head = flag & 1 == 1;
    let mut buf = BytesMut::from(data);
    let base = buf.as_ptr() as usize;
    let res = match parse_response(&mut buf, request_is_head) {
        Ok(Some(res)) => res,
        Ok(None) => {
            assert_eq!(&buf[..], data, "an incomplete head consumed bytes");
            assert!(
                data.len() <= MAX_HEAD_BYTES,
                "an over-long head was not refused"
            );
            return;
        }
        Err(e) => {
            assert!(matches!(e.status(), 400 | 431 | 501));
            return;
        }
    };
    let consumed = data.len() - buf.len();
    assert_eq!(
        &buf[..],
        &data[consumed..],
        "the bytes after the head changed"
    );
    assert!(consumed > 0 && consumed <= MAX_HEAD_BYTES);

    let check = |part: &[u8], what: &str| {
        let at = offset_within(base, consumed, part, what);
        assert_eq!(
            &data[at..at + part.len()],
            part,
            "{what} differs from the input"
        );
    };
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
