//! A stored answer's body (`Body`): small ones in memory, large ones each in its own memory
//! file (`memfd`), which a hit on a plain socket sends by `sendfile` instead of copying it
//! into the socket. The kernel's copy of a large body into fresh socket buffers was most of
//! a large hit's cost; from the memory file the socket takes the pages themselves.

use crate::reply::{FileBody, FileHandle, ReplyBody};
use bytes::Bytes;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Bodies of at least this many bytes go to a memory file. Measured on 100 KB, 64 KB and
/// 32 KB hits under wrk (`bench/run cache`'s load): 15.1 → 14.2, 10.4 → 9.4 and 6.7 → 6.8 µs of
/// CPU per request, and 1.12× the req/s at 32 KB; an 8 KB copy stays cheaper than the
/// kernel's per-page work for `sendfile`.
const SPILL_AT: usize = 32 << 10;

/// How many memory files are open now, across all stores: each is a file descriptor.
static SPILLED: AtomicUsize = AtomicUsize::new(0);

/// A stored body.
#[derive(Clone)]
pub(super) enum Body {
    Memory(Bytes),
    Spilled(Arc<Spilled>),
}

/// A body in its own memory file.
pub(super) struct Spilled {
    file: Arc<std::fs::File>,
    len: u64,
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
            Body::Spilled(spilled) => spilled.len,
        }
    }

    /// The memory it holds: a memory file's pages are whole.
    pub(super) fn held_bytes(&self) -> u64 {
        match self {
            Body::Memory(bytes) => bytes.len() as u64,
            Body::Spilled(spilled) => spilled.len.next_multiple_of(4096),
        }
    }

    /// `len` bytes from `start` as a reply body (the caller keeps within the body).
    pub(super) fn reply(&self, start: u64, len: u64) -> ReplyBody {
        match self {
            Body::Memory(bytes) => {
                let (start, end) = (start as usize, (start + len) as usize);
                ReplyBody::Bytes(bytes.slice(start..end))
            }
            Body::Spilled(spilled) => ReplyBody::File(FileBody {
                file: FileHandle::Shared(spilled.file.clone()),
                offset: start,
                len,
            }),
        }
    }

    /// Fills `buf` from `start` (the caller keeps within the body).
    pub(super) fn copy_to(&self, buf: &mut [u8], start: u64) -> std::io::Result<()> {
        match self {
            Body::Memory(bytes) => {
                let start = start as usize;
                buf.copy_from_slice(&bytes[start..start + buf.len()]);
                Ok(())
            }
            Body::Spilled(spilled) => spilled.file.read_exact_at(buf, start),
        }
    }

    /// The whole body as bytes (a memory file's is read back).
    pub(super) fn bytes(&self) -> std::io::Result<Bytes> {
        match self {
            Body::Memory(bytes) => Ok(bytes.clone()),
            Body::Spilled(spilled) => {
                let mut buf = vec![0; spilled.len as usize];
                spilled.file.read_exact_at(&mut buf, 0)?;
                Ok(buf.into())
            }
        }
    }
}

/// A new memory file holding `bytes`, unless a quarter of the process's file descriptors
/// are already memory files (connections need the rest).
fn spill(bytes: &[u8]) -> Option<Spilled> {
    if SPILLED.fetch_add(1, Ordering::Relaxed) >= spill_limit() {
        SPILLED.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    // From here on the count includes this file: `Spilled`'s drop, or the failure below,
    // takes it back.
    let made = (|| {
        let flags = rustix::fs::MemfdFlags::CLOEXEC;
        let fd = rustix::fs::memfd_create("weir-cache-body", flags).ok()?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes).ok()?;
        Some(file)
    })();
    match made {
        Some(file) => Some(Spilled {
            file: Arc::new(file),
            len: bytes.len() as u64,
        }),
        None => {
            SPILLED.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }
}

fn spill_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        soft.map_or(usize::MAX, |n| (n / 4) as usize)
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
        assert_eq!(&body.bytes().unwrap()[..], &large[..]);
        let mut part = [0; 10];
        body.copy_to(&mut part, 4090).unwrap();
        assert_eq!(&part[..], &large[4090..4100]);
        let ReplyBody::File(file) = body.reply(100, 50) else {
            panic!("a spilled body answers from its file");
        };
        assert_eq!((file.offset, file.len), (100, 50));
    }
}
