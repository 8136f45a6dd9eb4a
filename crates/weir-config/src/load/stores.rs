//! The shared stores a fleet of instances agrees through: `redis: { endpoints, username,
//! password, db, timeout, key_prefix, fail_open }`.

use super::{Fields, Loader};
use crate::model::RedisStore;
use crate::yaml::Node;
use std::time::Duration;

impl Loader<'_> {
    /// A Redis store: at least one `host:port` endpoint; the rest defaulted.
    pub(super) fn redis_store(&mut self, node: &Node) -> Option<RedisStore> {
        const KEYS: &[&str] = &[
            "endpoints",
            "username",
            "password",
            "db",
            "timeout",
            "key_prefix",
            "fail_open",
        ];
        let f = self.fields(node, "`redis`", KEYS)?;
        let mut ok = true;
        let endpoints = self.endpoints(
            &f,
            "`redis`",
            "a Redis endpoint must be `host:port`",
            "6379",
            is_host_port,
        );
        ok &= !endpoints.is_empty();
        let db = match f.get("db") {
            Some(n) => self.uint(n, "`db`", 0, u64::from(u32::MAX)),
            None => Some(0),
        };
        let mut timeout = Duration::from_millis(100);
        let timeout_ok = self.duration_field(&f, "timeout", &mut timeout);
        if timeout.is_zero() {
            if let Some(n) = f.get("timeout") {
                self.error(n.pos, "`timeout` must be more than 0");
                ok = false;
            }
        }
        let key_prefix = match f.get("key_prefix") {
            Some(n) => self.string(n, "`key_prefix`"),
            None => Some("weir:".to_string()),
        };
        let fail_open = match f.get("fail_open") {
            Some(n) => self.boolean(n, "`fail_open`"),
            None => Some(true),
        };
        let store = RedisStore {
            endpoints,
            username: self.text_key(&f, "username"),
            password: self.text_key(&f, "password"),
            db: u32::try_from(db?).ok()?,
            timeout,
            key_prefix: key_prefix?,
            fail_open: fail_open?,
        };
        timeout_ok?;
        ok.then_some(store)
    }
}

impl Loader<'_> {
    /// A store's `endpoints`: at least one, each `valid` (else `wrong`, which says what one
    /// must be); empty after an error. `port` is the store's usual one, for the examples.
    pub(super) fn endpoints(
        &mut self,
        f: &Fields<'_>,
        store: &str,
        wrong: &str,
        port: &str,
        valid: fn(&str) -> bool,
    ) -> Vec<String> {
        let endpoints = self.list_key(f, "endpoints");
        if endpoints.is_empty() {
            self.error(
                f.pos,
                format!(
                    "{store} needs `endpoints`, a list of `host:port` such as `127.0.0.1:{port}`"
                ),
            );
        }
        let mut all_valid = true;
        for (endpoint, pos) in &endpoints {
            if !valid(endpoint) {
                let found = format!("{endpoint:?}");
                self.error(
                    *pos,
                    format!("{wrong} such as `127.0.0.1:{port}`, found {found}"),
                );
                all_valid = false;
            }
        }
        match all_valid {
            true => endpoints.into_iter().map(|(e, _)| e).collect(),
            false => Vec::new(),
        }
    }
}

/// `host:port` with a non-empty host (a name, an IPv4 address or a bracketed IPv6 one) and a
/// port from 1 to 65535.
pub(super) fn is_host_port(text: &str) -> bool {
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    let host_ok = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
        }
    };
    host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)
}
