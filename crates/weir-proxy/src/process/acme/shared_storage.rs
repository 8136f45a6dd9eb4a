//! What a fleet's shared ACME store (Redis, etcd) offers the ACME thread, and the part written
//! once for every such store: a name's lock taken with retries and released when dropped (or at
//! this process's next try), and the pending challenge answers copied into the workers' table
//! so that whichever instance the CA's validation reaches answers it. ACME thread only.

use crate::listen::acme::{alpn_answer, update_table};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a name's lock lives if its holder dies: longer than an order takes (the client
/// gives up polling one after 3 minutes), short enough for another instance to take over.
pub const LOCK_TTL: Duration = Duration::from_secs(600);
/// How often a waiting instance tries the lock again.
const LOCK_RETRY: Duration = Duration::from_millis(500);
/// How long a shared answer outlives its last write: an instance that dies mid-order leaves
/// no answer behind for long.
pub const ANSWERS_TTL: Duration = Duration::from_secs(600);
/// How long the ordering instance waits after sharing an answer before the CA is told to
/// validate: the others copy the answers every second at most (see `sync_answers`).
pub const ANSWER_SPREAD: Duration = Duration::from_millis(2500);

/// The answers this process copied from each store into its table (the store's `describe`
/// then the field), so that those withdrawn from the store are withdrawn from the table.
static COPIED_ANSWERS: Mutex<Option<HashSet<String>>> = Mutex::new(None);
/// Locks this process could not release (the store away then): the key and its holder's
/// token, released when the name is locked again rather than left to block the fleet until
/// they expire.
static UNRELEASED_LOCKS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// One block's keys in one shared store (`acme/CA/` under the store's prefix).
pub trait SharedStorage: Send + Sync {
    /// Where it is, for the log (and to tell stores apart).
    fn describe(&self) -> String;
    /// The value of `file` (`account.key`, `NAME.crt`...), if stored.
    fn get(&self, file: &str) -> Result<Option<Vec<u8>>, String>;
    fn set(&self, file: &str, bytes: &[u8]) -> Result<(), String>;
    /// Sets `file` unless it is stored already; whether this call set it.
    fn set_if_absent(&self, file: &str, bytes: &[u8]) -> Result<bool, String>;
    /// Shares a pending answer, expiring after `ANSWERS_TTL`: `field` is `http/TOKEN` (the
    /// key authorization) or `alpn/NAME` (the key authorization the TLS-ALPN-01 certificate
    /// is made from).
    fn share_answer(&self, field: &str, key_authorization: &str) -> Result<(), String>;
    fn withdraw_answer(&self, field: &str) -> Result<(), String>;
    /// Every pending answer, by field.
    fn answers(&self) -> Result<HashMap<String, String>, String>;
    /// The key of `name`'s lock.
    fn lock_key(&self, name: &str) -> String;
    /// One try at `key`, held for `LOCK_TTL` at most: the holder's token when taken, `None`
    /// when another holder has it.
    fn try_lock(&self, key: &str) -> Result<Option<String>, String>;
    /// Frees `key` if `token` still holds it (it may have expired and been taken since).
    fn release(&self, key: &str, token: &str) -> Result<(), String>;
}

/// Takes `name`'s lock, waiting while another instance holds it; released when the guard is
/// dropped. An error (the store away) ends the wait.
pub fn lock<'a>(storage: &'a dyn SharedStorage, name: &str) -> Result<SharedLock<'a>, String> {
    let key = storage.lock_key(name);
    release_unreleased(storage, &key)?;
    let started = Instant::now();
    loop {
        if let Some(token) = storage.try_lock(&key)? {
            return Ok(SharedLock {
                storage,
                key,
                token,
            });
        }
        // A holder that died frees the name when its lock expires.
        if started.elapsed() > LOCK_TTL * 2 {
            return Err(format!("{key}: still held after {:?}", started.elapsed()));
        }
        // The holder's challenge may reach this instance meanwhile.
        sync_answers(storage);
        std::thread::sleep(LOCK_RETRY);
    }
}

