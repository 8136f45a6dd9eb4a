//! HPACK (RFC 7541): the static table, integer and string coding, the decoder with its dynamic
//! table, and the response encoder.

mod decoder;
mod encoder;
mod huffman;
mod huffman_table;
mod table;

pub use decoder::Decoder;
pub use encoder::{Encoder, Indexing};

/// Why a header block could not be decoded: a COMPRESSION_ERROR on the connection (RFC 9113
/// §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer longer than this decoder accepts.
    IntegerOverflow,
    /// Index 0 or past the end of both tables (§2.3.3).
    BadIndex,
    /// Bad Huffman padding or an encoded EOS (§5.2).
    Huffman,
    /// A size update above the limit we announced, or after the first field (§4.2, §6.3).
    BadSizeUpdate,
}

/// Decodes an integer with an `prefix`-bit prefix (§5.1) from `src[*at..]`.
pub(crate) fn decode_int(src: &[u8], at: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let mask = (1usize << prefix) - 1;
    let first = *src.get(*at).ok_or(HpackError::Truncated)? as usize & mask;
    *at += 1;
    if first < mask {
        return Ok(first);
    }
    let mut value = mask;
    let mut shift = 0u32;
    loop {
        let b = *src.get(*at).ok_or(HpackError::Truncated)?;
        *at += 1;
        // Four continuation bytes carry 28 bits: more than any length or index we accept.
        if shift > 21 {
            return Err(HpackError::IntegerOverflow);
        }
        value += ((b & 0x7f) as usize) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Encodes `value` with a `prefix`-bit prefix, `flags` in the bits above it (§5.1).
pub(crate) fn encode_int(value: usize, prefix: u8, flags: u8, dst: &mut impl bytes::BufMut) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        dst.put_u8(flags | value as u8);
        return;
    }
    dst.put_u8(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 128 {
        dst.put_u8((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    dst.put_u8(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_of_rfc_7541_appendix_c_1() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; C.1.3: 42 at an
        // octet boundary.
        for (value, prefix, bytes) in [
            (10usize, 5u8, vec![0x0au8]),
            (1337, 5, vec![0x1f, 0x9a, 0x0a]),
            (42, 8, vec![0x2a]),
        ] {
            let mut out = Vec::new();
            encode_int(value, prefix, 0, &mut out);
            assert_eq!(out, bytes);
            let mut at = 0;
            assert_eq!(decode_int(&bytes, &mut at, prefix), Ok(value));
            assert_eq!(at, bytes.len());
        }
    }

    #[test]
    fn an_endless_integer_is_refused() {
        let mut at = 0;
        let src = [0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(
            decode_int(&src, &mut at, 5),
            Err(HpackError::IntegerOverflow)
        );
        let mut at = 0;
        assert_eq!(
            decode_int(&[0x1f, 0x80], &mut at, 5),
            Err(HpackError::Truncated)
        );
    }
}
