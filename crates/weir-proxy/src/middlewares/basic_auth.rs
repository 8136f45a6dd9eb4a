//! `basic_auth`: lets a request through only with a configured user's name and password (HTTP
//! Basic, RFC 7617), checked against the hash `htpasswd` wrote; else a 401 with the challenge.

use super::authenticated::{refusal, PassUser};
use super::Flow;
use crate::http::codec::RequestHead;
use crate::http::error::LocalError;
use base64::Engine;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long a verified name and password stay verified.
const REMEMBERED_FOR: Duration = Duration::from_secs(60);
/// How many verified pairs are remembered at once, across workers.
const REMEMBERED_PAIRS: usize = 4096;

/// A `basic_auth` middleware, built once per configuration and shared by the workers.
pub struct BasicAuth {
    users: HashMap<String, Secret>,
    /// Verified when the name is unknown, so an unknown name costs what a known one does.
    decoy: Secret,
    pass: PassUser,
    refusal: LocalError,
    /// Pairs verified lately, by a keyed digest of name and password (never the password):
    /// a bcrypt check costs milliseconds, and a client sends its credentials on every request.
    verified: quick_cache::sync::Cache<[u8; 16], Instant>,
    /// The digest's key, random per middleware: a remembered digest says nothing outside it.
    /// None when the system gave no random key: then nothing is remembered. SipHash-2-4 with
    /// 128 bits out: a keyed pseudo-random function as HMAC is, cheaper than HMAC-SHA256's
    /// two SHA-256 blocks on a name and password (a forged pair would need the key).
    pair_key: Option<[u64; 2]>,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

/// A password hash, by the scheme `htpasswd` wrote it with.
#[derive(Clone)]
enum Secret {
    /// `$2y$`, `$2a$`, `$2b$`, `$2x$` (`htpasswd -B`).
    Bcrypt(Arc<str>),
    /// `$apr1$SALT$HASH` (`htpasswd -m`, its default) or `$1$SALT$HASH`.
    Md5Crypt {
        magic: String,
        salt: String,
        whole: String,
    },
    /// `{SHA}` and the base64 of the password's SHA-1 (`htpasswd -s`).
    Sha1(String),
    /// A hash weir cannot verify (the config check refuses it): it never matches.
    Unknown,
}

impl Secret {
    fn parse(hash: &str) -> Secret {
        if ["$2a$", "$2b$", "$2x$", "$2y$"]
            .iter()
            .any(|p| hash.starts_with(p))
        {
            return Secret::Bcrypt(hash.into());
        }
        if let Some(digest) = hash.strip_prefix("{SHA}") {
            return Secret::Sha1(digest.to_string());
        }
        let mut parts = hash.splitn(4, '$');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(""), Some(magic), Some(salt), Some(_)) => Secret::Md5Crypt {
                magic: format!("${magic}$"),
                salt: salt.to_string(),
                whole: hash.to_string(),
            },
            _ => Secret::Unknown,
        }
    }

    /// Whether verifying costs enough to leave the worker's thread for it.
    fn is_slow(&self) -> bool {
        matches!(self, Secret::Bcrypt(_))
    }

    /// Compares in constant time where the scheme allows (bcrypt's crate does too).
    fn verify(&self, password: &[u8]) -> bool {
        match self {
            Secret::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Secret::Md5Crypt { magic, salt, whole } => {
                let computed = md5_crypt(password, salt.as_bytes(), magic.as_bytes());
                computed.as_bytes().ct_eq(whole.as_bytes()).into()
            }
            Secret::Sha1(expected) => {
                let digest =
                    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
                let computed = base64::engine::general_purpose::STANDARD.encode(digest);
                computed.as_bytes().ct_eq(expected.as_bytes()).into()
            }
            Secret::Unknown => false,
        }
    }
}

impl BasicAuth {
    pub fn new(config: &weir_config::BasicAuth) -> BasicAuth {
        let users: HashMap<String, Secret> = config
            .users
            .iter()
            .map(|(name, hash)| (name.clone(), Secret::parse(hash)))
            .collect();
        let decoy = users.values().next().cloned().unwrap_or(Secret::Unknown);
        let rng = ring::rand::SystemRandom::new();
        let pair_key = ring::rand::generate::<[u8; 16]>(&rng).ok().map(|key| {
            let key = key.expose();
            let half =
                |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().unwrap_or_default());
            [half(0), half(8)]
        });
        BasicAuth {
            users,
            decoy,
            pass: PassUser::new(&config.header_field, config.remove_header),
            refusal: refusal(format!("Basic realm=\"{}\"", config.realm)),
            verified: quick_cache::sync::Cache::new(REMEMBERED_PAIRS),
            pair_key,
        }
    }

    /// Lets the request through (with its user named upstream, its `Authorization` removed,
    /// as configured) or refuses it: at once when the pair was verified lately or its hash is
    /// a fast one, else once a blocking thread has verified a bcrypt hash.
    pub(super) fn on_request<'a>(&'a self, req: &'a mut RequestHead) -> Flow<'a> {
        let Some((user, password)) = req.head.get("authorization").and_then(basic_credentials)
        else {
            return Flow::Refuse(self.refusal.clone());
        };
        let known = self.users.get(&user);
        let pair = self.pair_digest(&user, &password);
        if known.is_some() && pair.is_some_and(|pair| self.remembers(&pair)) {
            self.pass.apply(req, &user);
            return Flow::Continue;
        }
        let secret = known.unwrap_or(&self.decoy);
        if !secret.is_slow() {
            let matched = secret.verify(&password);
            return self.decided(matched && known.is_some(), pair, req, &user);
        }
        let secret = secret.clone();
        Flow::Wait(Box::pin(async move {
            let matched = tokio::task::spawn_blocking(move || secret.verify(&password))
                .await
                .unwrap_or(false);
            // The decoy's answer means nothing: an unknown name never passes.
            self.decided(matched && known.is_some(), pair, req, &user)
        }))
    }

    /// The request let through when `good` (the pair remembered), else refused.
    fn decided(
        &self,
        good: bool,
        pair: Option<[u8; 16]>,
        req: &mut RequestHead,
        user: &str,
    ) -> Flow<'static> {
        if !good {
            return Flow::Refuse(self.refusal.clone());
        }
        if let Some(pair) = pair {
            self.verified.insert(pair, Instant::now() + REMEMBERED_FOR);
        }
        self.pass.apply(req, user);
        Flow::Continue
    }

    fn pair_digest(&self, user: &str, password: &[u8]) -> Option<[u8; 16]> {
        use siphasher::sip128::{Hasher128, SipHasher24};
        use std::hash::Hasher;
        let [k0, k1] = self.pair_key?;
        let mut hasher = SipHasher24::new_with_keys(k0, k1);
        // The name's length first, so no other name and password run together the same.
        hasher.write(&(user.len() as u64).to_be_bytes());
        hasher.write(user.as_bytes());
        hasher.write(password);
        Some(hasher.finish128().as_bytes())
    }

    fn remembers(&self, pair: &[u8; 16]) -> bool {
        match self.verified.get(pair) {
            Some(until) if until > Instant::now() => true,
            Some(_) => {
                self.verified.remove(pair);
                false
            }
            None => false,
        }
    }
}

