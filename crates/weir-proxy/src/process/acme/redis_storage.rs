//! ACME storage in Redis (`tls.acme.storage: { redis }`), shared by a fleet: the account key
//! and each name's chain and key under `KEY_PREFIX` `acme/CA/`, and a lock per name (`SET NX
//! PX` with a random token, released by a compare-and-delete script) so that one instance
//! orders a name while the others wait for it and load its result; and the pending challenge
//! answers (a hash `answers`), which every instance's ACME thread copies into its workers'
//! table, so that whichever instance the CA's validation reaches answers it. Used by the ACME
//! thread alone, one command a connection (`call_once`): never on a worker's path.

use crate::listen::acme::{alpn_answer, update_table};
use crate::stores::redis::{call_once, Dialer, Value};
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_config::RedisStore;

/// How long a name's lock lives if its holder dies: longer than an order takes (the client
/// gives up polling one after 3 minutes), short enough for another instance to take over.
const LOCK_TTL: Duration = Duration::from_secs(600);
/// How often a waiting instance tries the lock again.
const LOCK_RETRY: Duration = Duration::from_millis(500);
/// Deletes the lock only while it still holds this holder's token (it may have expired and
/// been taken by another instance meanwhile).
const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// How long the answers hash outlives its last write: an instance that dies mid-order leaves
/// no answer behind for long.
const ANSWERS_TTL: Duration = Duration::from_secs(600);
/// How long the ordering instance waits after sharing an answer before the CA is told to
/// validate: the others copy the answers every second at most (see `sync_answers`).
pub const ANSWER_SPREAD: Duration = Duration::from_millis(2500);

/// The answers this process copied from each store into its table (`PREFIX` then the
/// field), so that those withdrawn from the store are withdrawn from the table.
static COPIED_ANSWERS: Mutex<Option<HashSet<String>>> = Mutex::new(None);
/// Locks this process could not release (Redis away then): the key and its token, released
/// when the name is locked again rather than left to block the fleet until they expire.
static UNRELEASED_LOCKS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// One block's keys in one Redis store.
pub struct RedisStorage {
    dialer: Dialer,
    /// `KEY_PREFIX` `acme/CA/`, before `account.key`, `NAME.crt`, `NAME.key`, `NAME.lock`.
    prefix: String,
    /// For the ACME thread's blocking calls into the async client.
    runtime: tokio::runtime::Runtime,
}

