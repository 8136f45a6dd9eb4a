//! Huffman coding of HPACK string literals (RFC 7541 §5.2, code in Appendix B).

use super::huffman_table::CODES;
use super::HpackError;

/// The code is canonical: codes of one length are consecutive and the first code of each
/// length follows from the previous one, so a symbol is found by comparing the next `len`
/// bits against the first code of each length instead of walking a tree bit by bit.
struct Canonical {
    /// First code of each length 0..=30, right-aligned.
    first_code: [u32; 31],
    /// How many codes each length has.
    count: [u16; 31],
    /// Index in `symbols` of the first symbol of each length.
    offset: [u16; 31],
    /// Symbols ordered by code.
    symbols: [u16; 257],
}

const fn build() -> Canonical {
    let mut count = [0u16; 31];
    let mut first_code = [u32::MAX; 31];
    let mut i = 0;
    while i < 257 {
        let (code, len) = CODES[i];
        count[len as usize] += 1;
        if code < first_code[len as usize] {
            first_code[len as usize] = code;
        }
        i += 1;
    }
    let mut offset = [0u16; 31];
    let mut len = 1;
    while len < 31 {
        offset[len] = offset[len - 1] + count[len - 1];
        len += 1;
    }
    let mut symbols = [0u16; 257];
    let mut s = 0;
    while s < 257 {
        let (code, len) = CODES[s];
        let at = offset[len as usize] as u32 + (code - first_code[len as usize]);
        symbols[at as usize] = s as u16;
        s += 1;
    }
    Canonical {
        first_code,
        count,
        offset,
        symbols,
    }
}

static CANONICAL: Canonical = build();
const EOS: u16 = 256;

/// Codes of up to 8 bits (the letters, digits and punctuation most header text is made of),
/// looked up by the next 8 bits in one step: (symbol, length), length 0 for longer codes.
static BY_FIRST_BYTE: [(u8, u8); 256] = {
    let t = build();
    let mut table = [(0u8, 0u8); 256];
    let mut byte = 0;
    while byte < 256 {
        let mut len = 5;
        while len <= 8 {
            let code = (byte >> (8 - len)) as u32;
            let first = t.first_code[len];
            if t.count[len] != 0 && code >= first && code - first < t.count[len] as u32 {
                let symbol = t.symbols[(t.offset[len] as u32 + code - first) as usize];
                table[byte] = (symbol as u8, len as u8);
                break;
            }
            len += 1;
        }
        byte += 1;
    }
    table
};

/// Decodes `src` onto the end of `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HpackError> {
    let table = &CANONICAL;
    // Bits not yet consumed, left-aligned in `bits`.
    let mut bits: u64 = 0;
    let mut have: u32 = 0;
    let mut input = src.iter();
    loop {
        while have <= 56 {
            match input.next() {
                Some(&b) => {
                    bits |= (b as u64) << (56 - have);
                    have += 8;
                }
                None => break,
            }
        }
        if have == 0 {
            return Ok(());
        }
        let (fast_symbol, fast_len) = BY_FIRST_BYTE[(bits >> 56) as usize];
        if fast_len != 0 && fast_len as u32 <= have {
            dst.push(fast_symbol);
            bits <<= fast_len;
            have -= fast_len as u32;
            continue;
        }
        let mut len = 5u32;
        let symbol = loop {
            if len > 30 || len > have {
                // What is left must be the EOS prefix: fewer than 8 bits, all ones (§5.2).
                let rest = bits >> (64 - have);
                if have < 8 && rest == (1u64 << have) - 1 {
                    return Ok(());
                }
                return Err(HpackError::Huffman);
            }
            let code = (bits >> (64 - len)) as u32;
            let first = table.first_code[len as usize];
            let count = table.count[len as usize] as u32;
            if count != 0 && code >= first && code - first < count {
                break table.symbols[(table.offset[len as usize] as u32 + code - first) as usize];
            }
            len += 1;
        };
        if symbol == EOS {
            return Err(HpackError::Huffman);
        }
        dst.push(symbol as u8);
        bits <<= len;
        have -= len;
    }
}

/// The encoded length of `src` in bytes.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Encodes `src` onto the end of `dst`, padded with the EOS prefix.
pub fn encode(src: &[u8], dst: &mut impl bytes::BufMut) {
    let mut acc: u64 = 0;
    let mut have: u32 = 0;
    for &b in src {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | code as u64;
        have += len as u32;
        while have >= 8 {
            have -= 8;
            dst.put_u8((acc >> have) as u8);
        }
    }
    if have > 0 {
        let pad = 8 - have;
        dst.put_u8(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_is_canonical() {
        let t = &CANONICAL;
        let mut next = 0u32;
        for len in 1..31 {
            if t.count[len] != 0 {
                assert_eq!(t.first_code[len], next, "length {len}");
            }
            next = (next + t.count[len] as u32) << 1;
        }
    }

    #[test]
    fn every_symbol_round_trips() {
        let all: Vec<u8> = (0..=255u8).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        assert_eq!(enc.len(), encoded_len(&all));
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn padding_longer_than_seven_bits_or_not_ones_is_an_error() {
        // RFC 7541 §5.2: padding > 7 bits or not the EOS prefix must be treated as an error.
        let mut dec = Vec::new();
        assert!(decode(&[0xff], &mut dec).is_err());
        // 'a' is 00011 (5 bits); padding 000 is not the EOS prefix.
        assert!(decode(&[0b0001_1000], &mut dec).is_err());
        dec.clear();
        decode(&[0b0001_1111], &mut dec).unwrap();
        assert_eq!(dec, b"a");
    }

    #[test]
    fn an_encoded_eos_is_an_error() {
        let mut dec = Vec::new();
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], &mut dec).is_err());
    }
}