/// The name and password of an `Authorization: Basic` value, as Go's `Request.BasicAuth` reads
/// it: the scheme in any case, then base64 of `name:password` (split at the first `:`).
fn basic_credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let (scheme, encoded) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// MD5-crypt (Poul-Henning Kamp's FreeBSD algorithm; Apache's `$apr1$` differs only in its
/// magic string): 1000 rounds of MD5 over the password and salt, encoded in crypt's base64.
fn md5_crypt(password: &[u8], salt: &[u8], magic: &[u8]) -> String {
    use md5::{Digest, Md5};
    let salt = &salt[..salt.len().min(8)];
    let mut alternate = Md5::new();
    alternate.update(password);
    alternate.update(salt);
    alternate.update(password);
    let alternate = alternate.finalize();

    let mut context = Md5::new();
    context.update(password);
    context.update(magic);
    context.update(salt);
    let mut left = password.len();
    while left > 0 {
        let take = left.min(16);
        context.update(&alternate[..take]);
        left -= take;
    }
    let mut bits = password.len();
    while bits != 0 {
        if bits & 1 == 1 {
            context.update([0u8]);
        } else {
            context.update(&password[..1]);
        }
        bits >>= 1;
    }
    let mut digest = context.finalize();

    for round in 0..1000 {
        let mut context = Md5::new();
        if round & 1 == 1 {
            context.update(password);
        } else {
            context.update(digest);
        }
        if round % 3 != 0 {
            context.update(salt);
        }
        if round % 7 != 0 {
            context.update(password);
        }
        if round & 1 == 1 {
            context.update(digest);
        } else {
            context.update(password);
        }
        digest = context.finalize();
    }

    let mut out = String::with_capacity(magic.len() + salt.len() + 23);
    out.push_str(&String::from_utf8_lossy(magic));
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let d = |i: usize| u32::from(digest[i]);
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        crypt_base64(&mut out, (d(a) << 16) | (d(b) << 8) | d(c), 4);
    }
    crypt_base64(&mut out, d(11), 2);
    out
}

/// crypt(3)'s base64: the low six bits first, from its own alphabet.
fn crypt_base64(out: &mut String, mut value: u32, chars: usize) {
    const ALPHABET: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for _ in 0..chars {
        out.push(char::from(ALPHABET[(value & 0x3f) as usize]));
        value >>= 6;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_crypt_matches_htpasswd_and_traefik_hashes() {
        // From Traefik's basic_auth_test.go (users `test` and `test2`, passwords as names).
        let hashes = [
            ("test", "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"),
            ("test2", "$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0"),
            ("overridden", "$apr1$mK.GtItK$ncnLYvNLek0weXdxo68690"),
            // `openssl passwd -1 -salt saltsalt test`: FreeBSD's MD5-crypt.
            ("test", "$1$saltsalt$tTWg0JeO/sYmHvtKmZE8c."),
        ];
        for (password, hash) in hashes {
            let secret = Secret::parse(hash);
            assert!(secret.verify(password.as_bytes()), "{hash}");
            assert!(!secret.verify(b"wrong"), "{hash}");
        }
    }

    #[test]
    fn sha1_and_bcrypt() {
        // `htpasswd -nbs test test` and `htpasswd -nbB -C 4 test test`.
        let sha = Secret::parse("{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=");
        assert!(sha.verify(b"test") && !sha.verify(b"tesT"));
        let bcrypt = Secret::parse("$2y$04$D1CSqTArbwg7.0.2jTPF5u8ZYdQWXwg02u99ZCbO8FaGgmqTt4U5.");
        assert!(bcrypt.verify(b"test") && !bcrypt.verify(b"wrong"));
        assert!(!Secret::parse("test").verify(b"test"));
    }

    #[test]
    fn credentials_are_read_as_go_reads_them() {
        assert_eq!(
            basic_credentials(b"bAsIc dGVzdDp0ZTpzdA=="),
            Some(("test".to_string(), b"te:st".to_vec()))
        );
        assert_eq!(basic_credentials(b"Bearer dGVzdDp0ZXN0"), None);
        assert_eq!(basic_credentials(b"Basic dGVzdA=="), None);
        assert_eq!(basic_credentials(b"Basic !!"), None);
    }
}
