//! The etcd provider (`providers.etcd`): at start, the document at the key merged into the
//! file's configuration (with etcd away or its document refused, the last good copy from
//! `cache_file`; without one, the file alone); then a thread that follows the key and hands
//! each new document to the control loop, which applies it as a reload (`Reloader::
//! apply_document`), keeping the old configuration when the document is refused.

use crate::stores::etcd::{Change, Etcd};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use weir_config::{Config, ConfigError, Document, EtcdProvider};

/// Reconnection backoff of the watching thread: from this, doubling, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A new document at the key (empty when the key was deleted), at its revision.
pub struct EtcdUpdate {
    pub revision: i64,
    pub document: Document,
}

/// What the provider's document is called in errors: `etcd:KEY`.
pub fn label(etcd: &EtcdProvider) -> String {
    format!("etcd:{}", etcd.key)
}

fn document(etcd: &EtcdProvider, text: String) -> Document {
    Document {
        label: label(etcd),
        text,
    }
}

/// The configuration to start with: the file's (`config`, read from `path`) with the
/// document merged in; the document used and the revision read (0 when none was).
pub fn starting_config(
    path: &str,
    config: Config,
    etcd: &EtcdProvider,
) -> (Config, Option<Document>, i64) {
    let mut revision = 0;
    let mut candidates = Vec::new();
    match Etcd::new(etcd.clone()).and_then(|client| client.read()) {
        Ok(read) => {
            revision = read.revision;
            candidates.push(("etcd", document(etcd, read.value.unwrap_or_default())));
        }
        Err(e) => crate::log_warn!("etcd: cannot read {} at start ({e})", etcd.key),
    }
    if let Some(cache) = &etcd.cache_file {
        if let Ok(text) = std::fs::read_to_string(cache) {
            candidates.push(("cache_file", document(etcd, text)));
        }
    }
    for (from, document) in candidates {
        match weir_config::load_file_with(path, Some(&document)) {
            Ok((merged, _)) => {
                crate::log_info!("etcd: serving the document from {from} (revision {revision})");
                if from == "etcd" {
                    save(etcd, &document.text);
                }
                return (merged, Some(document), revision);
            }
            Err(errors) => log_refused(&errors, from),
        }
    }
    crate::log_warn!("etcd: no usable document; serving the file alone until one comes");
    (config, None, revision)
}

pub fn log_refused(errors: &[ConfigError], from: &str) {
    crate::log_error!(
        "etcd: the document from {from} is refused: {} error(s)",
        errors.len()
    );
    for e in errors {
        crate::log_error!("  {e}");
    }
}

/// Keeps the last good document where the next start finds it (written aside, then renamed
/// over the old copy: a crash leaves one or the other whole).
pub fn save(etcd: &EtcdProvider, text: &str) {
    let Some(path) = &etcd.cache_file else {
        return;
    };
    let aside = path.with_extension("tmp");
    let written = std::fs::write(&aside, text).and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&aside, path)
    });
    if let Err(e) = written {
        crate::log_warn!("etcd: cannot write {}: {e}", path.display());
    }
}

/// Starts the thread that follows the key from `revision` (the one the starting document
/// was read at), sending each document that differs from the last one sent (`applied`, the
/// starting one) to `updates`. It reads the key again after every broken watch, so that a
/// change made while etcd was away is not missed, and logs once when etcd goes and once when
/// it comes back.
pub fn watch(
    etcd: EtcdProvider,
    revision: i64,
    applied: Option<String>,
    updates: UnboundedSender<EtcdUpdate>,
) {
    let started = std::thread::Builder::new()
        .name("weir-etcd".into())
        .spawn(move || follow(etcd, revision, applied, updates));
    if let Err(e) = started {
        crate::log_error!("etcd: cannot start the watching thread: {e}");
    }
}

fn follow(
    etcd: EtcdProvider,
    mut revision: i64,
    mut applied: Option<String>,
    updates: UnboundedSender<EtcdUpdate>,
) {
    let client = match Etcd::new(etcd.clone()) {
        Ok(client) => client,
        Err(e) => {
            crate::log_error!("etcd: {e}");
            return;
        }
    };
    let mut backoff = FIRST_BACKOFF;
    let mut away = false;
    let send = |revision: i64, text: String, applied: &mut Option<String>| {
        if applied.as_deref() == Some(text.as_str()) {
            return true;
        }
        *applied = Some(text.clone());
        let document = document(&etcd, text);
        updates.send(EtcdUpdate { revision, document }).is_ok()
    };
    loop {
        let outcome = client.read().and_then(|read| {
            if away {
                crate::log_info!("etcd: reachable again (revision {})", read.revision);
                away = false;
            }
            backoff = FIRST_BACKOFF;
            let newer = read.revision > revision || applied.is_none();
            if newer && !send(read.revision, read.value.unwrap_or_default(), &mut applied) {
                return Ok(false);
            }
            revision = read.revision;
            let mut open = true;
            let watched = client.watch(revision + 1, |change| {
                let (at, text) = match change {
                    Change::Put { revision, value } => (revision, value),
                    Change::Deleted { revision } => (revision, String::new()),
                };
                revision = at;
                open = open && send(at, text, &mut applied);
            });
            match (open, watched) {
                (false, _) => Ok(false),
                (true, Err(e)) => Err(e),
                (true, Ok(())) => Ok(true),
            }
        });
        match outcome {
            // The control loop is gone: the process is stopping.
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                if !away {
                    crate::log_warn!("etcd: unreachable ({e}); still serving revision {revision}");
                    away = true;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
