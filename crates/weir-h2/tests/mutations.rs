//! A fuzzing pass in the ordinary suite: valid client byte streams, mutated at random (bytes
//! flipped, inserted, dropped, the stream cut), fed in random pieces. The codec must not panic,
//! must stop after a connection error, and must write only whole, well-formed frames.

mod support;

use bytes::Bytes;
use support::frame;
use weir_h2::hpack::{Encoder, Indexing};
use weir_h2::{Config, Connection, Event, PREFACE};

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every frame type a client sends, on three streams.
fn seed() -> Vec<u8> {
    let mut e = Encoder::new(Indexing::Dynamic(4096), true);
    let head = support::encode_block(
        &mut e,
        &[
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/a?b=c"),
            (":authority", "example.com"),
            ("content-length", "10"),
            ("x-a", "1"),
        ],
    );
    let trailers = support::encode_block(&mut e, &[("x-t", "2")]);
    let mut s = PREFACE.to_vec();
    frame(&mut s, 4, 0, 0, &[0, 4, 0, 0, 0x40, 0, 0, 1, 0, 0, 0x10, 0]);
    frame(&mut s, 8, 0, 0, &100_000u32.to_be_bytes());
    frame(&mut s, 1, 0x24, 1, &[&[0, 0, 0, 0, 16][..], &head].concat());
    frame(
        &mut s,
        0,
        0x8,
        1,
        &[3, b'h', b'e', b'l', b'l', b'o', 0, 0, 0],
    );
    frame(&mut s, 0, 0, 1, b"world");
    frame(&mut s, 1, 0x5, 1, &trailers);
    let (a, b) = head.split_at(head.len() / 2);
    frame(&mut s, 1, 0, 3, a);
    frame(&mut s, 9, 0x4, 3, b);
    frame(&mut s, 2, 0, 3, &[0, 0, 0, 1, 7]);
    frame(&mut s, 6, 0, 0, b"12345678");
    frame(&mut s, 8, 0, 3, &1000u32.to_be_bytes());
    frame(&mut s, 3, 0, 3, &8u32.to_be_bytes());
    frame(&mut s, 1, 0x5, 5, &head);
    frame(&mut s, 4, 1, 0, &[]);
    frame(&mut s, 7, 0, 0, &[0, 0, 0, 5, 0, 0, 0, 0]);
    s
}

fn mutate(rng: &mut Rng, mut s: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let at = PREFACE.len() + rng.below(s.len() - PREFACE.len());
        match rng.below(4) {
            0 => s[at] = rng.next() as u8,
            1 => s[at] ^= 1 << rng.below(8),
            2 => s.insert(at, rng.next() as u8),
            _ => {
                s.remove(at);
            }
        }
    }
    if rng.below(8) == 0 {
        s.truncate(PREFACE.len() + rng.below(s.len() - PREFACE.len()));
    }
    s
}

/// Checks the output is a sequence of whole frames within the client's frame size.
fn whole_frames(out: &[u8]) {
    let mut at = 0;
    while at < out.len() {
        assert!(out.len() - at >= 9, "a cut frame header");
        let len = (out[at] as usize) << 16 | (out[at + 1] as usize) << 8 | out[at + 2] as usize;
        assert!(len <= 16_384 * 64, "frame of {len} bytes");
        at += 9 + len;
        assert!(at <= out.len(), "a cut frame");
    }
}

fn run(rng: &mut Rng, input: &[u8]) {
    let mut c = Connection::new(Config::default());
    let mut at = 0;
    let mut failed = false;
    while at < input.len() {
        let n = 1 + rng.below(64).min(input.len() - at - 1);
        c.receive(&input[at..at + n]);
        at += n;
        while let Some(event) = c.poll_event() {
            assert!(!failed, "an event after a connection error");
            match event {
                Event::Request { stream_id, .. } | Event::HeadTooLarge { stream_id, .. } => {
                    let _ = c.send_head(stream_id, 200, &[("x-b", "2")], false);
                    let _ = c.send_data(stream_id, Bytes::from_static(b"answer"), false);
                }
                Event::Data {
                    stream_id, data, ..
                } => c.release_capacity(stream_id, data.len()),
                Event::Trailers { stream_id, .. } => {
                    let _ = c.send_trailers(stream_id, &[("x-c", "3")]);
                }
                Event::ConnectionError { .. } => failed = true,
                _ => {}
            }
        }
    }
    whole_frames(&c.take_output());
}

#[test]
fn mutated_client_streams_never_panic_and_yield_whole_frames() {
    let seed = seed();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // The unmutated seed is served without a connection error.
    let mut c = Connection::new(Config::default());
    c.receive(&seed);
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::ConnectionError { .. })),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Trailers { stream_id: 1, .. })),
        "{events:?}"
    );
    for _ in 0..20_000 {
        let input = mutate(&mut rng, seed.clone());
        run(&mut rng, &input);
    }
}
