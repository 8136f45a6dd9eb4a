//! `entrypoints.NAME.tls.acme`: the ACME block (RFC 8555) read and checked, the
//! `http_entrypoint` it names checked against the other entrypoints, and the warnings
//! `weir check` prints about it.

use super::Loader;
use crate::model::*;
use crate::yaml::{Node, Pos};

const KEYS: &[&str] = &[
    "email",
    "directory",
    "ca",
    "domains",
    "from_rules",
    "challenges",
    "http_entrypoint",
    "key_type",
    "renew_before",
    "storage",
];

impl Loader<'_> {
    pub(super) fn entrypoint_acme(&mut self, entrypoint: &str, node: &Node) -> Option<Acme> {
        let what = format!("`entrypoints.{entrypoint}.tls.acme`");
        let f = self.fields(node, &what, KEYS)?;
        let email = f.get("email").and_then(|n| {
            let text = self.string(n, "`email`")?;
            let plausible = text
                .split_once('@')
                .is_some_and(|(user, host)| !user.is_empty() && !host.is_empty());
            if !plausible || text.contains(char::is_whitespace) {
                self.error(
                    n.pos,
                    format!("`email` must be an address like admin@example.com, found `{text}`"),
                );
            }
            Some(text)
        });
        let directory = match f.get("directory") {
            Some(n) => {
                let text = self.string(n, "`directory`")?;
                if !text.starts_with("https://") {
                    self.error(
                        n.pos,
                        format!("`directory` must be an https:// URL (RFC 8555 requires HTTPS), found `{text}`"),
                    );
                }
                text
            }
            None => DEFAULT_ACME_DIRECTORY.to_string(),
        };
        let ca = f
            .get("ca")
            .and_then(|n| self.string(n, "`ca`"))
            .map(|text| self.base.join(text));
        let mut domains = Vec::new();
        for (name, pos) in self.list_key(&f, "domains") {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name.starts_with("*.") {
                self.error(
                    pos,
                    format!("`{name}`: a wildcard name needs the dns-01 challenge, which weir does not answer; list each name"),
                );
            } else if !is_dns_name(&name) {
                self.error(
                    pos,
                    format!("`{name}` is not a DNS name; expected a name like www.example.com"),
                );
            } else if !domains.contains(&name) {
                domains.push(name);
            }
        }
        let from_rules = self.flag_key(&f, "from_rules");
        if f.get("domains").is_none() && !from_rules {
            self.error(
                f.pos,
                format!("{what} needs `domains` (e.g. `domains: [www.example.com]`) or `from_rules: true`"),
            );
        }
        let mut challenges = Vec::new();
        match f.get("challenges") {
            Some(n) => {
                let listed = self.string_list(n, "`challenges`");
                if listed.is_empty() {
                    self.error(
                        n.pos,
                        "`challenges` needs at least one of: tls-alpn-01, http-01",
                    );
                }
                for (name, pos) in listed {
                    let challenge = match name.as_str() {
                        "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
                        "http-01" => AcmeChallenge::Http01,
                        other => {
                            self.error(
                                pos,
                                format!(
                                    "unknown challenge `{other}`; expected: tls-alpn-01, http-01"
                                ),
                            );
                            continue;
                        }
                    };
                    if !challenges.contains(&challenge) {
                        challenges.push(challenge);
                    }
                }
            }
            None => challenges = vec![AcmeChallenge::TlsAlpn01, AcmeChallenge::Http01],
        }
        let http_entrypoint = f
            .get("http_entrypoint")
            .and_then(|n| Some((self.string(n, "`http_entrypoint`")?, n.pos)));
        if challenges.contains(&AcmeChallenge::Http01) && http_entrypoint.is_none() {
            let pos = f.get("challenges").map_or(f.pos, |n| n.pos);
            self.error(
                pos,
                "the `http-01` challenge needs `http_entrypoint`, the plain-HTTP entrypoint on port 80 that answers it (or leave `http-01` out of `challenges`)",
            );
        }
        let key_type = match f.get("key_type") {
            Some(n) => match self.string(n, "`key_type`").as_deref() {
                Some("ecdsa-p256") => AcmeKeyType::EcdsaP256,
                Some("rsa2048") => AcmeKeyType::Rsa2048,
                Some(other) => {
                    self.error(
                        n.pos,
                        format!("`key_type` must be ecdsa-p256 or rsa2048, found `{other}`"),
                    );
                    AcmeKeyType::EcdsaP256
                }
                None => AcmeKeyType::EcdsaP256,
            },
            None => AcmeKeyType::EcdsaP256,
        };
        let renew_before = match f.get("renew_before") {
            Some(n) => match self.duration(n, "`renew_before`") {
                Some(d) if d.is_zero() => {
                    self.error(n.pos, "`renew_before` must be more than 0");
                    None
                }
                d => d,
            },
            None => None,
        };
        let mut storage_redis = None;
        let mut storage_etcd = None;
        let storage = match f.get("storage") {
            // A fleet's shared store rather than a folder. Its errors leave the block in
            // place (the config fails anyway), so that no second error follows from them.
            Some(n) if matches!(n.value, crate::yaml::Value::Map(_)) => {
                let store = self.fields(n, "`storage`", &["redis", "etcd"]);
                match store.as_ref().map(|f| (f.get("redis"), f.get("etcd"))) {
                    Some((Some(redis), None)) => storage_redis = self.redis_store(redis),
                    Some((None, Some(etcd))) => {
                        storage_etcd = self.etcd_store(etcd, super::providers::EtcdUse::AcmeStorage)
                    }
                    Some((Some(_), Some(_))) => {
                        self.error(n.pos, "`storage` takes one of `redis` or `etcd`, not both")
                    }
                    // Other keys were named as unknown already.
                    Some((None, None)) if matches!(&n.value, crate::yaml::Value::Map(m) if m.is_empty()) => {
                        self.error(
                            n.pos,
                            "`storage` needs one of `redis` or `etcd`, or is a folder",
                        )
                    }
                    Some(_) => {}
                    None => {}
                }
                self.base.join("acme")
            }
            Some(n) => {
                let text = self.string(n, "`storage`")?;
                self.base.join(text)
            }
            None => self.base.join("acme"),
        };
        Some(Acme {
            email,
            directory,
            ca,
            domains,
            from_rules,
            challenges,
            http_entrypoint,
            key_type,
            renew_before,
            storage,
            storage_redis,
            storage_etcd,
            pos: f.pos,
        })
    }

    /// Each `http_entrypoint` names a plain-HTTP TCP entrypoint of this config.
    pub(super) fn check_acme_entrypoints(&mut self, entrypoints: &[Entrypoint]) {
        let named = entrypoints.iter().filter_map(|ep| {
            Some((
                ep,
                ep.tls.as_ref()?.acme.as_ref()?.http_entrypoint.as_ref()?,
            ))
        });
        let mut errors = Vec::new();
        for (ep, (target, pos)) in named {
            match entrypoints.iter().find(|other| other.name == *target) {
                None => errors.push((
                    *pos,
                    format!(
                        "`http_entrypoint` names `{target}`, which is not an entrypoint; expected one of: {}",
                        entrypoints.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                )),
                Some(other) if other.tls.is_some() || other.transport != Transport::Tcp => errors
                    .push((
                        *pos,
                        format!(
                            "`http_entrypoint` of entrypoint `{}` names `{target}`, which is not plain HTTP: HTTP-01 is answered over http:// on port 80",
                            ep.name
                        ),
                    )),
                Some(_) => {}
            }
        }
        for (pos, message) in errors {
            self.error(pos, message);
        }
    }
}

