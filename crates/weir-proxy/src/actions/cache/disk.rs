//! The cache's disk tier (`caches.NAME.disk`): every stored answer is also written to a file,
//! so it outlives a restart, and an answer missing from memory is looked for on disk before
//! the origin is asked. One file per primary key (the variant stored last), named by a hash
//! of the key under a two-hex-digit folder; the file holds the key, so a hash collision is a
//! miss, never a wrong answer.
//!
//! A file is written whole to `tmp/`, then renamed into place, and ends with a CRC-32 of
//! everything before it: a write torn by `kill -9` or a crash leaves either a temporary file
//! (removed at the next start) or a file whose checksum fails (removed when read), and is
//! never served. Writes and reads run on tokio's blocking threads, not on a worker. When the
//! files exceed `size`, the oldest written leave first.

use super::body::Body;
use super::object::{tag_line, Object};
use crate::http::codec::Head;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use weir_cache::Stored;

const MAGIC: &[u8; 8] = b"WEIRC01\n";
/// Where a header is looked for when the folder is scanned at start.
const HEADER_READ: usize = 64 << 10;

/// What the index knows of a file without reading it.
struct OnDisk {
    len: u64,
    key: Box<[u8]>,
    /// Its answer's `Cache-Tag` values, comma-joined (for a purge by tag).
    tags: Box<[u8]>,
    /// Which write this is, to skip stale places in `order`.
    generation: u64,
}

#[derive(Default)]
struct Index {
    files: HashMap<u64, OnDisk, foldhash::fast::RandomState>,
    /// (hash, generation), oldest write first.
    order: VecDeque<(u64, u64)>,
    used: u64,
    generation: u64,
}

/// A cache's folder of stored answers.
pub(super) struct Disk {
    dir: PathBuf,
    size: u64,
    index: Mutex<Index>,
    temp_serial: AtomicU64,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "disk tier {}", self.dir.display())
    }
}

