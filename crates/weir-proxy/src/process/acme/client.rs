//! A small blocking ACME client (RFC 8555) for the ACME thread: the directory, nonces, JWS
//! requests signed with the account's ECDSA P-256 key (ES256, RFC 7515/7518), an account, an
//! order for a set of names, its authorizations answered by HTTP-01 or TLS-ALPN-01 through the
//! workers' shared table (and, with Redis storage, the fleet's), the CSR, and the certificate
//! chain. Its own HTTP/1.1 client over rustls (`Connection: close`, one request a
//! connection), trusting `ca` or the system's roots.

use super::shared_storage::{SharedStorage, ANSWER_SPREAD};
use crate::listen::acme::{alpn_answer, update_table};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value as Json};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_config::{AcmeChallenge, AcmeKeyType};

/// How long one HTTP exchange with the CA may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// The most read of one answer.
const ANSWER_LIMIT: u64 = 1 << 20;
/// How long an order may stay pending or processing before it is given up.
const ORDER_TIMEOUT: Duration = Duration::from_secs(180);

/// An answer from the CA.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Result<Json, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("the CA answered no JSON: {e}"))
    }
}

/// One HTTP/1.1 exchange over TLS with `Connection: close`.
fn exchange(
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    url: &str,
    body: Option<&[u8]>,
) -> Result<Response, String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("{url}: not an https:// URL"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            let port = port
                .parse::<u16>()
                .map_err(|_| format!("{url}: bad port"))?;
            (host, port)
        }
        _ => (authority, 443),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (bare, port)
        .to_socket_addrs()
        .map_err(|e| format!("{url}: cannot resolve {bare}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address for {bare}"))?;
    let tcp = TcpStream::connect_timeout(&addr, EXCHANGE_TIMEOUT)
        .map_err(|e| format!("{url}: cannot connect to {addr}: {e}"))?;
    tcp.set_read_timeout(Some(EXCHANGE_TIMEOUT))
        .and_then(|()| tcp.set_write_timeout(Some(EXCHANGE_TIMEOUT)))
        .map_err(|e| format!("{url}: {e}"))?;
    let name = rustls::pki_types::ServerName::try_from(bare.to_string())
        .map_err(|_| format!("{url}: `{bare}` is not a server name"))?;
    let conn =
        rustls::ClientConnection::new(tls.clone(), name).map_err(|e| format!("{url}: {e}"))?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: weir/{}\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(body) = body {
        request.push_str("Content-Type: application/jose+json\r\n");
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    stream
        .write_all(&bytes)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("{url}: {e}"))?;
    let mut answer = Vec::new();
    // Directory objects and chains are a few KiB: a longer answer is cut, and fails to parse.
    match (&mut stream).take(ANSWER_LIMIT).read_to_end(&mut answer) {
        Ok(_) => {}
        // A server that closes without close_notify after a whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
        Err(e) => return Err(format!("{url}: {e}")),
    }
    parse_response(&answer, method == "HEAD").map_err(|e| format!("{url}: {e}"))
}