impl RedisStorage {
    /// The store's keys for the CA named `ca` (its directory's host and port).
    pub fn new(store: &RedisStore, ca: &str) -> Result<RedisStorage, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("acme storage runtime: {e}"))?;
        Ok(RedisStorage {
            dialer: Dialer::new(store.clone())?,
            prefix: format!("{}acme/{ca}/", store.key_prefix),
            runtime,
        })
    }

    /// Where it is, for the log.
    pub fn describe(&self) -> String {
        format!(
            "redis {} `{}`",
            self.dialer.config.endpoints.join(","),
            self.prefix
        )
    }

    fn call(&self, args: &[&[u8]]) -> Result<Value, String> {
        self.runtime
            .block_on(call_once(&self.dialer, args))
            .map_err(|e| format!("redis {}: {e}", self.dialer.config.endpoints.join(",")))
    }

    /// The value of `file` (`account.key`, `NAME.crt`...), if stored.
    pub fn get(&self, file: &str) -> Result<Option<Vec<u8>>, String> {
        let key = format!("{}{file}", self.prefix);
        match self.call(&[b"GET", key.as_bytes()])? {
            Value::Text(bytes) => Ok(Some(bytes)),
            _ => Ok(None),
        }
    }

    pub fn set(&self, file: &str, bytes: &[u8]) -> Result<(), String> {
        let key = format!("{}{file}", self.prefix);
        self.call(&[b"SET", key.as_bytes(), bytes]).map(|_| ())
    }

    /// Sets `file` unless it is stored already; whether this call set it.
    pub fn set_if_absent(&self, file: &str, bytes: &[u8]) -> Result<bool, String> {
        let key = format!("{}{file}", self.prefix);
        let set = self.call(&[b"SET", key.as_bytes(), bytes, b"NX"])?;
        Ok(set != Value::Nil)
    }

    /// Shares a pending answer: `field` is `http/TOKEN` (the key authorization) or
    /// `alpn/NAME` (the key authorization the TLS-ALPN-01 certificate is made from).
    pub fn share_answer(&self, field: &str, key_authorization: &str) -> Result<(), String> {
        let key = format!("{}answers", self.prefix);
        let ttl = ANSWERS_TTL.as_millis().to_string();
        let args: [&[u8]; 4] = [
            b"HSET",
            key.as_bytes(),
            field.as_bytes(),
            key_authorization.as_bytes(),
        ];
        self.call(&args)?;
        self.call(&[b"PEXPIRE", key.as_bytes(), ttl.as_bytes()])
            .map(|_| ())
    }

    pub fn withdraw_answer(&self, field: &str) -> Result<(), String> {
        let key = format!("{}answers", self.prefix);
        self.call(&[b"HDEL", key.as_bytes(), field.as_bytes()])
            .map(|_| ())
    }

    /// Copies the store's pending answers into the workers' table and withdraws those gone
    /// from it. A store that does not answer changes nothing (the order's own path reports
    /// Redis' failures).
    pub fn sync_answers(&self) {
        let key = format!("{}answers", self.prefix);
        let Ok(Value::Array(items)) = self.call(&[b"HGETALL", key.as_bytes()]) else {
            return;
        };
        let mut pending = HashMap::new();
        for pair in items.chunks_exact(2) {
            if let [Value::Text(field), Value::Text(answer)] = pair {
                let field = String::from_utf8_lossy(field).into_owned();
                pending.insert(field, String::from_utf8_lossy(answer).into_owned());
            }
        }
        let Ok(mut copied) = COPIED_ANSWERS.lock() else {
            return;
        };
        let copied = copied.get_or_insert_with(HashSet::new);
        let gone: Vec<String> = copied
            .iter()
            .filter_map(|c| c.strip_prefix(self.prefix.as_str()))
            .filter(|field| !pending.contains_key(*field))
            .map(String::from)
            .collect();
        let provider = rustls::crypto::ring::default_provider();
        let mut added = Vec::new();
        for (field, answer) in &pending {
            if copied.contains(&format!("{}{field}", self.prefix)) {
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
            copied.remove(&format!("{}{field}", self.prefix));
        }
        for (field, _) in added {
            crate::log_info!("acme: answering the challenge `{field}` shared by another instance");
            copied.insert(format!("{}{field}", self.prefix));
        }
    }

    /// Takes `name`'s lock, waiting while another instance holds it; released when the guard
    /// is dropped. An error (Redis away) ends the wait.
    pub fn lock(&self, name: &str) -> Result<RedisLock<'_>, String> {
        let key = format!("{}{name}.lock", self.prefix);
        let mut random = [0u8; 16];
        SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| "no random token for the lock".to_string())?;
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let ttl = LOCK_TTL.as_millis().to_string();
        self.release_unreleased(&key)?;
        let started = Instant::now();
        loop {
            let args: [&[u8]; 6] = [
                b"SET",
                key.as_bytes(),
                token.as_bytes(),
                b"NX",
                b"PX",
                ttl.as_bytes(),
            ];
            if self.call(&args)? != Value::Nil {
                return Ok(RedisLock {
                    storage: self,
                    key,
                    token,
                });
            }
            // A holder that died frees the name when its lock expires.
            if started.elapsed() > LOCK_TTL * 2 {
                return Err(format!("{key}: still held after {:?}", started.elapsed()));
            }
            // The holder's challenge may reach this instance meanwhile.
            self.sync_answers();
            std::thread::sleep(LOCK_RETRY);
        }
    }
}

impl RedisStorage {
    fn release(&self, key: &str, token: &str) -> Result<(), String> {
        let args: [&[u8]; 5] = [
            b"EVAL",
            RELEASE_SCRIPT.as_bytes(),
            b"1",
            key.as_bytes(),
            token.as_bytes(),
        ];
        self.call(&args).map(|_| ())
    }

    /// Releases this process's own earlier hold of `key`, if it could not be released then.
    fn release_unreleased(&self, key: &str) -> Result<(), String> {
        let token = match UNRELEASED_LOCKS.lock() {
            Ok(mut held) => match held.iter().position(|(k, _)| k == key) {
                Some(at) => held.swap_remove(at).1,
                None => return Ok(()),
            },
            Err(_) => return Ok(()),
        };
        self.release(key, &token).inspect_err(|_| {
            if let Ok(mut held) = UNRELEASED_LOCKS.lock() {
                held.push((key.to_string(), token.clone()));
            }
        })
    }
}

/// A pending answer copied from the store.
enum Answer {
    Http(String, String),
    Alpn(String, std::sync::Arc<rustls::sign::CertifiedKey>),
}

/// A name's lock in Redis while held.
pub struct RedisLock<'a> {
    storage: &'a RedisStorage,
    key: String,
    token: String,
}

impl Drop for RedisLock<'_> {
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