/// Releases this process's own earlier hold of `key`, if it could not be released then.
fn release_unreleased(storage: &dyn SharedStorage, key: &str) -> Result<(), String> {
    let token = match UNRELEASED_LOCKS.lock() {
        Ok(mut held) => match held.iter().position(|(k, _)| k == key) {
            Some(at) => held.swap_remove(at).1,
            None => return Ok(()),
        },
        Err(_) => return Ok(()),
    };
    storage.release(key, &token).inspect_err(|_| {
        if let Ok(mut held) = UNRELEASED_LOCKS.lock() {
            held.push((key.to_string(), token.clone()));
        }
    })
}

/// A name's lock in a shared store while held.
pub struct SharedLock<'a> {
    storage: &'a dyn SharedStorage,
    key: String,
    token: String,
}

impl Drop for SharedLock<'_> {
    fn drop(&mut self) {
        // Otherwise released at this process's next try for the name, or left to expire.
        if let Err(e) = self.storage.release(&self.key, &self.token) {
            crate::log_error!(
                "acme: {}: cannot release the lock ({e}); released at the next try, or expires within {}s",
                self.key,
                LOCK_TTL.as_secs()
            );
            if let Ok(mut held) = UNRELEASED_LOCKS.lock() {
                held.push((self.key.clone(), self.token.clone()));
            }
        }
    }
}

/// A pending answer copied from the store.
enum Answer {
    Http(String, String),
    Alpn(String, std::sync::Arc<rustls::sign::CertifiedKey>),
}

/// Copies the store's pending answers into the workers' table and withdraws those gone from
/// it. A store that does not answer changes nothing (the order's own path reports its
/// failures).
pub fn sync_answers(storage: &dyn SharedStorage) {
    let Ok(pending) = storage.answers() else {
        return;
    };
    let scope = storage.describe();
    let Ok(mut copied) = COPIED_ANSWERS.lock() else {
        return;
    };
    let copied = copied.get_or_insert_with(HashSet::new);
    let gone: Vec<String> = copied
        .iter()
        .filter_map(|c| c.strip_prefix(scope.as_str()))
        .filter(|field| !pending.contains_key(*field))
        .map(String::from)
        .collect();
    let provider = rustls::crypto::ring::default_provider();
    let mut added = Vec::new();
    for (field, answer) in &pending {
        if copied.contains(&format!("{scope}{field}")) {
            continue;
        }
        if let Some(token) = field.strip_prefix("http/") {
            added.push((
                field.clone(),
                Answer::Http(token.to_string(), answer.clone()),
            ));
        } else if let Some(name) = field.strip_prefix("alpn/") {
            match alpn_answer(name, answer, &provider) {
                Ok(key) => added.push((field.clone(), Answer::Alpn(name.to_string(), key))),
                Err(e) => crate::log_error!("acme: {name}: a shared answer is unusable: {e}"),
            }
        }
    }
    if gone.is_empty() && added.is_empty() {
        return;
    }
    update_table(|t| {
        for field in &gone {
            if let Some(token) = field.strip_prefix("http/") {
                t.http_answers.remove(token);
            } else if let Some(name) = field.strip_prefix("alpn/") {
                t.alpn_answers.remove(name);
            }
        }
        for (_, answer) in &added {
            match answer {
                Answer::Http(token, key_authorization) => {
                    t.http_answers
                        .insert(token.clone(), key_authorization.clone());
                }
                Answer::Alpn(name, key) => {
                    t.alpn_answers.insert(name.clone(), key.clone());
                }
            }
        }
    });
    for field in gone {
        copied.remove(&format!("{scope}{field}"));
    }
    for (field, _) in added {
        crate::log_info!("acme: answering the challenge `{field}` shared by another instance");
        copied.insert(format!("{scope}{field}"));
    }
}