/// An answer's status, fields and body (none for a `HEAD`, whatever its length says).
fn parse_response(answer: &[u8], head_only: bool) -> Result<Response, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(answer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("the answer ended in its head".into()),
        Err(e) => return Err(format!("a malformed answer: {e}")),
    };
    let status = parsed.code.unwrap_or(0);
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            let value = String::from_utf8_lossy(h.value).into_owned();
            (h.name.to_string(), value)
        })
        .collect();
    let rest = &answer[head_len..];
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok());
    let body = match (chunked, length) {
        _ if head_only => Vec::new(),
        (true, _) => dechunk(rest)?,
        (false, Some(n)) if n <= rest.len() => rest[..n].to_vec(),
        (false, Some(_)) => return Err("the answer ended in its body".into()),
        (false, None) => rest.to_vec(),
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end =
            memchr::memmem::find(rest, b"\r\n").ok_or("a chunk size line ended early")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "a bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err("a chunk ended early".into());
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// The account's key: ECDSA P-256, kept as PKCS#8.
pub struct AccountKey {
    pair: EcdsaKeyPair,
    /// The public key as a JWK, members in the order RFC 7638 hashes them.
    jwk: String,
    /// The base64url SHA-256 thumbprint of `jwk` (RFC 7638), for key authorizations.
    thumbprint: String,
}

impl AccountKey {
    /// A new key and its PKCS#8 form (to store).
    pub fn generate() -> Result<(AccountKey, Vec<u8>), String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "cannot generate an account key")?;
        let key = AccountKey::from_pkcs8(pkcs8.as_ref())?;
        Ok((key, pkcs8.as_ref().to_vec()))
    }

    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<AccountKey, String> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| format!("not an ECDSA P-256 key: {e}"))?;
        // Uncompressed point: 0x04, x, y.
        let point = pair.public_key().as_ref();
        let (x, y) = (B64URL.encode(&point[1..33]), B64URL.encode(&point[33..65]));
        let jwk = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        let digest = ring::digest::digest(&ring::digest::SHA256, jwk.as_bytes());
        let thumbprint = B64URL.encode(digest.as_ref());
        Ok(AccountKey {
            pair,
            jwk,
            thumbprint,
        })
    }

    /// A flattened JWS (RFC 8555 §6.2): the account's `kid` once known, else its `jwk`;
    /// an empty payload for POST-as-GET.
    fn sign(
        &self,
        url: &str,
        nonce: &str,
        kid: Option<&str>,
        payload: Option<&Json>,
    ) -> Result<Vec<u8>, String> {
        let mut protected = json!({ "alg": "ES256", "nonce": nonce, "url": url });
        match kid {
            Some(kid) => protected["kid"] = json!(kid),
            None => {
                let jwk: Json = serde_json::from_str(&self.jwk).map_err(|e| e.to_string())?;
                protected["jwk"] = jwk;
            }
        }
        let protected = B64URL.encode(protected.to_string());
        let payload = payload.map_or(String::new(), |p| B64URL.encode(p.to_string()));
        let signing_input = format!("{protected}.{payload}");
        let signature = self
            .pair
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|_| "cannot sign a request")?;
        let body = json!({
            "protected": protected,
            "payload": payload,
            "signature": B64URL.encode(signature.as_ref()),
        });
        Ok(body.to_string().into_bytes())
    }

    fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.thumbprint)
    }
}

/// The CA's directory (RFC 8555 §7.1.1).
struct Directory {
    new_nonce: String,
    new_account: String,
    new_order: String,
}

/// A session with one CA as one account.
pub struct AcmeClient {
    tls: Arc<rustls::ClientConfig>,
    directory: Directory,
    key: AccountKey,
    /// The account's URL, once created or found.
    kid: Option<String>,
    nonce: Option<String>,
    /// The fleet's store its answers are shared through, with `storage: { redis }` or
    /// `storage: { etcd }`.
    pub shared_answers: Option<Arc<dyn SharedStorage>>,
}

/// A certificate obtained: the chain and its key, both PEM.
pub struct Issued {
    pub chain_pem: String,
    pub key_pem: String,
}

impl AcmeClient {
    /// Reads the directory.
    pub fn connect(
        tls: Arc<rustls::ClientConfig>,
        directory_url: &str,
        key: AccountKey,
    ) -> Result<AcmeClient, String> {
        let answer = exchange(&tls, "GET", directory_url, None)?;
        if answer.status != 200 {
            return Err(problem(directory_url, &answer));
        }
        let dir = answer.json()?;
        let url = |field: &str| -> Result<String, String> {
            dir[field]
                .as_str()
                .map(String::from)
                .ok_or_else(|| format!("the directory at {directory_url} has no `{field}`"))
        };
        let directory = Directory {
            new_nonce: url("newNonce")?,
            new_account: url("newAccount")?,
            new_order: url("newOrder")?,
        };
        Ok(AcmeClient {
            tls,
            directory,
            key,
            kid: None,
            nonce: None,
            shared_answers: None,
        })
    }

    fn fresh_nonce(&mut self) -> Result<String, String> {
        if let Some(nonce) = self.nonce.take() {
            return Ok(nonce);
        }
        let url = self.directory.new_nonce.clone();
        let answer = exchange(&self.tls, "HEAD", &url, None)?;
        answer
            .header("replay-nonce")
            .map(String::from)
            .ok_or_else(|| problem(&url, &answer))
    }