/// FNV-1a: stable across builds and restarts, which a file name must be.
fn hash_key(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Disk {
    /// Opens (or creates) the folder, removes temporary files a stopped process left, and
    /// indexes the files there (a file whose head does not parse is removed).
    pub(super) fn open(dir: &Path, size: u64) -> io::Result<Disk> {
        fs::create_dir_all(dir.join("tmp"))?;
        for leftover in fs::read_dir(dir.join("tmp"))?.flatten() {
            // `HASH.PID.SERIAL`: a live process's file (a running weir beside `weir check`,
            // or before a reload) is being written; a dead one's was cut short.
            let name = leftover.file_name();
            let writer = name.to_str().and_then(|n| n.split('.').nth(1));
            let alive = writer.is_some_and(|pid| Path::new("/proc").join(pid).exists());
            if !alive {
                let _ = fs::remove_file(leftover.path());
            }
        }
        let mut found = Vec::new();
        for folder in fs::read_dir(dir)?.flatten() {
            let name = folder.file_name();
            if name.len() != 2 || !folder.path().is_dir() {
                continue;
            }
            for file in fs::read_dir(folder.path())?.flatten() {
                let path = file.path();
                let modified = file
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                match read_header(&path) {
                    Some(scanned) => found.push((modified, scanned)),
                    None => {
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
        found.sort_by_key(|(modified, _)| *modified);
        let mut index = Index::default();
        for (_, file) in found {
            index.add(hash_key(&file.key), file.key, file.tags, file.len);
        }
        Ok(Disk {
            dir: dir.to_path_buf(),
            size,
            index: Mutex::new(index),
            temp_serial: AtomicU64::new(0),
        })
    }

    fn path_of(&self, hash: u64) -> PathBuf {
        let name = format!("{hash:016x}");
        self.dir.join(&name[..2]).join(name)
    }

    /// Whether a file for `key` is indexed.
    pub(super) fn contains(&self, key: &[u8]) -> bool {
        let Ok(index) = self.index.lock() else {
            return false;
        };
        index
            .files
            .get(&hash_key(key))
            .is_some_and(|f| &*f.key == key)
    }

    /// Reads the answer stored for `key` (blocking). A file that fails its checksum, or is
    /// not for this key, is removed and `None` returned.
    pub(super) fn load(&self, key: &[u8]) -> Option<Object> {
        let hash = hash_key(key);
        let path = self.path_of(hash);
        let bytes = fs::read(&path).ok()?;
        match decode(&bytes).filter(|(k, _)| k == key) {
            Some((_, object)) => Some(object),
            None => {
                crate::log_warn!("cache file {} failed its check; removed", path.display());
                self.forget(hash);
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes `object` as the answer for `key` (blocking), then removes the oldest files
    /// while the folder is over its size.
    pub(super) fn save(&self, key: &[u8], object: &Object) -> io::Result<()> {
        let hash = hash_key(key);
        let head = encode_head(key, object);
        let body = object.body.bytes();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        crc.update(body);
        let serial = self.temp_serial.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join("tmp")
            .join(format!("{hash:016x}.{}.{serial}", std::process::id()));
        let written = (|| {
            let mut file = fs::File::create(&temp)?;
            file.write_all(&head)?;
            file.write_all(body)?;
            file.write_all(&crc.finalize().to_le_bytes())?;
            let path = self.path_of(hash);
            if let Some(folder) = path.parent() {
                fs::create_dir_all(folder)?;
            }
            fs::rename(&temp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
            return written;
        }
        let len = (head.len() + body.len() + 4) as u64;
        let tags = object.tag_line();
        let evicted = {
            let Ok(mut index) = self.index.lock() else {
                return Ok(());
            };
            index.add(hash, key.into(), tags, len);
            index.over(self.size)
        };
        for hash in evicted {
            let _ = fs::remove_file(self.path_of(hash));
        }
        Ok(())
    }

    /// Removes the file for `key` (blocking).
    pub(super) fn remove(&self, key: &[u8]) {
        let hash = hash_key(key);
        if self.forget(hash) {
            let _ = fs::remove_file(self.path_of(hash));
        }
    }

    /// Removes every file whose key and `Cache-Tag` values `purged` picks (blocking);
    /// returns their keys.
    pub(super) fn purge(&self, purged: impl Fn(&[u8], &[u8]) -> bool) -> Vec<Box<[u8]>> {
        let gone: Vec<(u64, Box<[u8]>)> = {
            let Ok(mut index) = self.index.lock() else {
                return Vec::new();
            };
            let hashes: Vec<u64> = index
                .files
                .iter()
                .filter(|(_, f)| purged(&f.key, &f.tags))
                .map(|(hash, _)| *hash)
                .collect();
            let mut gone = Vec::with_capacity(hashes.len());
            for hash in hashes {
                if let Some(file) = index.files.remove(&hash) {
                    index.used -= file.len;
                    gone.push((hash, file.key));
                }
            }
            gone
        };
        gone.into_iter()
            .map(|(hash, key)| {
                let _ = fs::remove_file(self.path_of(hash));
                key
            })
            .collect()
    }

    fn forget(&self, hash: u64) -> bool {
        let Ok(mut index) = self.index.lock() else {
            return false;
        };
        match index.files.remove(&hash) {
            Some(file) => {
                index.used -= file.len;
                true
            }
            None => false,
        }
    }
}

impl Index {
    fn add(&mut self, hash: u64, key: Box<[u8]>, tags: Box<[u8]>, len: u64) {
        self.generation += 1;
        let generation = self.generation;
        let file = OnDisk {
            len,
            key,
            tags,
            generation,
        };
        if let Some(old) = self.files.insert(hash, file) {
            self.used -= old.len;
        }
        self.used += len;
        self.order.push_back((hash, generation));
    }

    /// Takes the oldest files out until the rest fit in `size`; their hashes.
    fn over(&mut self, size: u64) -> Vec<u64> {
        let mut evicted = Vec::new();
        while self.used > size {
            let Some((hash, generation)) = self.order.pop_front() else {
                break;
            };
            if self
                .files
                .get(&hash)
                .is_some_and(|f| f.generation == generation)
            {
                if let Some(file) = self.files.remove(&hash) {
                    self.used -= file.len;
                    evicted.push(hash);
                }
            }
        }
        // Places of files written again or removed are dropped as they reach the front.
        evicted
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Everything before the body: magic, key, status, the freshness facts, the secondary key,
/// the fields, and the body's length.
fn encode_head(key: &[u8], object: &Object) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + key.len());
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, key);
    out.extend_from_slice(&object.status.to_le_bytes());
    let m = &object.meta;
    for n in [
        m.request_time,
        m.response_time,
        m.date,
        m.age,
        m.lifetime,
        m.stale_while_revalidate,
        m.stale_if_error,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.push(u8::from(m.no_cache) | u8::from(m.no_stale) << 1);
    put_bytes(&mut out, &object.secondary);
    out.extend_from_slice(&(object.fields.len() as u32).to_le_bytes());
    for (name, value) in object.fields.iter() {
        put_bytes(&mut out, name);
        put_bytes(&mut out, value);
    }
    out.extend_from_slice(&object.body.len().to_le_bytes());
    out
}

/// Reads a file's parts in order; `None` at the first one that does not fit.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(taken)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// The parts before the body: key, status, freshness, secondary key, fields, body length.
type Parsed<'a> = (&'a [u8], u16, Stored, &'a [u8], Head, u64);

fn parse_head<'a>(c: &mut Cursor<'a>) -> Option<Parsed<'a>> {
    if c.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let key = c.bytes()?;
    let status = u16::from_le_bytes(c.take(2)?.try_into().ok()?);
    let mut n = [0u64; 7];
    for slot in &mut n {
        *slot = c.u64()?;
    }
    let flags = c.take(1)?[0];
    let meta = Stored {
        request_time: n[0],
        response_time: n[1],
        date: n[2],
        age: n[3],
        lifetime: n[4],
        no_cache: flags & 1 != 0,
        no_stale: flags & 2 != 0,
        stale_while_revalidate: n[5],
        stale_if_error: n[6],
    };
    let secondary = c.bytes()?;
    let count = c.u32()? as usize;
    let mut fields = Head::with_capacity(512, count.min(256));
    for _ in 0..count {
        let name = c.bytes()?;
        let value = c.bytes()?;
        fields.append_field(name, value);
    }
    let body_len = c.u64()?;
    Some((key, status, meta, secondary, fields, body_len))
}

/// A whole file, checked: its key and object.
fn decode(bytes: &[u8]) -> Option<(Vec<u8>, Object)> {
    let (content, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(content).to_le_bytes() != crc {
        return None;
    }
    let mut c = Cursor(content);
    let (key, status, meta, secondary, fields, body_len) = parse_head(&mut c)?;
    let body = c.take(usize::try_from(body_len).ok()?)?;
    if !c.0.is_empty() {
        return None;
    }
    let object = Object::new(
        status,
        fields,
        Body::keep(Bytes::copy_from_slice(body)),
        meta,
        secondary.to_vec(),
    );
    Some((key.to_vec(), object))
}

/// What the scan at start learns of a file.
struct Scanned {
    key: Box<[u8]>,
    tags: Box<[u8]>,
    len: u64,
}

/// A file's key, tags and length from its first bytes (the checksum is checked on load).
fn read_header(path: &Path) -> Option<Scanned> {
    let file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut start = Vec::with_capacity(HEADER_READ);
    file.take(HEADER_READ as u64).read_to_end(&mut start).ok()?;
    let mut c = Cursor(&start);
    let (key, _, _, _, fields, _) = parse_head(&mut c)?;
    Some(Scanned {
        key: key.into(),
        tags: tag_line(&fields),
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(body: &'static [u8]) -> Object {
        let mut fields = Head::default();
        fields.append("content-type", b"text/plain");
        fields.append("cache-tag", b"red, blue");
        let meta = Stored {
            request_time: 1,
            response_time: 2,
            date: 2,
            age: 0,
            lifetime: 60,
            no_cache: false,
            no_stale: true,
            stale_while_revalidate: 5,
            stale_if_error: 0,
        };
        let body = Body::keep(Bytes::from_static(body));
        Object::new(200, fields, body, meta, b"accept:x\n".to_vec())
    }

    #[test]
    fn round_trip_and_torn_files() {
        let dir = std::env::temp_dir().join(format!("weir-disk-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let disk = Disk::open(&dir, 1 << 20).unwrap();
        disk.save(b"k1", &object(b"hello")).unwrap();
        let back = disk.load(b"k1").unwrap();
        assert_eq!(&back.body.bytes()[..], b"hello");
        assert_eq!(back.meta, object(b"").meta);
        assert_eq!(back.fields.get("content-type"), Some(&b"text/plain"[..]));
        assert_eq!(back.secondary, b"accept:x\n");
        // A fresh open indexes what is there.
        let reopened = Disk::open(&dir, 1 << 20).unwrap();
        assert!(reopened.contains(b"k1") && !reopened.contains(b"k2"));
        // A torn file (cut short) fails its checksum and is removed.
        let path = reopened.path_of(hash_key(b"k1"));
        let whole = fs::read(&path).unwrap();
        fs::write(&path, &whole[..whole.len() - 3]).unwrap();
        assert!(reopened.load(b"k1").is_none());
        assert!(!path.exists() && !reopened.contains(b"k1"));
        // Tags are known without reading the body; the oldest leaves first over the size.
        let small = Disk::open(&dir, 250).unwrap();
        small.save(b"a", &object(b"first")).unwrap();
        small.save(b"b", &object(b"second")).unwrap();
        assert!(!small.contains(b"a") && small.contains(b"b"));
        assert_eq!(
            small
                .purge(|_, tags| tags.windows(3).any(|t| t == b"red"))
                .len(),
            1
        );
        assert!(!small.contains(b"b"));
        let _ = fs::remove_dir_all(&dir);
    }
}
