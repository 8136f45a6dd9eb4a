//! ACME storage in etcd (`tls.acme.storage: { etcd }`), shared by a fleet: the account key and
//! each name's chain and key under `KEY_PREFIX` `acme/CA/`; a lock per name, a key created in a
//! transaction only if absent and put on a lease of `LOCK_TTL` (so a dead holder's lock goes
//! with its lease), freed by revoking that lease; and the pending challenge answers, keys
//! `answers/http/TOKEN` and `answers/alpn/NAME` each on a lease of `ANSWERS_TTL`. The lock's
//! waiting and the answers' copying are `shared_storage`'s. ACME thread only.

use super::shared_storage::{SharedStorage, ANSWERS_TTL, LOCK_TTL};
use crate::stores::etcd::Etcd;
use std::collections::HashMap;
use weir_config::EtcdProvider;

/// One block's keys in one etcd.
pub struct EtcdStorage {
    etcd: Etcd,
    endpoints: String,
    /// `KEY_PREFIX` `acme/CA/`, before `account.key`, `NAME.crt`, `NAME.key`, `NAME.lock`,
    /// `answers/`.
    prefix: String,
}

impl EtcdStorage {
    /// The store's keys for the CA named `ca` (its directory's host and port); the settings'
    /// `key` is the key prefix.
    pub fn new(store: &EtcdProvider, ca: &str) -> Result<EtcdStorage, String> {
        Ok(EtcdStorage {
            etcd: Etcd::new(store.clone())?,
            endpoints: store.endpoints.join(","),
            prefix: format!("{}acme/{ca}/", store.key),
        })
    }

    /// An error of etcd's, saying which etcd.
    fn fail(&self, e: String) -> String {
        format!("etcd {}: {e}", self.endpoints)
    }
}

impl SharedStorage for EtcdStorage {
    fn describe(&self) -> String {
        format!("etcd {} `{}`", self.endpoints, self.prefix)
    }

    fn get(&self, file: &str) -> Result<Option<Vec<u8>>, String> {
        let key = format!("{}{file}", self.prefix);
        self.etcd.get(&key).map_err(|e| self.fail(e))
    }

    fn set(&self, file: &str, bytes: &[u8]) -> Result<(), String> {
        let key = format!("{}{file}", self.prefix);
        self.etcd.put(&key, bytes, 0).map_err(|e| self.fail(e))
    }

    fn set_if_absent(&self, file: &str, bytes: &[u8]) -> Result<bool, String> {
        let key = format!("{}{file}", self.prefix);
        self.etcd
            .create_if_absent(&key, bytes, 0)
            .map_err(|e| self.fail(e))
    }

    /// A key of its own on a lease of its own, so that each answer expires on its own.
    fn share_answer(&self, field: &str, key_authorization: &str) -> Result<(), String> {
        let key = format!("{}answers/{field}", self.prefix);
        let lease = self
            .etcd
            .grant_lease(ANSWERS_TTL)
            .map_err(|e| self.fail(e))?;
        self.etcd
            .put(&key, key_authorization.as_bytes(), lease)
            .map_err(|e| self.fail(e))
    }

    /// Its lease, left with no key, expires on its own.
    fn withdraw_answer(&self, field: &str) -> Result<(), String> {
        let key = format!("{}answers/{field}", self.prefix);
        self.etcd.delete(&key).map_err(|e| self.fail(e))
    }

    fn answers(&self) -> Result<HashMap<String, String>, String> {
        let prefix = format!("{}answers/", self.prefix);
        let found = self.etcd.get_prefix(&prefix).map_err(|e| self.fail(e))?;
        Ok(found
            .into_iter()
            .filter_map(|(key, value)| {
                let field = key.strip_prefix(prefix.as_str())?.to_string();
                Some((field, String::from_utf8_lossy(&value).into_owned()))
            })
            .collect())
    }

    fn lock_key(&self, name: &str) -> String {
        format!("{}{name}.lock", self.prefix)
    }

    /// The holder's token is its lease, whose ID is also the key's value.
    fn try_lock(&self, key: &str) -> Result<Option<String>, String> {
        let lease = self.etcd.grant_lease(LOCK_TTL).map_err(|e| self.fail(e))?;
        let token = lease.to_string();
        match self.etcd.create_if_absent(key, token.as_bytes(), lease) {
            Ok(true) => Ok(Some(token)),
            taken_or_failed => {
                // This try's lease holds nothing.
                let _ = self.etcd.revoke_lease(lease);
                taken_or_failed.map(|_| None).map_err(|e| self.fail(e))
            }
        }
    }

    /// Revoking the holder's lease deletes the key with it; a lock that expired and was taken
    /// since is on another lease, untouched.
    fn release(&self, _key: &str, token: &str) -> Result<(), String> {
        let lease = token
            .parse()
            .map_err(|_| format!("`{token}` is not a lease"))?;
        self.etcd.revoke_lease(lease).map_err(|e| self.fail(e))
    }
}