    /// A signed POST; a `badNonce` refusal is retried with the nonce it brings (RFC 8555
    /// §6.5), other problems come back as the CA wrote them.
    fn post(&mut self, url: &str, payload: Option<&Json>) -> Result<Response, String> {
        for _ in 0..3 {
            let nonce = self.fresh_nonce()?;
            let body = self.key.sign(url, &nonce, self.kid.as_deref(), payload)?;
            let answer = exchange(&self.tls, "POST", url, Some(&body))?;
            self.nonce = answer.header("replay-nonce").map(String::from);
            if answer.status < 400 {
                return Ok(answer);
            }
            let bad_nonce = answer
                .json()
                .ok()
                .and_then(|p| p["type"].as_str().map(String::from))
                == Some("urn:ietf:params:acme:error:badNonce".to_string());
            if !bad_nonce {
                return Err(problem(url, &answer));
            }
        }
        Err(format!("{url}: the CA refused three nonces in a row"))
    }

    /// Finds or creates the account of this key (RFC 8555 §7.3), agreeing to the terms.
    pub fn account(&mut self, email: Option<&str>) -> Result<(), String> {
        let mut payload = json!({ "termsOfServiceAgreed": true });
        if let Some(email) = email {
            payload["contact"] = json!([format!("mailto:{email}")]);
        }
        let url = self.directory.new_account.clone();
        let answer = self.post(&url, Some(&payload))?;
        let kid = answer
            .header("location")
            .ok_or_else(|| format!("{url}: the CA gave the account no Location"))?;
        self.kid = Some(kid.to_string());
        Ok(())
    }

