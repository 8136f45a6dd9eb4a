//! A worker's open-file cache for the `static` action, like nginx's `open_file_cache`: open
//! descriptors with their metadata, and lookups that found nothing, each kept for
//! `server.open_file_cache.valid` (1 s by default) and then looked up again, so a hot file
//! costs no `open` or `stat` per request and a changed file is seen within that time. Bounded
//! to `open_file_cache.max` entries per worker; when full, stale entries go first, then an
//! eighth of the rest.

use crate::http::local::LocalResponse;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// An open file or folder and what its answers need.
pub struct OpenFile {
    pub file: Rc<File>,
    pub len: u64,
    pub is_dir: bool,
    /// Modification time, seconds since the epoch (what `Last-Modified` can say).
    pub mtime: u64,
    /// `"mtime-len"` in hex, as nginx makes it.
    pub etag: String,
    /// `Last-Modified` value.
    pub last_modified: String,
    /// The head of a plain 200 answer with this file, built on first use: it depends only on
    /// the file and its site's settings, and entries are per site.
    pub full_answer: OnceCell<Rc<LocalResponse>>,
}

/// Why a lookup found nothing to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// No such file (or a path leaving the root): 404.
    NotFound,
    /// Not readable: 403.
    Forbidden,
}

struct Entry {
    found: Result<Rc<OpenFile>, Missing>,
    checked: Instant,
}

pub struct OpenFiles {
    /// Per site (a `static` action), by path under its root: looked up by `&str`, so a hit
    /// allocates nothing.
    sites: RefCell<HashMap<u64, HashMap<Box<str>, Entry>>>,
    /// Entries kept (each holds a descriptor while its file exists).
    max: Cell<usize>,
    /// How long a lookup's result is reused before the file is opened again.
    valid: Cell<Duration>,
}

impl OpenFiles {
    pub fn new(settings: weir_config::OpenFileCache) -> OpenFiles {
        OpenFiles {
            sites: RefCell::default(),
            max: Cell::new(settings.max),
            valid: Cell::new(settings.valid),
        }
    }

    /// Applies reloaded settings; a change empties the cache.
    pub fn configure(&self, settings: weir_config::OpenFileCache) {
        if settings.max != self.max.get() || settings.valid != self.valid.get() {
            self.max.set(settings.max);
            self.valid.set(settings.valid);
            self.sites.borrow_mut().clear();
        }
    }

    /// The cached result for `path` of `site`, or `open()`'s (then cached) when there is
    /// none or it is older than `valid`. `max` applies per site.
    pub fn get(
        &self,
        site: u64,
        path: &str,
        now: Instant,
        open: impl FnOnce() -> Result<File, Missing>,
    ) -> Result<Rc<OpenFile>, Missing> {
        if let Some(entry) = self.sites.borrow().get(&site).and_then(|s| s.get(path)) {
            if now.saturating_duration_since(entry.checked) < self.valid.get() {
                return entry.found.clone();
            }
        }
        let found = open().and_then(describe);
        let mut sites = self.sites.borrow_mut();
        let entries = sites.entry(site).or_default();
        let max = self.max.get();
        if entries.len() >= max && !entries.contains_key(path) {
            let valid = self.valid.get();
            entries.retain(|_, e| now.saturating_duration_since(e.checked) < valid);
            // All in use: drop an eighth, whichever the map yields first.
            let mut dropped = 0;
            if entries.len() >= max {
                let drop = (max / 8).max(1);
                entries.retain(|_, _| {
                    dropped += 1;
                    dropped > drop
                });
            }
        }
        entries.insert(
            path.into(),
            Entry {
                found: found.clone(),
                checked: now,
            },
        );
        found
    }
}

fn describe(file: File) -> Result<Rc<OpenFile>, Missing> {
    let meta = file.metadata().map_err(|_| Missing::Forbidden)?;
    if !meta.is_file() && !meta.is_dir() {
        return Err(Missing::NotFound);
    }
    let modified = meta.modified().unwrap_or(UNIX_EPOCH);
    let mtime = modified
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let len = meta.len();
    Ok(Rc::new(OpenFile {
        etag: format!("\"{mtime:x}-{len:x}\""),
        last_modified: httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(mtime)),
        file: Rc::new(file),
        len,
        is_dir: meta.is_dir(),
        mtime,
        full_answer: OnceCell::new(),
    }))
}
