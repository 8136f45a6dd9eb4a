//! The HPACK decoder (RFC 7541 §3, §6): one per connection, its dynamic table kept across
//! header blocks.

use super::table::{Dynamic, STATIC};
use super::{decode_int, huffman, HpackError};

pub struct Decoder {
    table: Dynamic,
    /// The table size we announced (SETTINGS_HEADER_TABLE_SIZE): size updates may not exceed it.
    limit: usize,
    /// Name then value of the literal being decoded; kept between fields, freed when idle.
    scratch: Vec<u8>,
}

impl Decoder {
    pub fn new(max_table_size: usize) -> Self {
        Decoder {
            table: Dynamic::new(max_table_size),
            limit: max_table_size,
            scratch: Vec::new(),
        }
    }

    /// Decodes one whole header block, handing each field to `emit` in order.
    pub fn decode(
        &mut self,
        src: &[u8],
        mut emit: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut at = 0;
        let mut first = true;
        while at < src.len() {
            let b = src[at];
            if b & 0x80 != 0 {
                // §6.1 indexed field.
                let index = decode_int(src, &mut at, 7)?;
                let (name, value) = self.lookup(index)?;
                emit(name, value);
            } else if b & 0x40 != 0 {
                // §6.2.1 literal with incremental indexing.
                let name_len = self.literal(src, &mut at, 6)?;
                let (name, value) = self.scratch.split_at(name_len);
                emit(name, value);
                self.table.insert(&self.scratch, name_len);
            } else if b & 0x20 != 0 {
                // §6.3 dynamic table size update: only at the start of a block (§4.2).
                if !first {
                    return Err(HpackError::BadSizeUpdate);
                }
                let size = decode_int(src, &mut at, 5)?;
                if size > self.limit {
                    return Err(HpackError::BadSizeUpdate);
                }
                self.table.set_max_size(size);
                continue;
            } else {
                // §6.2.2 without indexing, §6.2.3 never indexed: both 4-bit prefixes.
                let name_len = self.literal(src, &mut at, 4)?;
                let (name, value) = self.scratch.split_at(name_len);
                emit(name, value);
            }
            first = false;
        }
        Ok(())
    }

    fn lookup(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => self.table.get(index - 62).ok_or(HpackError::BadIndex),
        }
    }

    /// Decodes a literal's name (indexed or literal) and value into `scratch`; returns the
    /// name's length.
    fn literal(&mut self, src: &[u8], at: &mut usize, prefix: u8) -> Result<usize, HpackError> {
        let index = decode_int(src, at, prefix)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let result = (|| {
            if index == 0 {
                read_string(src, at, &mut scratch)?;
            } else {
                scratch.extend_from_slice(self.lookup(index)?.0);
            }
            let name_len = scratch.len();
            read_string(src, at, &mut scratch)?;
            Ok(name_len)
        })();
        self.scratch = scratch;
        result
    }

    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.table.heap_bytes() + self.scratch.capacity()
    }

    /// Frees what only a block in progress needs.
    pub fn shrink(&mut self) {
        self.scratch = Vec::new();
        self.table.shrink();
    }
}

