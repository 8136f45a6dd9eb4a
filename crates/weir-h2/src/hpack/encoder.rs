//! The HPACK encoder of response heads and trailers: static-table indexes, then either
//! literals without indexing (no state at all) or a small dynamic table.

use super::table::STATIC;
use super::{encode_int, huffman};
use bytes::BufMut;
use std::collections::VecDeque;

/// How the encoder uses HPACK's dynamic table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// Literals without indexing (§6.2.2): the encoder keeps no state.
    None,
    /// Literals with incremental indexing (§6.2.1) into a table of at most this many bytes
    /// (capped by the peer's SETTINGS_HEADER_TABLE_SIZE), searched linearly.
    Dynamic(usize),
}

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

pub struct Encoder {
    indexing: Indexing,
    huffman: bool,
    /// Our copy of the peer's dynamic table (Indexing::Dynamic only): newest first.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    /// A size update owed at the start of the next block (§4.2) after the limit changed.
    pending_size_update: bool,
}

impl Encoder {
    pub fn new(indexing: Indexing, huffman: bool) -> Self {
        let max_size = match indexing {
            Indexing::None => 0,
            Indexing::Dynamic(n) => n.min(4096),
        };
        Encoder {
            indexing,
            huffman,
            table: VecDeque::new(),
            size: 0,
            max_size,
            pending_size_update: false,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: our table may not outgrow it.
    pub fn set_peer_table_size(&mut self, peer: usize) {
        if let Indexing::Dynamic(ours) = self.indexing {
            let max = ours.min(peer);
            if max != self.max_size {
                self.max_size = max;
                self.evict_to(max);
                self.pending_size_update = true;
            }
        }
    }

    /// Starts a header block: the owed size update, if any.
    pub fn begin(&mut self, dst: &mut impl BufMut) {
        if self.pending_size_update {
            self.pending_size_update = false;
            encode_int(self.max_size, 5, 0x20, dst);
        }
    }

    /// `:status`: the static entries 8-14 or a literal on name index 8.
    pub fn status(&mut self, status: u16, dst: &mut impl BufMut) {
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if index != 0 {
            encode_int(index, 7, 0x80, dst);
            return;
        }
        let digits = [
            b'0' + (status / 100 % 10) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        self.field_with_name_index(8, b":status", &digits, dst);
    }

    /// One field; `name` must be lowercase (RFC 9113 §8.2.1).
    pub fn field(&mut self, name: &[u8], value: &[u8], dst: &mut impl BufMut) {
        if self.max_size > 0 {
            if let Some(at) = self
                .table
                .iter()
                .position(|(n, v)| **n == *name && **v == *value)
            {
                encode_int(62 + at, 7, 0x80, dst);
                return;
            }
        }
        match static_name_index(name) {
            Some(index) => self.field_with_name_index(index, name, value, dst),
            None => {
                self.literal_prefix(0, dst);
                self.string(name, dst);
                self.string(value, dst);
                self.remember(name, value);
            }
        }
    }

    fn field_with_name_index(
        &mut self,
        index: usize,
        name: &[u8],
        value: &[u8],
        dst: &mut impl BufMut,
    ) {
        self.literal_prefix(index, dst);
        self.string(value, dst);
        self.remember(name, value);
    }

    fn literal_prefix(&self, name_index: usize, dst: &mut impl BufMut) {
        if self.max_size > 0 {
            encode_int(name_index, 6, 0x40, dst);
        } else {
            encode_int(name_index, 4, 0x00, dst);
        }
    }

    fn string(&self, s: &[u8], dst: &mut impl BufMut) {
        if self.huffman {
            let len = huffman::encoded_len(s);
            if len < s.len() {
                encode_int(len, 7, 0x80, dst);
                huffman::encode(s, dst);
                return;
            }
        }
        encode_int(s.len(), 7, 0, dst);
        dst.put_slice(s);
    }

    fn remember(&mut self, name: &[u8], value: &[u8]) {
        if self.max_size == 0 {
            return;
        }
        let size = name.len() + value.len() + 32;
        self.evict_to(self.max_size.saturating_sub(size));
        if size <= self.max_size {
            self.table.push_front((name.into(), value.into()));
            self.size += size;
        }
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.table.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + 32,
                None => break,
            }
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<Entry>()
            + self
                .table
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
    }
}

/// The first static-table index of `name`, for a literal with an indexed name.
fn static_name_index(name: &[u8]) -> Option<usize> {
    // Names of responses first: most fields of an answer are among these.
    let quick = match name {
        b"content-type" => Some(31),
        b"content-length" => Some(28),
        b"date" => Some(33),
        b"server" => Some(54),
        b"cache-control" => Some(24),
        b"etag" => Some(34),
        b"last-modified" => Some(44),
        b"location" => Some(46),
        b"set-cookie" => Some(55),
        b"vary" => Some(59),
        b"content-encoding" => Some(26),
        _ => None,
    };
    quick.or_else(|| {
        STATIC
            .iter()
            .position(|(n, _)| n.as_bytes() == name)
            .map(|i| i + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::super::Decoder;
    use super::*;

    fn decode_all(d: &mut Decoder, block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        d.decode(block, |n, v| out.push((n.to_vec(), v.to_vec())))
            .unwrap();
        out
    }

    const HEAD: [(&str, &str); 4] = [
        ("content-type", "text/plain"),
        ("content-length", "5"),
        ("x-request-id", "0af7651916cd43dd8448eb211c80319c"),
        ("server", "weir"),
    ];

    fn round_trip(indexing: Indexing, huffman: bool) -> Vec<usize> {
        let mut e = Encoder::new(indexing, huffman);
        let mut d = Decoder::new(4096);
        let mut sizes = Vec::new();
        for status in [200u16, 302, 200] {
            let mut block = Vec::new();
            e.begin(&mut block);
            e.status(status, &mut block);
            for (n, v) in HEAD {
                e.field(n.as_bytes(), v.as_bytes(), &mut block);
            }
            let got = decode_all(&mut d, &block);
            assert_eq!(
                got[0],
                (b":status".to_vec(), status.to_string().into_bytes())
            );
            let rest: Vec<_> = HEAD
                .iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect();
            assert_eq!(&got[1..], &rest[..]);
            sizes.push(block.len());
        }
        sizes
    }

    #[test]
    fn every_mode_decodes_to_what_was_encoded() {
        let plain = round_trip(Indexing::None, false);
        let huff = round_trip(Indexing::None, true);
        let dynamic = round_trip(Indexing::Dynamic(1024), false);
        assert!(huff[0] < plain[0]);
        // The second answer repeats every field but the status: the dynamic table pays.
        assert!(dynamic[2] < 8, "{dynamic:?}");
        assert_eq!(plain[0], plain[2]);
    }

    #[test]
    fn status_200_is_one_byte() {
        // RFC 7541 Appendix A: index 8 is ":status: 200"; §6.1 indexed field 0x88.
        let mut e = Encoder::new(Indexing::None, false);
        let mut block = Vec::new();
        e.status(200, &mut block);
        assert_eq!(block, [0x88]);
    }

    #[test]
    fn a_smaller_peer_table_is_announced_first() {
        let mut e = Encoder::new(Indexing::Dynamic(4096), false);
        e.set_peer_table_size(100);
        let mut block = Vec::new();
        e.begin(&mut block);
        e.field(b"x-a", b"1", &mut block);
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode_all(&mut d, &block),
            vec![(b"x-a".to_vec(), b"1".to_vec())]
        );
        assert_eq!(block[0], 0x3f);
    }
}
