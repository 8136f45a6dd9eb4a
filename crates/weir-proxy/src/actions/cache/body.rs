//! A stored answer's body (`Body`): small ones in memory, large ones each in its own memory
//! file (`memfd`), which a hit on a plain socket sends by `sendfile` instead of copying it
//! into the socket. The kernel's copy of a large body into fresh socket buffers was most of
//! a large hit's cost; from the memory file the socket takes the pages themselves. The file
//! is sealed and mapped too, so HTTP/2, TLS and body filters take its bytes without a read.

use crate::http::file_body::{FileBody, FileHandle};
use bytes::Bytes;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Bodies of at least this many bytes go to a memory file. Measured on 100 KB, 64 KB and
/// 32 KB hits under wrk (`bench/run cache`'s load): 15.2 → 14.5, 10.4 → 9.4 and 6.9 → 6.9 µs of
/// CPU per request, and 1.13× the req/s at 32 KB; an 8 KB copy stays cheaper than the
/// kernel's per-page work for `sendfile`.
const SPILL_AT: usize = 32 << 10;

/// How many memory files are open now, across all stores: each is a file descriptor and a
/// mapping.
static SPILLED: AtomicUsize = AtomicUsize::new(0);

/// A part of a stored body, as an answer sends it: bytes in memory, or a part of a memory
/// file (sent by `sendfile`, its bytes mapped for the paths that cannot).
pub(super) enum Part {
    Bytes(Bytes),
    File(FileBody),
}

/// A stored body.
#[derive(Clone)]
pub(super) enum Body {
    Memory(Bytes),
    Spilled(Arc<Spilled>),
}

/// A body in its own memory file, and the file's pages mapped as bytes.
pub(super) struct Spilled {
    file: Arc<std::fs::File>,
    mapped: Bytes,
}

impl Drop for Spilled {
    fn drop(&mut self) {
        // Replies being sent may still hold the file: it closes with the last of them.
        SPILLED.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Body {
    /// Keeps `bytes`: in a memory file when it is large and one more may be open (else, or
    /// when the file cannot be made, in memory as it is).
    pub(super) fn keep(bytes: Bytes) -> Body {
        if bytes.len() < SPILL_AT {
            return Body::Memory(bytes);
        }
        match spill(&bytes) {
            Some(spilled) => Body::Spilled(Arc::new(spilled)),
            None => Body::Memory(bytes),
        }
    }

    pub(super) fn len(&self) -> u64 {
        match self {
            Body::Memory(bytes) => bytes.len() as u64,
            Body::Spilled(spilled) => spilled.mapped.len() as u64,
        }
    }

    /// The memory it holds: a memory file's pages are whole.
    pub(super) fn held_bytes(&self) -> u64 {
        match self {
            Body::Memory(bytes) => bytes.len() as u64,
            Body::Spilled(spilled) => (spilled.mapped.len() as u64).next_multiple_of(4096),
        }
    }

    /// `len` bytes from `start` (the caller keeps within the body).
    pub(super) fn part(&self, start: u64, len: u64) -> Part {
        let range = start as usize..(start + len) as usize;
        match self {
            Body::Memory(bytes) => Part::Bytes(bytes.slice(range)),
            Body::Spilled(spilled) => Part::File(FileBody {
                file: FileHandle::Shared(spilled.file.clone()),
                offset: start,
                len,
                mapped: Some(spilled.mapped.slice(range)),
            }),
        }
    }

    /// The whole body as bytes (a memory file's from its mapping).
    pub(super) fn bytes(&self) -> &Bytes {
        match self {
            Body::Memory(bytes) => bytes,
            Body::Spilled(spilled) => &spilled.mapped,
        }
    }
}

/// A new memory file holding `bytes`, sealed and mapped, unless a quarter of the process's
/// file descriptors (or of its mappings) are already memory files: connections need the rest.
fn spill(bytes: &[u8]) -> Option<Spilled> {
    if SPILLED.fetch_add(1, Ordering::Relaxed) >= spill_limit() {
        SPILLED.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    // From here on the count includes this file: `Spilled`'s drop, or the failure below,
    // takes it back.
    let made = (|| {
        use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
        let fd = memfd_create(
            "weir-cache-body",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .ok()?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes).ok()?;
        // Sealed, the file can never change size or content: what makes mapping it sound.
        let seals = SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE;
        fcntl_add_seals(&file, seals).ok()?;
        let mapped = map(&file)?;
        Some((file, mapped))
    })();
    match made {
        Some((file, mapped)) => Some(Spilled {
            file: Arc::new(file),
            mapped,
        }),
        None => {
            SPILLED.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

/// The file's pages as bytes, read-only.
#[allow(unsafe_code)]
fn map(file: &std::fs::File) -> Option<Bytes> {
    // SAFETY: a mapping is undefined behaviour only if the file changes under it. This one is
    // a memory file weir alone holds, sealed against writes and size changes before it is
    // mapped, so its bytes stay as they are until the mapping is dropped.
    let mapping = unsafe { memmap2::Mmap::map(file) }.ok()?;
    Some(Bytes::from_owner(mapping))
}

fn spill_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let files = soft.map_or(usize::MAX, |n| n as usize);
        let mappings = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(65_530);
        files.min(mappings) / 4
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_stay_in_memory_large_ones_read_back_whole() {
        assert!(matches!(
            Body::keep(Bytes::from(vec![7; 100])),
            Body::Memory(_)
        ));
        let large: Vec<u8> = (0..SPILL_AT + 5000).map(|i| i as u8).collect();
        let body = Body::keep(Bytes::from(large.clone()));
        assert!(matches!(body, Body::Spilled(_)));
        assert_eq!(body.len(), large.len() as u64);
        assert_eq!(body.held_bytes() % 4096, 0);
        assert_eq!(&body.bytes()[..], &large[..]);
        let Part::File(file) = body.part(100, 50) else {
            panic!("a spilled body answers from its file");
        };
        assert_eq!((file.offset, file.len), (100, 50));
        assert_eq!(file.mapped.as_deref(), Some(&large[100..150]));
        let mut read = [0; 50];
        std::os::unix::fs::FileExt::read_exact_at(&*file.file, &mut read, 100).unwrap();
        assert_eq!(&read[..], &large[100..150]);
    }
}
