//! `digest_auth`: lets a request through only with a configured user's digest (HTTP Digest,
//! RFC 7616 with MD5 and `qop=auth`, as Traefik's go-http-auth checks it) over a nonce weir
//! issued; else a 401 with a challenge carrying a fresh nonce.

use super::authenticated::{refusal, PassUser};
use crate::http::codec::RequestHead;
use crate::http::error::LocalError;
use crate::http::router::path_unescape;
use base64::Engine;
use md5::{Digest, Md5};
use ring::hmac;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use subtle::ConstantTimeEq;

/// How long a nonce is good for; after that, a request with a right digest is answered with a
/// fresh nonce and `stale=true`, which clients follow without asking for the password again.
const NONCE_LIFETIME_SECS: u64 = 300;
/// How many nonces' last counts are remembered at once, across workers.
const REMEMBERED_NONCES: usize = 8192;
/// The bytes of a nonce: issue time and serial (8 each), then the first 16 of their HMAC.
const NONCE_BYTES: usize = 32;

/// A `digest_auth` middleware, built once per configuration and shared by the workers.
pub struct DigestAuth {
    /// This realm's users' HA1 (lowercase hex): the others can never be let through.
    users: HashMap<String, String>,
    /// Checked when the name is unknown, so an unknown name costs what a known one does.
    decoy: String,
    realm: String,
    pass: PassUser,
    /// None when the system gave no randomness: then every request is refused.
    nonces: Option<Nonces>,
}

impl std::fmt::Debug for DigestAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestAuth")
            .field("users", &self.users.len())
            .field("realm", &self.realm)
            .finish_non_exhaustive()
    }
}

impl DigestAuth {
    pub fn new(config: &weir_config::DigestAuth) -> DigestAuth {
        let users = config
            .users
            .iter()
            .filter(|((_, realm), _)| *realm == config.realm)
            .map(|((name, _), ha1)| (name.clone(), ha1.clone()))
            .collect();
        DigestAuth {
            users,
            decoy: "0".repeat(32),
            realm: config.realm.clone(),
            pass: PassUser::new(&config.header_field, config.remove_header),
            nonces: Nonces::new(),
        }
    }

    /// Lets the request through (with its user named upstream, its `Authorization` removed,
    /// as configured) or refuses it with a challenge.
    pub(super) fn on_request(&self, req: &mut RequestHead) -> Result<(), LocalError> {
        let Some(nonces) = &self.nonces else {
            return Err(refusal(format!("Digest realm=\"{}\"", self.realm)));
        };
        match self.check(nonces, req) {
            Checked::User(user) => {
                self.pass.apply(req, &user);
                Ok(())
            }
            Checked::Refused => Err(self.challenge(nonces, false)),
            Checked::Stale => Err(self.challenge(nonces, true)),
        }
    }

    /// go-http-auth's `CheckAuth`, in its order: the parameters, the URI, the digest, then
    /// the nonce and its count.
    fn check(&self, nonces: &Nonces, req: &RequestHead) -> Checked {
        let Some(params) = req
            .head
            .get("authorization")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(Params::parse)
        else {
            return Checked::Refused;
        };
        // A client that leaves `algorithm` out means MD5 (RFC 2617 section 3.2.1).
        let algorithm = params.algorithm.as_deref().unwrap_or("MD5");
        if params.opaque != nonces.opaque || algorithm != "MD5" || params.qop != "auth" {
            return Checked::Refused;
        }
        if !uri_matches(&params.uri, req) {
            return Checked::Refused;
        }
        let known = self.users.get(&params.username);
        let ha1 = known.unwrap_or(&self.decoy);
        let ha2 = md5_hex(&[req.method(), ":", &params.uri]);
        let expected = md5_hex(&[
            ha1,
            ":",
            &params.nonce,
            ":",
            &params.nc,
            ":",
            &params.cnonce,
            ":",
            &params.qop,
            ":",
            &ha2,
        ]);
        let matched: bool = expected.as_bytes().ct_eq(params.response.as_bytes()).into();
        // go-http-auth checks an unknown name against an empty HA1, which anyone can compute
        // a digest with: weir never lets an unknown name through.
        if !matched || known.is_none() {
            return Checked::Refused;
        }
        let Some(count) = nonce_count(&params.nc) else {
            return Checked::Refused;
        };
        match nonces.check(&params.nonce, count) {
            NonceUse::Fresh => Checked::User(params.username),
            NonceUse::Stale => Checked::Stale,
            NonceUse::Refused => Checked::Refused,
        }
    }

