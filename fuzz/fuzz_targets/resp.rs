//! Fuzz target: Redis replies (`stores::redis::parse`, RESP2, what weir reads from Redis for
//! shared rate limits and purges): never panics nor recurses without bound; a reply takes no
//! more bytes than given and parses the same from exactly its own bytes; a prefix of a reply
//! is "need more".
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::fuzzing::{redis_reply, RedisParsed};

fuzz_target!(|data: &[u8]| {
    if let RedisParsed::Value(value, used) = redis_reply(data) {
        assert!(used > 0 && used <= data.len());
        assert_eq!(
            redis_reply(&data[..used]),
            RedisParsed::Value(value, used),
            "a reply parses the same from its own bytes"
        );
        for cut in [used / 2, used - 1] {
            if cut > 0 {
                assert_eq!(redis_reply(&data[..cut]), RedisParsed::Incomplete, "prefix {cut}");
            }
        }
    }
});
