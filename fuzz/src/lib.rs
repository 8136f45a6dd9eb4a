//! Helpers shared by the fuzz targets in `fuzz_targets/`: where a parsed piece lies in the input,
//! what every HTTP/1 head parse must do, and what an HTTP/2 codec's output must be.

use bytes::BytesMut;
use weir_proxy::fuzzing::{HeadError, MAX_HEAD_BYTES};

/// The offset of `part` inside the `len` bytes starting at address `base`, checking that the
/// whole of `part` lies there: a span of a parsed head must point into the bytes it was parsed
/// from. Panics (a fuzz failure) when it does not.
pub fn offset_within(base: usize, len: usize, part: &[u8], what: &str) -> usize {
    let at = part.as_ptr() as usize;
    assert!(
        at >= base && at + part.len() <= base + len,
        "{what} ({} bytes at {at:#x}) lies outside the head ({len} bytes at {base:#x})",
        part.len()
    );
    at - base
}

/// A deterministic stream of small numbers drawn from `seed`, for cutting an input into the
/// reads a connection would deliver.
pub struct Cuts(u32);

impl Cuts {
    pub fn new(seed: u32) -> Cuts {
        Cuts(seed | 1)
    }

    /// The next read's length, 1 to `max`.
    pub fn next(&mut self, max: usize) -> usize {
        // xorshift32
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        1 + self.0 as usize % max.max(1)
    }
}

/// What every HTTP/1 head parse must do, whatever it parsed: a head cut short consumes nothing
/// and is within the size limit, a refusal is 400, 431 or 501, and a parsed head takes 1 to
/// `MAX_HEAD_BYTES` bytes and leaves the bytes after it as they were (`rest`). Returns the head
/// and how many bytes it took, or `None` when there is no head to check further.
pub fn parsed_head<T>(
    data: &[u8],
    rest: &BytesMut,
    parsed: Result<Option<T>, HeadError>,
) -> Option<(T, usize)> {
    let head = match parsed {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert_eq!(&rest[..], data, "an incomplete head consumed bytes");
            assert!(
                data.len() <= MAX_HEAD_BYTES,
                "an over-long head was not refused"
            );
            return None;
        }
        Err(e) => {
            assert!(matches!(e.status(), 400 | 431 | 501));
            return None;
        }
    };
    let consumed = data.len() - rest.len();
    assert_eq!(
        &rest[..],
        &data[consumed..],
        "the bytes after the head changed"
    );
    assert!(consumed > 0 && consumed <= MAX_HEAD_BYTES);
    Some((head, consumed))
}

/// That `part` lies in the `consumed` head bytes read at address `base`, and equals the input
/// there.
pub fn check_in_input(data: &[u8], base: usize, consumed: usize, part: &[u8], what: &str) {
    let at = offset_within(base, consumed, part, what);
    assert_eq!(
        &data[at..at + part.len()],
        part,
        "{what} differs from the input"
    );
}

/// RFC 9113 §4.2: SETTINGS_MAX_FRAME_SIZE is at most 2^24 - 1.
const MAX_H2_FRAME: usize = (1 << 24) - 1;

/// Checks that `out` is whole HTTP/2 frames, each within the largest frame size a peer may
/// allow. Panics (a fuzz failure) on a cut frame or a larger one.
pub fn assert_whole_h2_frames(out: &[u8]) {
    let mut at = 0;
    while at < out.len() {
        assert!(out.len() - at >= 9, "a cut frame header");
        let len =
            usize::from(out[at]) << 16 | usize::from(out[at + 1]) << 8 | usize::from(out[at + 2]);
        assert!(len <= MAX_H2_FRAME, "a frame of {len} bytes");
        at += 9 + len;
        assert!(at <= out.len(), "a cut frame");
    }
}