    fn challenge(&self, nonces: &Nonces, stale: bool) -> LocalError {
        let stale = if stale { "stale=true, " } else { "" };
        refusal(format!(
            "Digest realm=\"{}\", nonce=\"{}\", opaque=\"{}\", {stale}algorithm=MD5, qop=\"auth\"",
            self.realm,
            nonces.issue(),
            nonces.opaque
        ))
    }
}

enum Checked {
    User(String),
    /// The digest is right but its nonce is too old, or older than one already counted.
    Stale,
    Refused,
}

/// The `Authorization: Digest` parameters go-http-auth reads (absent ones are empty).
#[derive(Debug, Default, PartialEq)]
struct Params {
    username: String,
    nonce: String,
    uri: String,
    response: String,
    opaque: String,
    qop: String,
    nc: String,
    cnonce: String,
    algorithm: Option<String>,
}

impl Params {
    /// `Digest` (any case, RFC 7235), then comma-separated `name=value` pairs whose values may
    /// be quoted, with `\` escaping the next character inside quotes (go-http-auth's
    /// `ParsePairs`: a comma inside quotes does not split); a repeated name keeps its last.
    fn parse(value: &str) -> Option<Params> {
        let (scheme, rest) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("digest") {
            return None;
        }
        let mut params = Params::default();
        for pair in split_list(rest) {
            let Some((name, value)) = pair.split_once('=') else {
                continue;
            };
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value)
                .to_string();
            let name = name.trim().to_ascii_lowercase();
            match name.as_str() {
                "username" => params.username = value,
                "nonce" => params.nonce = value,
                "uri" => params.uri = value,
                "response" => params.response = value,
                "opaque" => params.opaque = value,
                "qop" => params.qop = value,
                "nc" => params.nc = value,
                "cnonce" => params.cnonce = value,
                "algorithm" => params.algorithm = Some(value),
                _ => {}
            }
        }
        Some(params)
    }
}