    /// Orders a certificate for `names` and answers its authorizations by the first of
    /// `challenges` each offers; the certificate's key is a new key of `key_type`.
    pub fn obtain(
        &mut self,
        names: &[String],
        challenges: &[AcmeChallenge],
        key_type: AcmeKeyType,
    ) -> Result<Issued, String> {
        let identifiers: Vec<Json> = names
            .iter()
            .map(|n| json!({ "type": "dns", "value": n }))
            .collect();
        let new_order = self.directory.new_order.clone();
        let answer = self.post(&new_order, Some(&json!({ "identifiers": identifiers })))?;
        let order_url = answer
            .header("location")
            .ok_or_else(|| format!("{new_order}: the CA gave the order no Location"))?
            .to_string();
        let order = answer.json()?;
        let authorizations: Vec<String> = order["authorizations"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        for authz in &authorizations {
            self.authorize(authz, challenges)?;
        }
        let finalize = order["finalize"]
            .as_str()
            .ok_or_else(|| format!("{order_url}: the order has no `finalize`"))?
            .to_string();
        let key = certificate_key(key_type)?;
        let csr = rcgen::CertificateParams::new(names.to_vec())
            .and_then(|params| params.serialize_request(&key))
            .map_err(|e| format!("certificate request: {e}"))?;
        let csr = B64URL.encode(csr.der());
        self.post(&finalize, Some(&json!({ "csr": csr })))?;
        let order = self.poll(&order_url, &["valid"], &["invalid"])?;
        let certificate = order["certificate"]
            .as_str()
            .ok_or_else(|| format!("{order_url}: the valid order has no `certificate`"))?
            .to_string();
        let answer = self.post(&certificate, None)?;
        let chain_pem = String::from_utf8(answer.body)
            .map_err(|_| format!("{certificate}: the chain is not PEM text"))?;
        Ok(Issued {
            chain_pem,
            key_pem: key.serialize_pem(),
        })
    }

    /// Answers one authorization (RFC 8555 §7.5.1) and waits for it to be valid; the
    /// answer is withdrawn from the workers' table whatever the outcome.
    fn authorize(&mut self, authz_url: &str, preferred: &[AcmeChallenge]) -> Result<(), String> {
        let authz = self.post(authz_url, None)?.json()?;
        if authz["status"] == "valid" {
            return Ok(());
        }
        let name = authz["identifier"]["value"]
            .as_str()
            .ok_or_else(|| format!("{authz_url}: the authorization names no identifier"))?
            .to_ascii_lowercase();
        let offered = authz["challenges"].as_array().cloned().unwrap_or_default();
        let chosen = preferred.iter().find_map(|kind| {
            let wire = match kind {
                AcmeChallenge::Http01 => "http-01",
                AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
            };
            let challenge = offered.iter().find(|c| c["type"] == wire)?;
            Some((*kind, challenge.clone()))
        });
        let Some((kind, challenge)) = chosen else {
            return Err(format!(
                "{authz_url}: the CA offers none of the configured challenges for {name}"
            ));
        };
        let (Some(token), Some(url)) = (challenge["token"].as_str(), challenge["url"].as_str())
        else {
            return Err(format!("{authz_url}: a challenge without token or url"));
        };
        let key_authorization = self.key.key_authorization(token);
        // Shared (before the CA validates, so that any instance it reaches can answer) ahead
        // of this instance's own table, which a failure to share leaves untouched.
        let shared_field = match kind {
            AcmeChallenge::Http01 => format!("http/{token}"),
            AcmeChallenge::TlsAlpn01 => format!("alpn/{name}"),
        };
        if let Some(shared) = &self.shared_answers {
            shared.share_answer(&shared_field, &key_authorization)?;
        }
        match kind {
            AcmeChallenge::Http01 => {
                let (token, answer) = (token.to_string(), key_authorization.clone());
                update_table(|t| {
                    t.http_answers.insert(token.clone(), answer.clone());
                });
            }
            AcmeChallenge::TlsAlpn01 => {
                let provider = rustls::crypto::ring::default_provider();
                let answer = alpn_answer(&name, &key_authorization, &provider)?;
                update_table(|t| {
                    t.alpn_answers.insert(name.clone(), answer.clone());
                });
            }
        }
        if self.shared_answers.is_some() {
            std::thread::sleep(ANSWER_SPREAD);
        }
        let url = url.to_string();
        let outcome = self.post(&url, Some(&json!({}))).and_then(|_| {
            self.poll(
                authz_url,
                &["valid"],
                &["invalid", "deactivated", "expired", "revoked"],
            )
        });
        let token = token.to_string();
        update_table(|t| {
            t.http_answers.remove(&token);
            t.alpn_answers.remove(&name);
        });
        if let Some(shared) = &self.shared_answers {
            // Left to expire with the hash otherwise.
            let _ = shared.withdraw_answer(&shared_field);
        }
        outcome.map(|_| ())
    }

    /// POST-as-GET `url` until its `status` is one of `done` (its JSON) or `failed` (an error
    /// with the CA's own words for it).
    fn poll(&mut self, url: &str, done: &[&str], failed: &[&str]) -> Result<Json, String> {
        let started = Instant::now();
        let mut wait = Duration::from_millis(200);
        loop {
            let answer = self.post(url, None)?;
            let object = answer.json()?;
            let status = object["status"].as_str().unwrap_or_default();
            if done.contains(&status) {
                return Ok(object);
            }
            if failed.contains(&status) {
                return Err(format!("{url}: {status}: {}", failure_detail(&object)));
            }
            if started.elapsed() > ORDER_TIMEOUT {
                return Err(format!(
                    "{url}: still {status} after {}s",
                    ORDER_TIMEOUT.as_secs()
                ));
            }
            let retry_after = answer
                .header("retry-after")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            std::thread::sleep(retry_after.unwrap_or(wait).min(Duration::from_secs(10)));
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }
}

/// The problem of a failed order or authorization: the order's `error`, else each
/// challenge's, as the CA wrote them.
fn failure_detail(object: &Json) -> String {
    let mut details = Vec::new();
    if !object["error"].is_null() {
        details.push(object["error"].to_string());
    }
    for challenge in object["challenges"].as_array().into_iter().flatten() {
        if !challenge["error"].is_null() {
            details.push(challenge["error"].to_string());
        }
    }
    if details.is_empty() {
        "the CA gave no reason".to_string()
    } else {
        details.join("; ")
    }
}

/// An error answer, verbatim: the status and the CA's problem document (RFC 7807) as sent,
/// on one line (a JSON document re-written without its layout, other text with its line
/// breaks as spaces), so that the log keeps a line per event.
fn problem(url: &str, answer: &Response) -> String {
    let body = match serde_json::from_slice::<Json>(&answer.body) {
        Ok(document) => document.to_string(),
        Err(_) => String::from_utf8_lossy(&answer.body)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    };
    format!("{url}: the CA answered {}: {body}", answer.status)
}

/// A new key for a certificate: ECDSA P-256 from ring, or RSA 2048 from the `rsa` crate (ring
/// signs with RSA keys but cannot make them), handed to rcgen as PKCS#8 so that ring signs the
/// request with it (RS256) and rustls serves it like any key file.
fn certificate_key(key_type: AcmeKeyType) -> Result<rcgen::KeyPair, String> {
    match key_type {
        AcmeKeyType::EcdsaP256 => {
            rcgen::KeyPair::generate().map_err(|e| format!("certificate key: {e}"))
        }
        AcmeKeyType::Rsa2048 => {
            use rsa::pkcs8::EncodePrivateKey;
            let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
                .map_err(|e| format!("certificate key (RSA 2048): {e}"))?;
            let pkcs8 = key
                .to_pkcs8_der()
                .map_err(|e| format!("certificate key (RSA 2048, PKCS#8): {e}"))?;
            let der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8.as_bytes());
            rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256)
                .map_err(|e| format!("certificate key (RSA 2048): {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwk_thumbprint_is_the_rfc_7638_one() {
        // RFC 7638 §3.1 hashes the required members in lexicographic order, no whitespace:
        // checked against ring's own encoding of the point.
        let (key, pkcs8) = AccountKey::generate().unwrap();
        let again = AccountKey::from_pkcs8(&pkcs8).unwrap();
        assert_eq!(key.thumbprint, again.thumbprint);
        assert!(key.jwk.starts_with(r#"{"crv":"P-256","kty":"EC","x":""#));
        assert_eq!(key.thumbprint.len(), 43);
        assert_eq!(
            key.key_authorization("tok"),
            format!("tok.{}", key.thumbprint)
        );
    }

    #[test]
    fn answers_are_parsed_plain_and_chunked() {
        let plain = parse_response(
            b"HTTP/1.1 201 Created\r\nReplay-Nonce: abc\r\nContent-Length: 2\r\n\r\n{}",
            false,
        )
        .unwrap();
        assert_eq!(
            (plain.status, plain.header("replay-nonce")),
            (201, Some("abc"))
        );
        assert_eq!(plain.body, b"{}");
        let chunked = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n", false).unwrap();
        assert_eq!(chunked.body, b"abcde");
        let truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc";
        assert!(parse_response(truncated, false).is_err());
        // A HEAD answer's length is that of the body a GET would get: none follows.
        let nonce = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).unwrap();
        assert!(nonce.body.is_empty());
    }

    #[test]
    fn each_key_type_makes_a_key_of_its_kind_that_serves_in_rustls() {
        for (key_type, algorithm) in [
            (AcmeKeyType::EcdsaP256, &rcgen::PKCS_ECDSA_P256_SHA256),
            (AcmeKeyType::Rsa2048, &rcgen::PKCS_RSA_SHA256),
        ] {
            let started = Instant::now();
            let key = certificate_key(key_type).unwrap();
            eprintln!("{key_type:?}: made in {:?}", started.elapsed());
            assert_eq!(key.algorithm(), algorithm);
            let cert = rcgen::CertificateParams::new(vec!["a.example.org".to_string()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
            let provider = rustls::crypto::ring::default_provider();
            let signing = provider.key_provider.load_private_key(der).unwrap();
            let expected = match key_type {
                AcmeKeyType::EcdsaP256 => rustls::SignatureAlgorithm::ECDSA,
                AcmeKeyType::Rsa2048 => rustls::SignatureAlgorithm::RSA,
            };
            assert_eq!(signing.algorithm(), expected);
            assert!(!cert.der().is_empty());
        }
    }
}
