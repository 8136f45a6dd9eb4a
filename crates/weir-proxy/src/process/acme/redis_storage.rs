//! ACME storage in Redis (`tls.acme.storage: { redis }`), shared by a fleet: the account key
//! and each name's chain and key under `KEY_PREFIX` `acme/CA/`, a lock per name (`SET NX PX`
//! with a random token, released by a compare-and-delete script), and the pending challenge
//! answers (a hash `answers`); the lock's waiting and the answers' copying are
//! `shared_storage`'s. Used by the ACME thread alone, one command a connection (`call_once`):
//! never on a worker's path.

use super::shared_storage::{SharedStorage, ANSWERS_TTL, LOCK_TTL};
use crate::stores::redis::{call_once, Dialer, Value};
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::HashMap;
use weir_config::RedisStore;

/// Deletes the lock only while it still holds this holder's token (it may have expired and
/// been taken by another instance meanwhile).
const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

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

    fn call(&self, args: &[&[u8]]) -> Result<Value, String> {
        self.runtime
            .block_on(call_once(&self.dialer, args))
            .map_err(|e| format!("redis {}: {e}", self.dialer.config.endpoints.join(",")))
    }
}

impl SharedStorage for RedisStorage {
    fn describe(&self) -> String {
        format!(
            "redis {} `{}`",
            self.dialer.config.endpoints.join(","),
            self.prefix
        )
    }

    fn get(&self, file: &str) -> Result<Option<Vec<u8>>, String> {
        let key = format!("{}{file}", self.prefix);
        match self.call(&[b"GET", key.as_bytes()])? {
            Value::Text(bytes) => Ok(Some(bytes)),
            _ => Ok(None),
        }
    }

    fn set(&self, file: &str, bytes: &[u8]) -> Result<(), String> {
        let key = format!("{}{file}", self.prefix);
        self.call(&[b"SET", key.as_bytes(), bytes]).map(|_| ())
    }

    fn set_if_absent(&self, file: &str, bytes: &[u8]) -> Result<bool, String> {
        let key = format!("{}{file}", self.prefix);
        let set = self.call(&[b"SET", key.as_bytes(), bytes, b"NX"])?;
        Ok(set != Value::Nil)
    }

    /// A field of the hash `answers`, which expires as a whole.
    fn share_answer(&self, field: &str, key_authorization: &str) -> Result<(), String> {
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

    fn withdraw_answer(&self, field: &str) -> Result<(), String> {
        let key = format!("{}answers", self.prefix);
        self.call(&[b"HDEL", key.as_bytes(), field.as_bytes()])
            .map(|_| ())
    }

    fn answers(&self) -> Result<HashMap<String, String>, String> {
        let key = format!("{}answers", self.prefix);
        let Value::Array(items) = self.call(&[b"HGETALL", key.as_bytes()])? else {
            return Ok(HashMap::new());
        };
        let mut pending = HashMap::new();
        for pair in items.chunks_exact(2) {
            if let [Value::Text(field), Value::Text(answer)] = pair {
                let field = String::from_utf8_lossy(field).into_owned();
                pending.insert(field, String::from_utf8_lossy(answer).into_owned());
            }
        }
        Ok(pending)
    }

    fn lock_key(&self, name: &str) -> String {
        format!("{}{name}.lock", self.prefix)
    }

    /// `SET NX PX` with a random token.
    fn try_lock(&self, key: &str) -> Result<Option<String>, String> {
        let mut random = [0u8; 16];
        SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| "no random token for the lock".to_string())?;
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let ttl = LOCK_TTL.as_millis().to_string();
        let args: [&[u8]; 6] = [
            b"SET",
            key.as_bytes(),
            token.as_bytes(),
            b"NX",
            b"PX",
            ttl.as_bytes(),
        ];
        Ok((self.call(&args)? != Value::Nil).then_some(token))
    }

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
}
