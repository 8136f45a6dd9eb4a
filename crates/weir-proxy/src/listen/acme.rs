//! What the workers read of ACME (`tls.acme`): one process-wide table, swapped whole by the
//! ACME thread (`process/acme/`), of the certificates obtained by name, the pending
//! TLS-ALPN-01 answers (RFC 8737) and HTTP-01 answers (RFC 8555 §8.3); the certificate resolver
//! of ACME entrypoints; the placeholder served until a name has its certificate; and each
//! name's state for the admin API and `/metrics`.

use crate::listen::tls::SniResolver;
use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The path prefix of HTTP-01 answers (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// What the workers serve of ACME, replaced whole on each change.
#[derive(Default, Clone)]
pub struct AcmeTable {
    /// Obtained certificates, by lowercased name.
    pub certificates: HashMap<String, Arc<CertifiedKey>>,
    /// TLS-ALPN-01 answers under validation, by lowercased name.
    pub alpn_answers: HashMap<String, Arc<CertifiedKey>>,
    /// HTTP-01 answers under validation: the key authorization by token.
    pub http_answers: HashMap<String, String>,
}

/// The table; kept across reloads (certificates outlive configurations).
pub static ACME_TABLE: LazyLock<ArcSwap<AcmeTable>> = LazyLock::new(Default::default);

/// Changes the table: a copy is edited and swapped in (changes are rare, reads are lock-free).
pub fn update_table(edit: impl Fn(&mut AcmeTable)) {
    ACME_TABLE.rcu(|table| {
        let mut next = AcmeTable::clone(table);
        edit(&mut next);
        next
    });
}

/// The HTTP-01 answer for a request path, when it is one under validation.
pub fn http01_answer(path: &str) -> Option<String> {
    let token = path.strip_prefix(HTTP01_PREFIX)?;
    ACME_TABLE.load().http_answers.get(token).cloned()
}

/// One name's ACME state, as `/api/certificates` and `/metrics` show it.
#[derive(Debug, Clone, Default)]
pub struct NameState {
    pub name: String,
    pub entrypoint: String,
    /// `pending` (no certificate yet), `ordering`, `valid`, `renewing`, `failed`.
    pub state: &'static str,
    /// The certificate's expiry, Unix seconds, once there is one.
    pub not_after: Option<i64>,
    /// When the next order is due (a renewal, or a retry after a failure), Unix seconds.
    pub next_attempt: Option<i64>,
    /// The last failure, as the CA (or the connection) said it.
    pub last_error: Option<String>,
    /// Failures in a row (the backoff's exponent).
    pub failures: u32,
}

/// Every ACME name's state, in config order.
pub static ACME_STATES: Mutex<Vec<NameState>> = Mutex::new(Vec::new());

/// A copy of the states (for the admin side).
pub fn name_states() -> Vec<NameState> {
    ACME_STATES.lock().map(|s| s.clone()).unwrap_or_default()
}

/// The states as `/api/certificates` lists them under `acme`.
pub fn states_json(now: i64) -> serde_json::Value {
    let states: Vec<serde_json::Value> = name_states()
        .into_iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "entrypoint": s.entrypoint,
                "state": s.state,
                "not_after": s.not_after,
                "expires_in_seconds": s.not_after.map(|t| t - now),
                "next_attempt": s.next_attempt,
                "failures": s.failures,
                "last_error": s.last_error,
            })
        })
        .collect();
    serde_json::Value::Array(states)
}

/// A gauge of `/metrics`: its name, help, and a value by label set.
pub struct Gauge {
    pub name: &'static str,
    pub help: &'static str,
    pub samples: Vec<(String, i64)>,
}

/// What `/metrics` shows of ACME: `weir_tls_certificate_expiry_seconds{name}`, seconds until
/// each obtained certificate expires, and `weir_acme_failures{name}`, the failed orders in a
/// row (0 once one succeeds); nothing without ACME names.
pub fn gauges() -> Vec<Gauge> {
    let states = name_states();
    if states.is_empty() {
        return Vec::new();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    // Names are DNS names (checked on load): nothing to escape.
    let label = |s: &NameState| format!("name=\"{}\"", s.name);
    let expiry = Gauge {
        name: "weir_tls_certificate_expiry_seconds",
        help: "Seconds until the certificate ACME obtained for a name expires.",
        samples: states
            .iter()
            .filter_map(|s| Some((label(s), s.not_after? - now)))
            .collect(),
    };
    let failures = Gauge {
        name: "weir_acme_failures",
        help: "Failed ACME orders in a row for a name (0 after a success).",
        samples: states
            .iter()
            .map(|s| (label(s), i64::from(s.failures)))
            .collect(),
    };
    vec![expiry, failures]
}

/// Picks the certificate on an ACME entrypoint: a TLS-ALPN-01 answer when the client offers
/// `acme-tls/1` alone (RFC 8737 §3); else the `certificates` files' exact name, then an obtained
/// certificate, then the files' wildcard or default.
#[derive(Debug)]
pub(crate) struct AcmeResolver {
    pub(crate) files: SniResolver,
}

impl ResolvesServerCert for AcmeResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello
            .server_name()
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase());
        // The CA offers `acme-tls/1` alone (RFC 8737 §3); a client that also offers others is
        // an ordinary one.
        let validating = hello.alpn().is_some_and(|mut protocols| {
            protocols.next() == Some(ACME_TLS_ALPN) && protocols.next().is_none()
        });
        if validating {
            // Only the answer: a validation must never see the ordinary certificate.
            return ACME_TABLE
                .load()
                .alpn_answers
                .get(name.as_deref()?)
                .cloned();
        }
        if let Some(name) = name.as_deref() {
            if !self.files.exact.contains_key(name) {
                if let Some(key) = ACME_TABLE.load().certificates.get(name) {
                    return Some(key.clone());
                }
            }
        }
        self.files.pick(name.as_deref())
    }
}

/// A signing key and certificate for rustls, from rcgen's.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key_pkcs8: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, String> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pkcs8.to_vec()));
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("unusable private key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// The self-signed certificate an ACME entrypoint without `certificates` serves until its
/// names have theirs (so a handshake completes and the client sees why it is not trusted).
pub fn placeholder_certificate(
    names: &[String],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, String> {
    let mut names = names.to_vec();
    names.push("weir-acme-pending.invalid".to_string());
    let key = rcgen::KeyPair::generate().map_err(|e| format!("placeholder key: {e}"))?;
    let mut params = rcgen::CertificateParams::new(names)
        .map_err(|e| format!("placeholder certificate: {e}"))?;
    // What a client shows of it says why it is not trusted.
    let common_name = "weir ACME placeholder: no certificate obtained yet";
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("placeholder certificate: {e}"))?;
    certified_key(vec![cert.der().clone()], &key.serialize_der(), provider)
}

/// The TLS-ALPN-01 answer for `name`: a self-signed certificate for it alone, with the
/// critical acmeIdentifier extension holding the SHA-256 of the key authorization (RFC 8737
/// §3).
pub fn alpn_answer(
    name: &str,
    key_authorization: &str,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, String> {
    let digest = ring::digest::digest(&ring::digest::SHA256, key_authorization.as_bytes());
    let key = rcgen::KeyPair::generate().map_err(|e| format!("challenge key: {e}"))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])
        .map_err(|e| format!("challenge certificate: {e}"))?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest.as_ref())];
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("challenge certificate: {e}"))?;
    certified_key(vec![cert.der().clone()], &key.serialize_der(), provider)
}
