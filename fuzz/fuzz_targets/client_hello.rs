//! Fuzz target: TLS ClientHellos peeked off a TCP connection (`l4::client_hello::parse`), for
//! the SNI and ALPN a TCP router matches on: never panics, the server name comes out lowercased,
//! and a verdict reached on a prefix of the bytes (a hello, or
//! unreadable) is the one reached on all of them, as the caller stops peeking there.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::fuzzing::{client_hello, Peeked, MAX_HELLO_BYTES};

fuzz_target!(|data: &[u8]| {
    let verdict = client_hello(data);
    match &verdict {
        Peeked::NotTls => assert_ne!(data.first(), Some(&0x16)),
        Peeked::Incomplete => assert!(data.len() < MAX_HELLO_BYTES),
        Peeked::Unreadable => assert_eq!(data.first(), Some(&0x16)),
        Peeked::Hello(hello) => {
            if let Some(sni) = &hello.sni {
                assert!(!sni.bytes().any(|b| b.is_ascii_uppercase()));
            }
        }
    }
    if data.len() >= MAX_HELLO_BYTES {
        return;
    }
    // Peeking stops at the first verdict that is not "incomplete": more bytes must not change
    // it, and no prefix of the bytes may say "not TLS" when all of them say TLS.
    for cut in [data.len() / 2, data.len().saturating_sub(1)] {
        match client_hello(&data[..cut]) {
            Peeked::Incomplete => {}
            Peeked::NotTls => assert_eq!(verdict, Peeked::NotTls),
            early => assert_eq!(early, verdict, "the verdict on {cut} bytes changed"),
        }
    }
});
