//! HPACK's static table (RFC 7541 Appendix A) and the decoder's dynamic table (§2.3.2, §4).

use std::collections::VecDeque;

pub(crate) const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// One entry: name and value in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

/// The dynamic table: newest entry first (index 62 in the combined index space).
#[derive(Default)]
pub(crate) struct Dynamic {
    entries: VecDeque<Entry>,
    /// Sum of entry sizes as §4.1 counts them (name + value + 32).
    size: usize,
    max_size: usize,
}

impl Dynamic {
    pub fn new(max_size: usize) -> Self {
        Dynamic {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        let e = self.entries.get(index)?;
        Some((&e.bytes[..e.name_len], &e.bytes[e.name_len..]))
    }

    /// Inserts `name_value` (name's bytes then value's), evicting as §4.4 says; an entry
    /// larger than the whole table empties it and is not added.
    pub fn insert(&mut self, name_value: &[u8], name_len: usize) {
        let entry_size = name_value.len() + 32;
        self.evict_to(self.max_size.saturating_sub(entry_size));
        if entry_size <= self.max_size {
            self.entries.push_front(Entry {
                bytes: name_value.into(),
                name_len,
            });
            self.size += entry_size;
        }
    }

    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.bytes.len() + 32,
                None => break,
            }
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Heap bytes held: the ring of entries and each entry's bytes.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.entries.iter().map(|e| e.bytes.len()).sum::<usize>()
    }

    /// Gives back the ring's spare capacity.
    pub fn shrink(&mut self) {
        self.entries.shrink_to_fit();
    }
}