/// What `weir check` warns about ACME blocks, each `LINE:COLUMN: warning: message`: an
/// `http_entrypoint` not on port 80 (the CA validates HTTP-01 on port 80 of the name, so it is
/// reached only through a forward from port 80).
pub fn acme_warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    for ep in &config.entrypoints {
        let Some(acme) = ep.tls.as_ref().and_then(|tls| tls.acme.as_ref()) else {
            continue;
        };
        let Some((target, pos)) = &acme.http_entrypoint else {
            continue;
        };
        let Some(http) = config.entrypoints.iter().find(|e| e.name == *target) else {
            continue;
        };
        if acme.challenges.contains(&AcmeChallenge::Http01) && http.address.port() != 80 {
            warnings.push(warning(
                *pos,
                &format!(
                    "warning: `http_entrypoint` `{target}` listens on port {}, but the CA asks for HTTP-01 answers on port 80: validation succeeds only if port 80 is forwarded to it",
                    http.address.port()
                ),
            ));
        }
    }
    warnings
}

fn warning(pos: Pos, message: &str) -> String {
    format!("{}:{}: {message}", pos.line, pos.column)
}

/// A DNS name of letters, digits and hyphens, in labels of 1 to 63, at least two labels.
fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.contains('.')
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::acme_warnings;
    use crate::load::load_str;
    use crate::load::tests::errors;

    fn config(acme: &str) -> String {
        format!(
            "entrypoints:\n  web: {{ address: \"127.0.0.1:80\" }}\n  secure:\n    address: \"127.0.0.1:443\"\n    tls:\n      acme: {acme}\n"
        )
    }

    /// The `acme` block of `config(acme)`, loaded.
    fn loaded(acme: &str) -> crate::Acme {
        let cfg = load_str(&config(acme), "t.yaml").unwrap();
        cfg.entrypoints[1].tls.clone().unwrap().acme.unwrap()
    }

    #[test]
    fn an_acme_entrypoint_needs_no_certificates() {
        let text =
            config("{ email: a@example.org, domains: [www.example.org], http_entrypoint: web }");
        let cfg = load_str(&text, "/etc/weir/t.yaml").unwrap();
        let acme = cfg.entrypoints[1].tls.clone().unwrap().acme.unwrap();
        assert_eq!(acme.directory, crate::DEFAULT_ACME_DIRECTORY);
        assert_eq!(acme.domains, ["www.example.org"]);
        assert_eq!(
            acme.challenges,
            [
                crate::AcmeChallenge::TlsAlpn01,
                crate::AcmeChallenge::Http01
            ]
        );
        assert_eq!(acme.key_type, crate::AcmeKeyType::EcdsaP256);
        assert_eq!(acme.storage, std::path::Path::new("/etc/weir/acme"));
        assert_eq!(acme.renew_before, None);
        assert!(acme_warnings(&cfg).is_empty());
    }

    #[test]
    fn http_01_needs_an_http_entrypoint() {
        let errs = errors(&config("{ domains: [www.example.org] }"));
        assert_eq!(
            errs,
            ["t.yaml:6:13: the `http-01` challenge needs `http_entrypoint`, the plain-HTTP entrypoint on port 80 that answers it (or leave `http-01` out of `challenges`)"]
        );
        // With tls-alpn-01 alone it is not needed.
        let text = config("{ domains: [www.example.org], challenges: [tls-alpn-01] }");
        assert!(load_str(&text, "t.yaml").is_ok());
    }

    #[test]
    fn each_bad_value_is_named_at_its_place() {
        let errs = errors(&config(
            "{ email: nobody, directory: \"http://ca/dir\", domains: [\"*.example.org\", \"bad_name\"], challenges: [dns-01], key_type: rsa4096, renew_before: 0s, http_entrypoint: web }",
        ));
        assert_eq!(
            errs,
            [
                "t.yaml:6:22: `email` must be an address like admin@example.com, found `nobody`",
                "t.yaml:6:41: `directory` must be an https:// URL (RFC 8555 requires HTTPS), found `http://ca/dir`",
                "t.yaml:6:68: `*.example.org`: a wildcard name needs the dns-01 challenge, which weir does not answer; list each name",
                "t.yaml:6:85: `bad_name` is not a DNS name; expected a name like www.example.com",
                "t.yaml:6:111: unknown challenge `dns-01`; expected: tls-alpn-01, http-01",
                "t.yaml:6:130: `key_type` must be ecdsa-p256 or rsa2048, found `rsa4096`",
                "t.yaml:6:153: `renew_before` must be more than 0",
            ]
        );
    }

    #[test]
    fn storage_is_a_folder_or_a_redis_store() {
        let acme = loaded("{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { redis: { endpoints: [\"127.0.0.1:6390\"], key_prefix: \"x:\" } } }");
        let redis = acme.storage_redis.as_ref().unwrap();
        assert_eq!(redis.endpoints, ["127.0.0.1:6390"]);
        assert_eq!(redis.key_prefix, "x:");
        // The store's own checks, at their place.
        let errs = errors(&config(
            "{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { redis: { endpoints: [nope] } } }",
        ));
        assert_eq!(
            errs,
            ["t.yaml:6:100: a Redis endpoint must be `host:port` such as `127.0.0.1:6379`, found \"nope\""]
        );
        let errs = errors(&config(
            "{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { } }",
        ));
        assert_eq!(
            errs,
            ["t.yaml:6:77: `storage` needs one of `redis` or `etcd`, or is a folder"]
        );
        let errs = errors(&config(
            "{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { s3: x } }",
        ));
        assert_eq!(
            errs,
            ["t.yaml:6:79: unknown key `s3` in `storage`; expected one of: redis, etcd"]
        );
    }

    #[test]
    fn storage_can_be_an_etcd_store() {
        let acme = loaded("{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { etcd: { endpoints: [\"127.0.0.1:2379\"] } } }");
        let etcd = acme.storage_etcd.as_ref().unwrap();
        assert_eq!(etcd.endpoints, ["127.0.0.1:2379"]);
        assert_eq!(etcd.key, "/weir/");
        assert!(acme.storage_redis.is_none());
        let acme = loaded("{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { etcd: { endpoints: [\"https://e:2379\"], key_prefix: /fleet/, username: u, password: p } } }");
        let etcd = acme.storage_etcd.as_ref().unwrap();
        assert_eq!(
            (etcd.key.as_str(), etcd.username.as_str()),
            ("/fleet/", "u")
        );
        // The provider's checks, at their place, and its keys that do not apply refused.
        let storage = |etcd: &str| {
            errors(&config(&format!(
                "{{ domains: [a.example.org], challenges: [tls-alpn-01], storage: {{ etcd: {etcd} }} }}"
            )))
        };
        assert_eq!(
            storage("{ key_prefix: /p/ }"),
            ["t.yaml:6:85: `etcd` needs `endpoints`, a list of `host:port` such as `127.0.0.1:2379`"]
        );
        assert_eq!(
            storage("{ endpoints: [\"ftp://e:1\"], username: u }"),
            [
                "t.yaml:6:85: `etcd` takes `username` and `password` together",
                "t.yaml:6:99: an etcd endpoint must be `host:port`, `http://host:port` or `https://host:port` such as `127.0.0.1:2379`, found \"ftp://e:1\"",
            ]
        );
        assert_eq!(
            storage("{ endpoints: [\"e:1\"], key: /k, cache_file: c.yaml }"),
            [
                "t.yaml:6:107: unknown key `key` in `etcd`; expected one of: endpoints, key_prefix, username, password, tls",
                "t.yaml:6:116: unknown key `cache_file` in `etcd`; expected one of: endpoints, key_prefix, username, password, tls",
            ]
        );
        assert_eq!(
            storage("{ endpoints: [\"e:1\"], key_prefix: [a] }"),
            ["t.yaml:6:119: `key_prefix` must be a string, found a list"]
        );
        assert_eq!(
            errors(&config("{ domains: [a.example.org], challenges: [tls-alpn-01], storage: { redis: { endpoints: [\"r:1\"] }, etcd: { endpoints: [\"e:1\"] } } }")),
            ["t.yaml:6:77: `storage` takes one of `redis` or `etcd`, not both"]
        );
    }

    #[test]
    fn rsa_keys_are_read_and_empty_challenges_refused() {
        let acme =
            loaded("{ domains: [a.example.org], challenges: [tls-alpn-01], key_type: rsa2048 }");
        assert_eq!(acme.key_type, crate::AcmeKeyType::Rsa2048);
        let errs = errors(&config("{ domains: [a.example.org], challenges: [] }"));
        assert_eq!(
            errs,
            ["t.yaml:6:53: `challenges` needs at least one of: tls-alpn-01, http-01"]
        );
    }

    #[test]
    fn names_are_needed_and_keys_known() {
        let errs = errors(&config(
            "{ challenges: [tls-alpn-01], domain: [a.example.org] }",
        ));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].starts_with("t.yaml:6:13: `entrypoints.secure.tls.acme` needs `domains`"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:6:42: unknown key `domain` in `entrypoints.secure.tls.acme` (did you mean `domains`?)"),
            "{errs:?}"
        );
        let text = config("{ challenges: [tls-alpn-01], from_rules: true }");
        assert!(load_str(&text, "t.yaml").is_ok());
    }

    #[test]
    fn the_http_entrypoint_must_be_a_plain_http_entrypoint() {
        let errs = errors(&config(
            "{ domains: [a.example.org], http_entrypoint: webb }",
        ));
        assert_eq!(
            errs,
            ["t.yaml:6:58: `http_entrypoint` names `webb`, which is not an entrypoint; expected one of: web, secure"]
        );
        let errs = errors(&config(
            "{ domains: [a.example.org], http_entrypoint: secure }",
        ));
        assert_eq!(
            errs,
            ["t.yaml:6:58: `http_entrypoint` of entrypoint `secure` names `secure`, which is not plain HTTP: HTTP-01 is answered over http:// on port 80"]
        );
    }

    #[test]
    fn an_http_entrypoint_off_port_80_is_a_warning() {
        let text = config("{ domains: [a.example.org], http_entrypoint: web }")
            .replace("127.0.0.1:80\"", "127.0.0.1:8080\"");
        let cfg = load_str(&text, "t.yaml").unwrap();
        assert_eq!(
            acme_warnings(&cfg),
            ["6:58: warning: `http_entrypoint` `web` listens on port 8080, but the CA asks for HTTP-01 answers on port 80: validation succeeds only if port 80 is forwarded to it"]
        );
    }
}
