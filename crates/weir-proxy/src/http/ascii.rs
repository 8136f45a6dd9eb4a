//! ASCII case-insensitive equality of field names and tokens, eight bytes at a time: every
//! header lookup, the parse-time scan of known fields and the hop-by-hop filter compare names
//! this way, and the standard library's byte-at-a-time compare was 5% of a proxied request's
//! instructions (callgrind). And percent-encoding, for the few answers that write it.

/// Whether `a` and `b` are equal when ASCII letters are compared without case (as
/// `<[u8]>::eq_ignore_ascii_case`).
#[inline(always)]
pub fn eq_ignore_case(a: &[u8], b: &[u8]) -> bool {
    // Most names compared differ in length: that check stays inline.
    a.len() == b.len() && same_length_eq(a, b)
}

#[inline]
fn same_length_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len < 8 {
        return words_eq(short_word(a), short_word(b));
    }
    let mut at = 0;
    while at + 8 < len {
        if !words_eq(word_at(a, at), word_at(b, at)) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping the words already compared.
    words_eq(word_at(a, len - 8), word_at(b, len - 8))
}

/// The eight bytes of `s` from `at` (the caller keeps `at + 8 <= s.len()`).
#[inline]
fn word_at(s: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// Every byte of `s` (shorter than eight) in one word: two overlapping four-byte reads, or the
/// first, middle and last byte. Both sides of a compare have the same length, so each byte
/// lands in the same place on both.
#[inline]
fn short_word(s: &[u8]) -> u64 {
    let len = s.len();
    if len >= 4 {
        let first = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        let last = u32::from_le_bytes([s[len - 4], s[len - 3], s[len - 2], s[len - 1]]);
        u64::from(first) | u64::from(last) << 32
    } else if len > 0 {
        u64::from(s[0]) | u64::from(s[len / 2]) << 8 | u64::from(s[len - 1]) << 16
    } else {
        0
    }
}

/// Whether two words are equal byte by byte, ASCII letters without case.
#[inline]
fn words_eq(x: u64, y: u64) -> bool {
    const CASE_BIT: u64 = 0x2020_2020_2020_2020;
    const HIGH_BIT: u64 = 0x8080_8080_8080_8080;
    let differ = x ^ y;
    if differ == 0 {
        return true;
    }
    if differ & !CASE_BIT != 0 {
        return false;
    }
    // The bytes differ only in the case bit; where they do, the byte must be a letter. In
    // each byte (high bit cleared, so no carry crosses a byte) of the lowercased word, adding
    // 0x80 - b'a' sets the high bit from b'a' up, and adding 0x80 - (b'z' + 1) from past b'z'.
    let low7 = (x | CASE_BIT) & !HIGH_BIT;
    let from_a = low7 + 0x1f1f_1f1f_1f1f_1f1f;
    let past_z = low7 + 0x0505_0505_0505_0505;
    let letters = from_a & !past_z & !x & HIGH_BIT;
    (differ << 2) & !letters == 0
}

/// `text` with every byte `keep` refuses written as `%XX` (upper-case hex).
pub fn percent_encode(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if keep(byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::eq_ignore_case;

    /// Every pair of single bytes, and each at every place of names of every length up to 20,
    /// agrees with the standard library.
    #[test]
    fn agrees_with_the_standard_library_byte_by_byte() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(
                    eq_ignore_case(&[a], &[b]),
                    [a].eq_ignore_ascii_case(&[b]),
                    "{a:#x} {b:#x}"
                );
            }
        }
        let base = b"Content-Type-Options";
        for len in 0..=base.len() {
            let name = &base[..len];
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut other = name.to_vec();
                    other[at] = b;
                    assert_eq!(
                        eq_ignore_case(name, &other),
                        name.eq_ignore_ascii_case(&other),
                        "{name:?} vs {other:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn names_differing_in_case_or_length() {
        assert!(eq_ignore_case(b"Cache-Control", b"cache-control"));
        assert!(eq_ignore_case(b"CONTENT-LENGTH", b"content-length"));
        assert!(eq_ignore_case(b"", b""));
        assert!(eq_ignore_case(b"TE", b"te"));
        assert!(!eq_ignore_case(b"cache-control", b"cache-contro"));
        assert!(!eq_ignore_case(b"last-modified", b"cache-control"));
        // Only letters fold: `^` and `~` (0x5e, 0x7e) differ in the case bit alone.
        assert!(!eq_ignore_case(b"x-a^b", b"x-a~b"));
        assert!(!eq_ignore_case(
            b"proxy-authorization^",
            b"proxy-authorization~"
        ));
        assert!(!eq_ignore_case(b"@", b"`"));
        // Bytes past ASCII never fold.
        assert!(!eq_ignore_case("x-é".as_bytes(), "x-É".as_bytes()));
    }
}