/// The elements of a comma-separated list, trimmed: commas inside quotes do not split, and a
/// `\` inside quotes is dropped before the character it escapes (the quotes are kept).
fn split_list(text: &str) -> Vec<String> {
    let mut list = Vec::new();
    let mut element = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for c in text.chars() {
        if escaped {
            element.push(c);
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == ',' && !quoted {
            list.push(element.trim().to_string());
            element.clear();
        } else {
            if c == '"' {
                quoted = !quoted;
            }
            element.push(c);
        }
    }
    if !element.trim().is_empty() {
        list.push(element.trim().to_string());
    }
    list
}

/// Whether the digest's `uri` names this request: the request target as sent, or (as
/// go-http-auth also allows) a URI whose decoded path is a prefix of the request's.
fn uri_matches(uri: &str, req: &RequestHead) -> bool {
    if uri == req.target() {
        return true;
    }
    let path = match uri.split_once("://") {
        Some((scheme, rest)) if !scheme.contains('/') => {
            rest.find('/').map_or("", |slash| &rest[slash..])
        }
        _ => uri,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    match (path_unescape(path), path_unescape(req.path())) {
        (Some(digest_path), Some(request_path)) => request_path.starts_with(&digest_path),
        _ => false,
    }
}

/// `nc`: hex digits, as Go's `ParseUint(nc, 16, 64)` takes them (no sign, at most 64 bits).
fn nonce_count(nc: &str) -> Option<u64> {
    if nc.is_empty() || !nc.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(nc, 16).ok()
}

/// The lowercase hex MD5 of `parts` run together.
fn md5_hex(parts: &[&str]) -> String {
    let mut md5 = Md5::new();
    for part in parts {
        md5.update(part.as_bytes());
    }
    let mut hex = String::with_capacity(32);
    for byte in md5.finalize() {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
    }
    hex
}

/// The nonces a middleware issues: its own, signed, so any worker verifies one without a
/// table of those issued, and a client cannot make one up; with the last count seen for each
/// used, so a digest is not accepted twice.
struct Nonces {
    key: hmac::Key,
    /// Sent with every challenge and expected back unchanged (random per middleware).
    opaque: String,
    started: Instant,
    /// Makes each nonce unique, even two issued in the same second.
    serial: AtomicU64,
    counts: Mutex<Counts>,
}

/// The last `nc` seen per nonce (by serial), for the nonces used lately.
#[derive(Default)]
struct Counts {
    by_serial: BTreeMap<u64, Seen>,
    /// Nonces up to this serial may have been forgotten to bound memory: one not remembered
    /// is stale, never taken as used for the first time.
    forgotten_through: u64,
}

struct Seen {
    issued: u64,
    nc: u64,
}

enum NonceUse {
    Fresh,
    Stale,
    Refused,
}

impl Nonces {
    fn new() -> Option<Nonces> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).ok()?;
        let opaque: [u8; 12] = ring::rand::generate(&rng).ok()?.expose();
        Some(Nonces {
            key,
            opaque: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(opaque),
            started: Instant::now(),
            serial: AtomicU64::new(0),
            counts: Mutex::new(Counts::default()),
        })
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// A new nonce: its issue time and serial, signed.
    fn issue(&self) -> String {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
        let mut nonce = [0u8; NONCE_BYTES];
        nonce[..8].copy_from_slice(&self.now().to_be_bytes());
        nonce[8..16].copy_from_slice(&serial.to_be_bytes());
        let tag = hmac::sign(&self.key, &nonce[..16]);
        nonce[16..].copy_from_slice(&tag.as_ref()[..16]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(nonce)
    }

    /// Whether a request with a right digest over `nonce`, counted `nc`, goes through: the
    /// nonce must be one of ours and young enough, and `nc` above the last one seen for it
    /// (go-http-auth's rule: an equal count is a replay, a lower one an out-of-order request,
    /// told it is stale so that it is sent again with a new nonce).
    fn check(&self, nonce: &str, nc: u64) -> NonceUse {
        let Some((issued, serial)) = self.verify(nonce) else {
            return NonceUse::Refused;
        };
        let now = self.now();
        if now.saturating_sub(issued) > NONCE_LIFETIME_SECS {
            return NonceUse::Stale;
        }
        let Ok(mut counts) = self.counts.lock() else {
            return NonceUse::Refused;
        };
        if let Some(seen) = counts.by_serial.get_mut(&serial) {
            if seen.nc != 0 && nc == seen.nc {
                return NonceUse::Refused;
            }
            if seen.nc != 0 && nc < seen.nc {
                return NonceUse::Stale;
            }
            seen.nc = nc;
            return NonceUse::Fresh;
        }
        if serial <= counts.forgotten_through {
            return NonceUse::Stale;
        }
        counts.by_serial.insert(serial, Seen { issued, nc });
        if counts.by_serial.len() > REMEMBERED_NONCES {
            counts.forget(now);
        }
        NonceUse::Fresh
    }

    /// The issue time and serial of a nonce this middleware signed.
    fn verify(&self, nonce: &str) -> Option<(u64, u64)> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(nonce)
            .ok()?;
        let bytes: [u8; NONCE_BYTES] = bytes.try_into().ok()?;
        let tag = hmac::sign(&self.key, &bytes[..16]);
        if !bool::from(tag.as_ref()[..16].ct_eq(&bytes[16..])) {
            return None;
        }
        let number = |range: std::ops::Range<usize>| {
            let mut be = [0u8; 8];
            be.copy_from_slice(&bytes[range]);
            u64::from_be_bytes(be)
        };
        Some((number(0..8), number(8..16)))
    }
}

impl Counts {
    /// Drops the expired nonces (refused as stale whether remembered or not), then, if that is
    /// not enough, the oldest half, which then count as forgotten.
    fn forget(&mut self, now: u64) {
        self.by_serial
            .retain(|_, seen| now.saturating_sub(seen.issued) <= NONCE_LIFETIME_SECS);
        while self.by_serial.len() > REMEMBERED_NONCES / 2 {
            match self.by_serial.pop_first() {
                Some((serial, _)) => self.forgotten_through = serial,
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_read_as_go_http_auth_reads_them() {
        // go-http-auth's TestDigestAuthParams: commas inside a quoted uri.
        let p = Params::parse(r#"Digest username="test", realm="", nonce="FRPnGdb8lvM1UHhi", uri="/css?family=Source+Sans+Pro:400,700,400italic,700italic|Source+Code+Pro", algorithm=MD5, response="fdcdd78e5b306ffed343d0ec3967f2e5", opaque="lEgVjogmIar2fg/t", qop=auth, nc=00000001, cnonce="e76b05db27a3b323""#).unwrap();
        assert_eq!(
            p.uri,
            "/css?family=Source+Sans+Pro:400,700,400italic,700italic|Source+Code+Pro"
        );
        assert_eq!((p.qop.as_str(), p.nc.as_str()), ("auth", "00000001"));
        assert_eq!(p.algorithm.as_deref(), Some("MD5"));
        let p = Params::parse(r#"digest USERNAME="a\"b", nonce=n"#).unwrap();
        assert_eq!((p.username.as_str(), p.nonce.as_str()), ("a\"b", "n"));
        assert_eq!(p.algorithm, None);
        assert_eq!(Params::parse("Basic dGVzdDp0ZXN0"), None);
        assert_eq!(Params::parse("Digest"), None);
    }

    #[test]
    fn go_http_auth_vector() {
        // go-http-auth's TestAuthDigest: user `test`, realm `example.com`, password `hello`
        // (its test.htdigest).
        let ha1 = md5_hex(&["test:example.com:hello"]);
        assert_eq!(ha1, "aa78524fceb0e50fd8ca96dd818b8cf9");
        let ha2 = md5_hex(&["GET:/t2"]);
        let response = md5_hex(&[&ha1, ":Vb9BP/h81n3GpTTB:00000001:NjE4MTM2:auth:", &ha2]);
        assert_eq!(response, "ffc357c4eba74773c8687e0bc724c9a3");
    }

    #[test]
    fn counts_are_hex_as_go_parses_them() {
        assert_eq!(nonce_count("00000001"), Some(1));
        assert_eq!(nonce_count("ff"), Some(255));
        assert_eq!(nonce_count("+1"), None);
        assert_eq!(nonce_count(""), None);
        assert_eq!(nonce_count("10000000000000000"), None);
    }

    #[test]
    fn nonces_are_signed_counted_and_forgotten_within_bounds() {
        let nonces = Nonces::new().unwrap();
        let nonce = nonces.issue();
        assert_ne!(nonce, nonces.issue(), "each nonce is unique");
        assert!(matches!(nonces.check(&nonce, 1), NonceUse::Fresh));
        assert!(matches!(nonces.check(&nonce, 1), NonceUse::Refused));
        assert!(matches!(nonces.check(&nonce, 3), NonceUse::Fresh));
        assert!(matches!(nonces.check(&nonce, 2), NonceUse::Stale));
        // One changed character, or another middleware's nonce: not ours.
        let mut forged = nonce.clone().into_bytes();
        forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        assert!(matches!(nonces.check(&forged, 1), NonceUse::Refused));
        let other = Nonces::new().unwrap();
        assert!(matches!(nonces.check(&other.issue(), 1), NonceUse::Refused));
        assert!(matches!(nonces.check("short", 1), NonceUse::Refused));

        // Past the bound, the oldest are forgotten: used again, they are stale, not fresh.
        for _ in 0..REMEMBERED_NONCES {
            assert!(matches!(nonces.check(&nonces.issue(), 1), NonceUse::Fresh));
        }
        let counts = nonces.counts.lock().unwrap();
        assert!(counts.by_serial.len() <= REMEMBERED_NONCES);
        drop(counts);
        assert!(matches!(nonces.check(&nonce, 4), NonceUse::Stale));
    }
}