/// Reads one string literal (§5.2) onto the end of `dst`.
fn read_string(src: &[u8], at: &mut usize, dst: &mut Vec<u8>) -> Result<(), HpackError> {
    let huffman_coded = *src.get(*at).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = decode_int(src, at, 7)?;
    let end = at
        .checked_add(len)
        .filter(|&e| e <= src.len())
        .ok_or(HpackError::Truncated)?;
    let bytes = &src[*at..end];
    *at = end;
    if huffman_coded {
        huffman::decode(bytes, dst)
    } else {
        dst.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decode(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(&hex(block), |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        out
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rfc_7541_c_2_1_literal_with_indexing() {
        let mut d = Decoder::new(4096);
        let got = decode(
            &mut d,
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
        );
        assert_eq!(got, pairs(&[("custom-key", "custom-header")]));
        assert_eq!(d.table_size(), 55);
    }

    #[test]
    fn rfc_7541_c_2_2_literal_without_indexing() {
        let mut d = Decoder::new(4096);
        let got = decode(&mut d, "040c 2f73 616d 706c 652f 7061 7468");
        assert_eq!(got, pairs(&[(":path", "/sample/path")]));
        assert_eq!(d.table_len(), 0);
    }

    #[test]
    fn rfc_7541_c_2_3_literal_never_indexed() {
        let mut d = Decoder::new(4096);
        let got = decode(&mut d, "1008 7061 7373 776f 7264 0673 6563 7265 74");
        assert_eq!(got, pairs(&[("password", "secret")]));
        assert_eq!(d.table_len(), 0);
    }

    #[test]
    fn rfc_7541_c_2_4_indexed() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, "82"), pairs(&[(":method", "GET")]));
    }

    /// C.3 (without Huffman) and C.4 (with Huffman) encode the same three requests on one
    /// connection; the table after each is the same.
    fn three_requests(blocks: [&str; 3]) {
        let mut d = Decoder::new(4096);
        let first = [
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ];
        assert_eq!(decode(&mut d, blocks[0]), pairs(&first));
        assert_eq!(d.table_size(), 57);
        let mut second = first.to_vec();
        second.push(("cache-control", "no-cache"));
        assert_eq!(decode(&mut d, blocks[1]), pairs(&second));
        assert_eq!(d.table_size(), 110);
        let third = [
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ];
        assert_eq!(decode(&mut d, blocks[2]), pairs(&third));
        assert_eq!(d.table_size(), 164);
        assert_eq!(d.table_len(), 3);
    }

    #[test]
    fn rfc_7541_c_3_requests_without_huffman() {
        three_requests([
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ]);
    }

    #[test]
    fn rfc_7541_c_4_requests_with_huffman() {
        three_requests([
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ]);
    }

    /// C.5 (without Huffman) and C.6 (with Huffman): three responses with a 256-byte table,
    /// so entries are evicted.
    fn three_responses(blocks: [&str; 3]) {
        let mut d = Decoder::new(256);
        let first = [
            (":status", "302"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com"),
        ];
        assert_eq!(decode(&mut d, blocks[0]), pairs(&first));
        assert_eq!(d.table_size(), 222);
        let mut second = first.to_vec();
        second[0] = (":status", "307");
        assert_eq!(decode(&mut d, blocks[1]), pairs(&second));
        assert_eq!(d.table_size(), 222);
        let third = [
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", "https://www.example.com"),
            ("content-encoding", "gzip"),
            (
                "set-cookie",
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            ),
        ];
        assert_eq!(decode(&mut d, blocks[2]), pairs(&third));
        assert_eq!(d.table_size(), 215);
        assert_eq!(d.table_len(), 3);
    }

    #[test]
    fn rfc_7541_c_5_responses_without_huffman() {
        three_responses([
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        ]);
    }

    #[test]
    fn rfc_7541_c_6_responses_with_huffman() {
        three_responses([
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ]);
    }

    #[test]
    fn index_zero_and_past_the_tables_are_errors() {
        // RFC 7541 §6.1: index 0 is an error; §2.3.3: an index past both tables is an error.
        let mut d = Decoder::new(4096);
        assert_eq!(d.decode(&[0x80], |_, _| {}), Err(HpackError::BadIndex));
        assert_eq!(d.decode(&[0xbe], |_, _| {}), Err(HpackError::BadIndex));
    }

    #[test]
    fn size_updates_only_first_and_within_the_limit() {
        // RFC 7541 §4.2: a size update must come first; §6.3: it may not exceed the limit.
        let mut d = Decoder::new(4096);
        assert_eq!(
            d.decode(&[0x82, 0x20], |_, _| {}),
            Err(HpackError::BadSizeUpdate)
        );
        let mut over = vec![];
        super::super::encode_int(4097, 5, 0x20, &mut over);
        assert_eq!(d.decode(&over, |_, _| {}), Err(HpackError::BadSizeUpdate));
        assert_eq!(d.decode(&[0x20, 0x82], |_, _| {}), Ok(()));
    }
}
