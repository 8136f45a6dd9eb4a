//! `providers:` where more of the configuration comes from: `etcd: { endpoints, key,
//! username, password, cache_file, tls }`; the same etcd settings read for an ACME block's
//! `storage: { etcd }`.

use super::Loader;
use crate::model::{EtcdProvider, Providers};
use crate::yaml::Node;

/// Where an ACME block's keys start in etcd when `key_prefix` is not given.
pub const DEFAULT_ETCD_KEY_PREFIX: &str = "/weir/";

/// What an etcd store's settings are read for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum EtcdUse {
    Provider,
    AcmeStorage,
}

impl Loader<'_> {
    pub(super) fn providers(&mut self, node: Option<&Node>) -> Providers {
        let Some(node) = node else {
            return Providers::default();
        };
        let Some(f) = self.fields(node, "`providers`", &["etcd"]) else {
            return Providers::default();
        };
        Providers {
            etcd: f
                .get("etcd")
                .and_then(|n| self.etcd_store(n, EtcdUse::Provider)),
        }
    }

    /// An etcd store's settings: `providers.etcd`, or an ACME block's `storage: { etcd }`,
    /// whose keys start with `key_prefix` (held in `key`) and which has no `cache_file`.
    pub(super) fn etcd_store(&mut self, node: &Node, using: EtcdUse) -> Option<EtcdProvider> {
        const PROVIDER_KEYS: &[&str] = &[
            "endpoints",
            "key",
            "username",
            "password",
            "cache_file",
            "tls",
        ];
        const STORAGE_KEYS: &[&str] = &["endpoints", "key_prefix", "username", "password", "tls"];
        let keys = match using {
            EtcdUse::Provider => PROVIDER_KEYS,
            EtcdUse::AcmeStorage => STORAGE_KEYS,
        };
        let f = self.fields(node, "`etcd`", keys)?;
        let mut ok = true;
        let endpoints = self.endpoints(
            &f,
            "`etcd`",
            "an etcd endpoint must be `host:port`, `http://host:port` or `https://host:port`",
            "2379",
            |endpoint| {
                let bare = endpoint
                    .strip_prefix("http://")
                    .or_else(|| endpoint.strip_prefix("https://"))
                    .unwrap_or(endpoint);
                super::stores::is_host_port(bare.trim_end_matches('/'))
            },
        );
        ok &= !endpoints.is_empty();
        let key = match using {
            EtcdUse::Provider => match f.get("key") {
                Some(n) => self.string(n, "`key`"),
                None => Some("/weir/dynamic".to_string()),
            },
            // Under `/weir/` by default, as is the provider's default key.
            EtcdUse::AcmeStorage => match f.get("key_prefix") {
                Some(n) => self.string(n, "`key_prefix`"),
                None => Some(DEFAULT_ETCD_KEY_PREFIX.to_string()),
            },
        };
        if using == EtcdUse::Provider && key.as_deref() == Some("") {
            if let Some(n) = f.get("key") {
                self.error(n.pos, "`key` must not be empty");
                ok = false;
            }
        }
        let username = self.text_key(&f, "username");
        let password = self.text_key(&f, "password");
        if username.is_empty() != password.is_empty() {
            self.error(f.pos, "`etcd` takes `username` and `password` together");
            ok = false;
        }
        let cache_file = f
            .get("cache_file")
            .and_then(|n| self.string(n, "`cache_file`"))
            .map(|path| self.base.join(path));
        let provider = EtcdProvider {
            endpoints,
            key: key?,
            username,
            password,
            cache_file,
            tls: f.get("tls").map(|t| self.client_tls(t)),
        };
        ok.then_some(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{errors, BASE};
    use crate::load_str;
    use std::path::PathBuf;

    #[test]
    fn etcd_settings_and_defaults() {
        let yaml = format!("{BASE}providers:\n  etcd: {{ endpoints: [\"127.0.0.1:2379\", \"http://e2:2379\"], cache_file: etcd.yaml }}\n");
        let etcd = load_str(&yaml, "/etc/weir/w.yaml")
            .unwrap()
            .providers
            .etcd
            .unwrap();
        assert_eq!(etcd.endpoints, ["127.0.0.1:2379", "http://e2:2379"]);
        assert_eq!(etcd.key, "/weir/dynamic");
        assert_eq!(etcd.cache_file, Some(PathBuf::from("/etc/weir/etcd.yaml")));
        assert!(load_str(BASE, "w.yaml").unwrap().providers.etcd.is_none());
    }

    #[test]
    fn etcd_errors() {
        let bad = |body: &str| errors(&format!("{BASE}providers:\n  etcd: {body}\n"));
        assert_eq!(
            bad("{ key: /k }"),
            ["t.yaml:4:9: `etcd` needs `endpoints`, a list of `host:port` such as `127.0.0.1:2379`"]
        );
        assert_eq!(
            bad("{ endpoints: [\"ftp://e:1\"], key: \"\", username: u, tlz: {} }"),
            [
                "t.yaml:4:9: `etcd` takes `username` and `password` together",
                "t.yaml:4:23: an etcd endpoint must be `host:port`, `http://host:port` or `https://host:port` such as `127.0.0.1:2379`, found \"ftp://e:1\"",
                "t.yaml:4:42: `key` must not be empty",
                "t.yaml:4:59: unknown key `tlz` in `etcd` (did you mean `tls`?); expected one of: endpoints, key, username, password, cache_file, tls",
            ]
        );
    }
}
