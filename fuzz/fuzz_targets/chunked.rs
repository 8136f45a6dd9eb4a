//! Fuzz target: chunked request and response bodies (`codec::ChunkedDecoder`), fed whole and
//! again in reads of random sizes (the first two input bytes seed them): never panics, never
//! reports data or trailers outside what it was given or consumes more than that, and both
//! feedings decode the same data and trailers (except where a size limit trips in one only).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_fuzz::Cuts;
use weir_proxy::fuzzing::{ChunkEvent, ChunkedDecoder};

#[derive(Debug, PartialEq)]
enum Outcome {
    /// The body ended: its data, its trailer section and the bytes it took.
    Done(Vec<u8>, Vec<u8>, usize),
    /// The input ran out first; the data so far.
    Short(Vec<u8>),
    Refused(&'static str),
}

/// Decodes `body` as a connection delivers it, `read()` bytes at a time, keeping the bytes not
/// yet consumed and calling again when the decoder asks for more.
fn decode(body: &[u8], mut read: impl FnMut() -> usize) -> Outcome {
    let mut decoder = ChunkedDecoder::default();
    let (mut consumed, mut received) = (0, 0);
    let mut data = Vec::new();
    loop {
        let input = &body[consumed..received];
        let (event, used) = match decoder.decode(input) {
            Ok(decoded) => decoded,
            Err(why) => return Outcome::Refused(why),
        };
        assert!(
            used <= input.len(),
            "consumed {used} of {} bytes",
            input.len()
        );
        match event {
            ChunkEvent::Data(start, end) => {
                assert!(
                    start < end && end == used,
                    "data {start}..{end}, consumed {used}"
                );
                data.extend_from_slice(&input[start..end]);
            }
            ChunkEvent::End(start, end) => {
                assert!(
                    start <= end && end <= used,
                    "trailers {start}..{end}, used {used}"
                );
                assert!(decoder.is_done());
                let trailers = input[start..end].to_vec();
                assert!(trailers.is_empty() || trailers.ends_with(b"\r\n"));
                // A finished decoder stays finished and takes nothing more.
                assert_eq!(
                    decoder.decode(&input[used..]),
                    Ok((ChunkEvent::End(0, 0), 0))
                );
                return Outcome::Done(data, trailers, consumed + used);
            }
            ChunkEvent::NeedMore => {
                assert!(!decoder.is_done());
                if received == body.len() {
                    return Outcome::Short(data);
                }
                received = (received + read()).min(body.len());
            }
        }
        consumed += used;
    }
}

/// Refusals that depend on how much is buffered at once, so may trip in one feeding only.
fn is_limit(why: &str) -> bool {
    matches!(why, "chunk size line too long" | "trailers too large")
}

fuzz_target!(|data: &[u8]| {
    let Some((seed, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let whole = decode(body, || body.len());
    let mut cuts = Cuts::new(u32::from(u16::from_le_bytes(*seed)));
    let max_read = 1 + usize::from(seed[0] % 64);
    let pieces = decode(body, || cuts.next(max_read));
    match (&whole, &pieces) {
        (Outcome::Done(data, _, used), _) => {
            assert!(
                data.len() + 5 <= *used,
                "{} bytes of data in {used}",
                data.len()
            );
        }
        (Outcome::Short(data), _) => assert!(data.len() <= body.len()),
        _ => {}
    }
    match (&whole, &pieces) {
        (Outcome::Refused(a), Outcome::Refused(b)) if a == b || is_limit(a) || is_limit(b) => {}
        (Outcome::Refused(why), _) | (_, Outcome::Refused(why)) if is_limit(why) => {}
        _ => assert_eq!(whole, pieces, "whole and piecewise decoding differ"),
    }
});
