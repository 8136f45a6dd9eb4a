//! Helpers shared by the fuzz targets in `fuzz_targets/`: where a parsed piece lies in the input.

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
