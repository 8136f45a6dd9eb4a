//! A body sent from a file: a static file from a worker's open-file cache, or a cached answer's
//! stored body shared by all workers (with its bytes mapped, for paths that cannot `sendfile`).

use bytes::Bytes;
use std::rc::Rc;

/// `len` bytes of a file from `offset`.
pub struct FileBody {
    pub file: FileHandle,
    pub offset: u64,
    pub len: u64,
    /// The same bytes in memory, when the file is mapped (a cache's stored body): what cannot
    /// go by `sendfile` (TLS, HTTP/2, a body filter) takes them instead of reading the file.
    pub mapped: Option<Bytes>,
}

/// An open file a body is sent from.
#[derive(Clone)]
pub enum FileHandle {
    /// A static file, from one worker's open-file cache.
    Worker(Rc<std::fs::File>),
    /// A cache's stored body, shared by all workers.
    Shared(std::sync::Arc<std::fs::File>),
}

impl std::ops::Deref for FileHandle {
    type Target = std::fs::File;

    fn deref(&self) -> &std::fs::File {
        match self {
            FileHandle::Worker(file) => file,
            FileHandle::Shared(file) => file,
        }
    }
}
