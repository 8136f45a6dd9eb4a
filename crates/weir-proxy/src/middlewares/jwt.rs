//! `jwt`: lets a request through only with a JSON Web Token (RFC 7519) in JWS compact form
//! (RFC 7515) signed by a configured key and carrying acceptable claims; else a 401 with a
//! `Bearer` challenge (RFC 6750 section 3). The JOSE parsing is here; `ring` verifies. With
//! `jwks_url`, the keys of a JWK Set fetched while serving count too (`remote`).

mod remote;

use super::Flow;
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use crate::reply::client::ClientSide;
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use base64::Engine;
use ring::{hmac, signature};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use weir_config::{EcCurve, JwkKey, JwsAlgorithm, TokenSource};

/// A token's parts are base64url without padding (RFC 7515 section 2), and nothing else.
const TOKEN_BASE64: base64::engine::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a token is refused, said in `error_description` (never holding `"` or `\`).
type Refusal = Cow<'static, str>;

/// How many tokens whose signature verified are remembered, with their claims: a client sends
/// the same token with every request until it expires, and an ES256 or RSA signature costs
/// tens of microseconds to verify, the rest of the checks well under one.
const REMEMBERED_TOKENS: usize = 4096;

/// A token's claims, decoded once its signature verified.
type Claims = Arc<Map<String, Value>>;

/// A `jwt` middleware, built once per configuration and shared by the workers.
pub struct JwtAuth {
    keys: Vec<VerifyingKey>,
    /// With `jwks_url`: the fetched keys, tried after `keys`.
    remote: Option<remote::RemoteKeys<Vec<VerifyingKey>>>,
    /// `accepted[i]`: whether `JwsAlgorithm::ALL[i]` is accepted.
    accepted: [bool; JwsAlgorithm::ALL.len()],
    issuers: Vec<String>,
    audiences: Vec<String>,
    required_claims: Vec<String>,
    leeway: f64,
    sources: Vec<TokenSource>,
    claims_to_headers: Vec<(String, String)>,
    forward_token: bool,
    /// The answer to a request without a token: a challenge without an error (RFC 6750
    /// section 3.1: "SHOULD NOT include an error code").
    no_token: LocalError,
    /// Tokens whose signature verified, by their SHA-256 (collision-resistant: a token made
    /// to match a remembered one's key is out of reach), with their claims. Their claims are
    /// checked again on every request, as the time moves on.
    verified: quick_cache::sync::Cache<[u8; 32], Claims>,
}

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuth")
            .field("keys", &self.keys.len())
            .field("jwks_url", &self.remote.is_some())
            .finish_non_exhaustive()
    }
}

/// A configured key, ready to verify with.
struct VerifyingKey {
    kid: Option<String>,
    alg: Option<JwsAlgorithm>,
    /// What `JwsAlgorithm::fits` checks against.
    shape: JwkKey,
    material: Material,
}

enum Material {
    Rsa(signature::RsaPublicKeyComponents<Vec<u8>>),
    /// A public key `ring` parses when it verifies (an EC point, an Ed25519 key).
    Public(Vec<u8>),
    /// The secret keyed for HS256, HS384 and HS512.
    Hmac(Box<[hmac::Key; 3]>),
}

impl VerifyingKey {
    fn all(jwks: &[weir_config::Jwk]) -> Vec<VerifyingKey> {
        jwks.iter().map(VerifyingKey::new).collect()
    }

    fn new(jwk: &weir_config::Jwk) -> VerifyingKey {
        let material = match &jwk.key {
            JwkKey::Rsa { n, e } => Material::Rsa(signature::RsaPublicKeyComponents {
                n: n.clone(),
                e: e.clone(),
            }),
            JwkKey::Ec { point, .. } => Material::Public(point.clone()),
            JwkKey::Ed25519(x) => Material::Public(x.clone()),
            JwkKey::Oct(k) => Material::Hmac(Box::new([
                hmac::Key::new(hmac::HMAC_SHA256, k),
                hmac::Key::new(hmac::HMAC_SHA384, k),
                hmac::Key::new(hmac::HMAC_SHA512, k),
            ])),
        };
        VerifyingKey {
            kid: jwk.kid.clone(),
            alg: jwk.alg,
            shape: jwk.key.clone(),
            material,
        }
    }

    /// Whether this key may verify a token signed with `alg`: of the algorithm's type, and
    /// for that algorithm when its JWK names one.
    fn serves(&self, alg: JwsAlgorithm) -> bool {
        alg.fits(&self.shape) && self.alg.is_none_or(|only| only == alg)
    }

    fn verifies(&self, alg: JwsAlgorithm, input: &[u8], sig: &[u8]) -> bool {
        use JwsAlgorithm::*;
        let rsa: &signature::RsaParameters = match alg {
            RS256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            RS384 => &signature::RSA_PKCS1_2048_8192_SHA384,
            RS512 => &signature::RSA_PKCS1_2048_8192_SHA512,
            PS256 => &signature::RSA_PSS_2048_8192_SHA256,
            PS384 => &signature::RSA_PSS_2048_8192_SHA384,
            PS512 => &signature::RSA_PSS_2048_8192_SHA512,
            _ => &signature::RSA_PKCS1_2048_8192_SHA256,
        };
        match (&self.material, alg, &self.shape) {
            (Material::Rsa(key), RS256 | RS384 | RS512 | PS256 | PS384 | PS512, _) => {
                key.verify(rsa, input, sig).is_ok()
            }
            (Material::Public(point), ES256, JwkKey::Ec { curve, .. })
                if *curve == EcCurve::P256 =>
            {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(input, sig)
                    .is_ok()
            }
            (Material::Public(point), ES384, JwkKey::Ec { curve, .. })
                if *curve == EcCurve::P384 =>
            {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                    .verify(input, sig)
                    .is_ok()
            }
            (Material::Public(x), EdDSA, JwkKey::Ed25519(_)) => {
                signature::UnparsedPublicKey::new(&signature::ED25519, x)
                    .verify(input, sig)
                    .is_ok()
            }
            // `ring` compares the tags in constant time.
            (Material::Hmac(keys), HS256, _) => hmac::verify(&keys[0], input, sig).is_ok(),
            (Material::Hmac(keys), HS384, _) => hmac::verify(&keys[1], input, sig).is_ok(),
            (Material::Hmac(keys), HS512, _) => hmac::verify(&keys[2], input, sig).is_ok(),
            // Any other pairing is algorithm confusion, which `serves` already kept out.
            _ => false,
        }
    }
}

/// The answer to a request whose token is refused: 401 with the RFC 6750 challenge.
fn refusal(description: &str) -> LocalError {
    let mut error = LocalError::new(401, ErrorKind::Unauthorized, "401 Unauthorized");
    error.headers.push((
        "www-authenticate".into(),
        format!("Bearer error=\"invalid_token\", error_description=\"{description}\""),
    ));
    error
}

/// A JWS in compact form, decoded: the signing input is the token up to its second dot.
struct Jws<'t> {
    header: Map<String, Value>,
    /// The claims, still base64url: read only once the signature verifies.
    payload: &'t str,
    signing_input: &'t str,
    signature: Vec<u8>,
}

/// The token's three parts, decoded as far as the signature check needs.
fn decode(token: &str) -> Result<Jws<'_>, Refusal> {
    let mut parts = token.split('.');
    let (Some(header_part), Some(payload), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the token is not a JWS in compact form".into());
    };
    let header = TOKEN_BASE64
        .decode(header_part)
        .ok()
        .and_then(|json| serde_json::from_slice::<Map<String, Value>>(&json).ok())
        .ok_or("the token's header is not base64url JSON")?;
    let signature = TOKEN_BASE64
        .decode(sig)
        .map_err(|_| "the token's signature is not base64url")?;
    let signing_input = &token[..header_part.len() + 1 + payload.len()];
    Ok(Jws {
        header,
        payload,
        signing_input,
        signature,
    })
}

impl JwtAuth {
    /// The middleware for `config`; `jwks_server`: its `jwks_url`'s server, compiled.
    pub fn new(config: &weir_config::Jwt, jwks_server: Option<Arc<Service>>) -> JwtAuth {
        let mut accepted = [config.algorithms.is_empty(); JwsAlgorithm::ALL.len()];
        for (i, alg) in JwsAlgorithm::ALL.iter().enumerate() {
            accepted[i] |= config.algorithms.contains(alg);
        }
        let mut no_token = LocalError::new(401, ErrorKind::Unauthorized, "401 Unauthorized");
        no_token
            .headers
            .push(("www-authenticate".into(), "Bearer".into()));
        JwtAuth {
            keys: VerifyingKey::all(&config.keys),
            remote: config
                .jwks_url
                .as_ref()
                .zip(jwks_server)
                .map(|(url, server)| remote::RemoteKeys::new(url, server, VerifyingKey::all)),
            accepted,
            issuers: config.issuers.clone(),
            audiences: config.audiences.clone(),
            required_claims: config.required_claims.clone(),
            leeway: config.leeway.as_secs_f64(),
            sources: config.token_source.clone(),
            claims_to_headers: config.claims_to_headers.clone(),
            forward_token: config.forward_token,
            no_token,
            verified: quick_cache::sync::Cache::new(REMEMBERED_TOKENS),
        }
    }

    /// Lets the request through (its claims copied into headers, its token removed, as
    /// configured) or refuses it; with `jwks_url`, first fetches the JWK Set when it is due
    /// (the request then waits on it, at most `JWKS_FETCH_TIMEOUT`).
    pub(super) fn on_request<'a>(
        &'a self,
        worker: &'a Worker,
        req: &'a mut RequestHead,
        client: &impl ClientSide,
    ) -> Flow<'a> {
        let Some((token, source)) = self.find_token(req) else {
            return Flow::Refuse(self.no_token.clone());
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let Some(remote) = &self.remote else {
            return self.let_through(req, source, self.verify(&token, now, &[]));
        };
        let verified = self.verify(&token, now, &remote.keys());
        let due =
            remote.stale() || (verified.is_err() && self.names_unknown_kid(&token, &remote.keys()));
        if !due || !remote.may_refresh() {
            return self.let_through(req, source, verified);
        }
        let from = Requester::of(client);
        Flow::Wait(Box::pin(async move {
            if remote.refresh(worker, from).await {
                // A token verified by a key the new set no longer holds is verified again.
                self.verified.clear();
            }
            let verified = self.verify(&token, now, &remote.keys());
            self.let_through(req, source, verified)
        }))
    }

    /// Whether the token names a `kid` no key has.
    fn names_unknown_kid(&self, token: &str, fetched: &[VerifyingKey]) -> bool {
        let Ok(jws) = decode(token) else {
            return false;
        };
        let Some(Value::String(kid)) = jws.header.get("kid") else {
            return false;
        };
        let mut keys = self.keys.iter().chain(fetched);
        !keys.any(|k| k.kid.as_deref() == Some(kid.as_str()))
    }

    /// The request let through with `claims` (its token removed and claims copied, as
    /// configured), or refused.
    fn let_through(
        &self,
        req: &mut RequestHead,
        source: &TokenSource,
        claims: Result<Claims, Refusal>,
    ) -> Flow<'static> {
        let claims = match claims {
            Ok(claims) => claims,
            Err(why) => return Flow::Refuse(refusal(&why)),
        };
        if !self.forward_token {
            remove_token(req, source);
        }
        for (claim, header) in &self.claims_to_headers {
            // A client's own value never goes up as if it came from the token.
            req.head.remove(header);
            if let Some(value) = claims.get(claim).and_then(header_value) {
                req.head.append(header, value.as_bytes());
            }
        }
        Flow::Continue
    }

    /// The token and where it was found: the first source that has one.
    fn find_token<'s>(&'s self, req: &RequestHead) -> Option<(String, &'s TokenSource)> {
        self.sources.iter().find_map(|source| {
            let token = match source {
                TokenSource::Header(name) => {
                    let value = std::str::from_utf8(req.head.get(name)?).ok()?;
                    if name == "authorization" {
                        bearer_token(value)?
                    } else {
                        value.trim()
                    }
                    .to_string()
                }
                TokenSource::Cookie(name) => cookie(req, name)?.to_string(),
                TokenSource::Query(name) => query_value(req.query(), name)?,
            };
            Some((token, source))
        })
    }

    /// The token's claims when it is signed by a configured key with an accepted algorithm
    /// (or by one of `fetched`) and its claims pass, at time `now` (seconds since the epoch).
    fn verify(&self, token: &str, now: f64, fetched: &[VerifyingKey]) -> Result<Claims, Refusal> {
        let mut digest = [0; 32];
        digest.copy_from_slice(
            ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref(),
        );
        let claims = match self.verified.get(&digest) {
            Some(claims) => claims,
            None => {
                let jws = decode(token)?;
                self.check_signature(&jws, fetched)?;
                let claims: Claims = TOKEN_BASE64
                    .decode(jws.payload)
                    .ok()
                    .and_then(|json| serde_json::from_slice::<Map<String, Value>>(&json).ok())
                    .ok_or("the token's claims are not a base64url JSON object")?
                    .into();
                self.verified.insert(digest, claims.clone());
                claims
            }
        };
        self.check_claims(&claims, now)?;
        Ok(claims)
    }

    fn check_signature(&self, jws: &Jws<'_>, fetched: &[VerifyingKey]) -> Result<(), Refusal> {
        let alg = match jws.header.get("alg") {
            Some(Value::String(name)) if name == "none" => {
                return Err("the token is unsigned (alg none)".into())
            }
            Some(Value::String(name)) => JwsAlgorithm::from_name(name),
            _ => return Err("the token's header has no alg".into()),
        };
        let Some(alg) = alg.filter(|a| self.accepts(*a)) else {
            return Err("the token's algorithm is not accepted".into());
        };
        // RFC 7515 section 4.1.11: an extension weir does not know must not be ignored.
        if jws.header.contains_key("crit") {
            return Err("the token names critical extensions weir does not know".into());
        }
        let kid = match jws.header.get("kid") {
            None => None,
            Some(Value::String(kid)) => Some(kid.as_str()),
            Some(_) => return Err("the token's kid is not a string".into()),
        };
        // A token's kid names the keys with that kid, and those without one; a token without a
        // kid may be signed by any key.
        let mut candidates = self
            .keys
            .iter()
            .chain(fetched)
            .filter(|k| kid.is_none() || k.kid.is_none() || k.kid.as_deref() == kid)
            .filter(|k| k.serves(alg))
            .peekable();
        if candidates.peek().is_none() {
            return Err(match kid {
                Some(_) => "no key has the token's kid and algorithm".into(),
                None => "no key fits the token's algorithm".into(),
            });
        }
        let input = jws.signing_input.as_bytes();
        if candidates.any(|k| k.verifies(alg, input, &jws.signature)) {
            Ok(())
        } else {
            Err("the token's signature does not verify".into())
        }
    }

    fn accepts(&self, alg: JwsAlgorithm) -> bool {
        JwsAlgorithm::ALL
            .iter()
            .position(|a| *a == alg)
            .is_some_and(|i| self.accepted[i])
    }

    /// RFC 7519 section 4.1: `exp`, `nbf` and `iat` with the leeway, `iss` and `aud` against
    /// the configured lists, and the required claims.
    fn check_claims(&self, claims: &Map<String, Value>, now: f64) -> Result<(), Refusal> {
        let time = |name: &str| match claims.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => Err(Cow::Owned(format!("the token's {name} is not a number"))),
        };
        if let Some(exp) = time("exp")? {
            // "The current date/time MUST be before the expiration date/time".
            if now >= exp + self.leeway {
                return Err("the token has expired".into());
            }
        }
        if let Some(nbf) = time("nbf")? {
            if now + self.leeway < nbf {
                return Err("the token is not valid yet".into());
            }
        }
        if let Some(iat) = time("iat")? {
            if iat > now + self.leeway {
                return Err("the token was issued in the future".into());
            }
        }
        if !self.issuers.is_empty() {
            let issuer = claims.get("iss").and_then(Value::as_str);
            if !issuer.is_some_and(|iss| self.issuers.iter().any(|i| i == iss)) {
                return Err("the token's issuer is not accepted".into());
            }
        }
        if !self.audiences.is_empty() {
            let accepted = |aud: &Value| {
                aud.as_str()
                    .is_some_and(|aud| self.audiences.iter().any(|a| a == aud))
            };
            let named = match claims.get("aud") {
                Some(Value::Array(list)) => list.iter().any(accepted),
                Some(aud) => accepted(aud),
                None => false,
            };
            if !named {
                return Err("the token's audience is not accepted".into());
            }
        }
        for claim in &self.required_claims {
            if !claims.contains_key(claim) {
                return Err(format!("the token lacks the {claim} claim").into());
            }
        }
        Ok(())
    }
}

/// The token of an `Authorization: Bearer TOKEN` value (the scheme in any case, RFC 6750
/// section 2.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case("bearer ").then(|| token.trim())
}

/// The value of cookie `name`, from any `Cookie` field (HTTP/2 may split them).
fn cookie<'r>(req: &'r RequestHead, name: &str) -> Option<&'r str> {
    req.head
        .get_all("cookie")
        .filter_map(|value| std::str::from_utf8(value).ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (n, v) = pair.trim().split_once('=')?;
            (n == name).then(|| v.trim_matches('"'))
        })
}

/// The value of query parameter `name`, percent-decoded.
fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (percent_decode(n) == name).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Takes the token out of the request, where `source` found it.
fn remove_token(req: &mut RequestHead, source: &TokenSource) {
    match source {
        TokenSource::Header(name) => req.head.remove(name),
        TokenSource::Cookie(name) => {
            let kept: Vec<String> = req
                .head
                .get_all("cookie")
                .filter_map(|value| std::str::from_utf8(value).ok())
                .flat_map(|value| value.split(';'))
                .map(str::trim)
                .filter(|pair| !pair.is_empty())
                .filter(|pair| pair.split_once('=').map_or(*pair, |(n, _)| n) != name)
                .map(str::to_string)
                .collect();
            req.head.remove("cookie");
            if !kept.is_empty() {
                req.head.append("cookie", kept.join("; ").as_bytes());
            }
        }
        TokenSource::Query(name) => {
            let kept: Vec<&str> = req
                .query()
                .split('&')
                .filter(|pair| {
                    let n = pair.split_once('=').map_or(*pair, |(n, _)| n);
                    !pair.is_empty() && percent_decode(n) != *name
                })
                .collect();
            let query = kept.join("&");
            req.set_query(&query);
        }
    }
}

/// A claim's value as a header value: strings as they are, numbers and booleans as JSON
/// writes them; nothing for other values, or a string a header cannot carry.
fn header_value(claim: &Value) -> Option<Cow<'_, str>> {
    let text = match claim {
        Value::String(s) => Cow::Borrowed(s.as_str()),
        Value::Number(n) => Cow::Owned(n.to_string()),
        Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        _ => return None,
    };
    text.bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
        .then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_config::Jwk;

    fn b64(text: &str) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .unwrap()
    }

    fn enc(bytes: &[u8]) -> String {
        TOKEN_BASE64.encode(bytes)
    }

    fn config(keys: Vec<Jwk>) -> weir_config::Jwt {
        weir_config::Jwt {
            keys,
            jwks_url: None,
            algorithms: Vec::new(),
            issuers: Vec::new(),
            audiences: Vec::new(),
            required_claims: Vec::new(),
            leeway: weir_config::DEFAULT_JWT_LEEWAY,
            token_source: vec![TokenSource::Header("authorization".into())],
            claims_to_headers: Vec::new(),
            forward_token: true,
        }
    }

    fn key(kid: Option<&str>, key: JwkKey) -> Jwk {
        Jwk {
            kid: kid.map(str::to_string),
            alg: None,
            key,
        }
    }

    /// RFC 7515 appendix A.1.1's HMAC key.
    fn rfc7515_oct() -> JwkKey {
        JwkKey::Oct(b64(
            "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow",
        ))
    }

    /// RFC 7515 appendix A.2.1's RSA public key (`n`, `e`).
    fn rfc7515_rsa() -> JwkKey {
        JwkKey::Rsa {
            n: b64(concat!(
                "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddx",
                "HmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMs",
                "D1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSH",
                "SXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdV",
                "MTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8",
                "NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ"
            )),
            e: b64("AQAB"),
        }
    }

    /// RFC 7515 appendix A.3.1's P-256 public key.
    fn rfc7515_ec() -> JwkKey {
        let mut point = vec![4];
        point.extend(b64("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"));
        point.extend(b64("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"));
        JwkKey::Ec {
            curve: EcCurve::P256,
            point,
        }
    }

    /// The claims of RFC 7515's appendix A.1 to A.3 examples, as encoded there (with CRLFs).
    const RFC7515_PAYLOAD: &str = concat!(
        "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFt",
        "cGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    );
    /// Their `exp`, 2011-03-22T18:43:00Z.
    const RFC7515_EXP: f64 = 1300819380.0;

    /// RFC 7515 appendix A.1: HS256.
    const RFC7515_A1: &str = concat!(
        "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.",
        "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFt",
        "cGxlLmNvbS9pc19yb290Ijp0cnVlfQ.",
        "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    );
    /// RFC 7515 appendix A.2: RS256.
    const RFC7515_A2: &str = concat!(
        "eyJhbGciOiJSUzI1NiJ9.",
        "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFt",
        "cGxlLmNvbS9pc19yb290Ijp0cnVlfQ.",
        "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7",
        "AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4",
        "BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K",
        "0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqv",
        "hJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrB",
        "p0igcN_IoypGlUPQGe77Rw"
    );
    /// RFC 7515 appendix A.3: ES256.
    const RFC7515_A3: &str = concat!(
        "eyJhbGciOiJFUzI1NiJ9.",
        "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFt",
        "cGxlLmNvbS9pc19yb290Ijp0cnVlfQ.",
        "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSA",
        "pmWQxfKTUJqPP3-Kg6NU1Q"
    );

    fn verify(auth: &JwtAuth, token: &str, now: f64) -> Result<Map<String, Value>, String> {
        auth.verify(token, now, &[])
            .map(|claims| (*claims).clone())
            .map_err(|e| e.into_owned())
    }

    /// RFC 7515 appendices A.1 (HS256), A.2 (RS256) and A.3 (ES256): each example verifies
    /// with its key, before its `exp` and up to the leeway after it.
    #[test]
    fn rfc7515_appendix_a_examples_verify() {
        for (token, jwk) in [
            (RFC7515_A1, rfc7515_oct()),
            (RFC7515_A2, rfc7515_rsa()),
            (RFC7515_A3, rfc7515_ec()),
        ] {
            let auth = JwtAuth::new(&config(vec![key(None, jwk)]), None);
            let claims = verify(&auth, token, RFC7515_EXP - 100.0).unwrap();
            assert_eq!(claims["iss"], "joe");
            assert_eq!(claims["http://example.com/is_root"], true);
            assert!(verify(&auth, token, RFC7515_EXP + 29.0).is_ok());
            assert_eq!(
                verify(&auth, token, RFC7515_EXP + 30.0).unwrap_err(),
                "the token has expired"
            );
        }
        // Each example fails under the others' keys: none fits or none verifies.
        let auth = JwtAuth::new(&config(vec![key(None, rfc7515_ec())]), None);
        assert_eq!(
            verify(&auth, RFC7515_A1, 0.0).unwrap_err(),
            "no key fits the token's algorithm"
        );
        // The signature's `DtEh` made `DtEi`: still base64url, no longer the signature.
        let tampered = RFC7515_A3.replacen("DtEh", "DtEi", 1);
        assert_eq!(
            verify(&auth, &tampered, 0.0).unwrap_err(),
            "the token's signature does not verify"
        );
    }

    /// RFC 7520 section 4.4 (HS256 with a `kid`, figure 34) and RFC 8037 appendix A.4
    /// (Ed25519): their payloads are text, not claims, so the signature passes and the
    /// claims are what is refused.
    #[test]
    fn rfc7520_and_rfc8037_signatures_verify() {
        let hs = key(
            Some("018c0ae5-4d9b-471b-bfd6-eef314bc7037"),
            JwkKey::Oct(b64("hJtXIZ2uSN5kbQfbtTNWbpdmhkV8FJG-Onbc6mxCcYg")),
        );
        let rfc7520 = concat!(
            "eyJhbGciOiJIUzI1NiIsImtpZCI6IjAxOGMwYWU1LTRkOWItNDcxYi1iZmQ2LWVlZjMxNGJjNzAzNyJ9.",
            "SXTigJlzIGEgZGFuZ2Vyb3VzIGJ1c2luZXNzLCBGcm9kbywgZ29pbmcgb3V0IHlvdXIgZG9vci4gWW91IHN0",
            "ZXAgb250byB0aGUgcm9hZCwgYW5kIGlmIHlvdSBkb24ndCBrZWVwIHlvdXIgZmVldCwgdGhlcmXigJlzIG5v",
            "IGtub3dpbmcgd2hlcmUgeW91IG1pZ2h0IGJlIHN3ZXB0IG9mZiB0by4.",
            "s0h6KThzkfBBBkLspW1h84VsJZFTsPPqMDA7g1Md7p0"
        );
        let ed = key(
            None,
            JwkKey::Ed25519(b64("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")),
        );
        let rfc8037 = concat!(
            "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.",
            "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
        );
        let auth = JwtAuth::new(&config(vec![hs, ed]), None);
        for token in [rfc7520, rfc8037] {
            assert!(auth.check_signature(&decode(token).unwrap(), &[]).is_ok());
            assert_eq!(
                verify(&auth, token, 0.0).unwrap_err(),
                "the token's claims are not a base64url JSON object"
            );
        }
        // The same Ed25519 signature over other text does not verify.
        let other = rfc8037.replace("RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc", "RXhhbXBsZQ");
        assert_eq!(
            verify(&auth, &other, 0.0).unwrap_err(),
            "the token's signature does not verify"
        );
    }

    fn hs256(secret: &[u8], header: &str, claims: &str) -> String {
        let input = format!("{}.{}", enc(header.as_bytes()), enc(claims.as_bytes()));
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), input.as_bytes());
        format!("{input}.{}", enc(tag.as_ref()))
    }

    const SECRET: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn alg_none_and_unknown_or_unaccepted_algorithms_are_refused() {
        let mut cfg = config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]);
        let auth = JwtAuth::new(&cfg, None);
        // RFC 7515 appendix A.5's unsecured JWS, and one with a signature part all the same.
        let unsecured = format!("eyJhbGciOiJub25lIn0.{RFC7515_PAYLOAD}.");
        assert_eq!(
            verify(&auth, &unsecured, 0.0).unwrap_err(),
            "the token is unsigned (alg none)"
        );
        let none_signed = format!("{unsecured}{}", enc(b"x"));
        assert!(verify(&auth, &none_signed, 0.0).is_err());
        for header in [
            r#"{"alg":"HS257"}"#,
            r#"{"alg":"hs256"}"#,
            r#"{"alg":"ES512"}"#,
        ] {
            let token = hs256(SECRET, header, "{}");
            assert_eq!(
                verify(&auth, &token, 0.0).unwrap_err(),
                "the token's algorithm is not accepted",
                "{header}"
            );
        }
        assert_eq!(
            verify(&auth, &hs256(SECRET, r#"{"typ":"JWT"}"#, "{}"), 0.0).unwrap_err(),
            "the token's header has no alg"
        );
        assert!(verify(&auth, &hs256(SECRET, r#"{"alg":"HS256"}"#, "{}"), 0.0).is_ok());
        // `algorithms` narrows what is accepted, whatever the keys would fit.
        cfg.algorithms = vec![JwsAlgorithm::HS512];
        let auth = JwtAuth::new(&cfg, None);
        assert_eq!(
            verify(&auth, &hs256(SECRET, r#"{"alg":"HS256"}"#, "{}"), 0.0).unwrap_err(),
            "the token's algorithm is not accepted"
        );
        // A critical extension weir does not know is refused (RFC 7515 section 4.1.11).
        let auth = JwtAuth::new(&config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]), None);
        let crit = hs256(SECRET, r#"{"alg":"HS256","crit":["exp"],"exp":1}"#, "{}");
        assert_eq!(
            verify(&auth, &crit, 0.0).unwrap_err(),
            "the token names critical extensions weir does not know"
        );
    }

    /// The classic confusion: a token whose `alg` is HS256, MACed with the bytes of the RSA
    /// public key the verifier holds. The RSA key is never used as an HMAC secret.
    #[test]
    fn an_rsa_public_key_is_never_an_hmac_secret() {
        let rsa = rfc7515_rsa();
        let JwkKey::Rsa { n, .. } = &rsa else {
            unreachable!()
        };
        let auth = JwtAuth::new(&config(vec![key(Some("rsa"), rsa.clone())]), None);
        let pem_like = format!("-----BEGIN PUBLIC KEY-----\n{}\n", enc(n));
        for secret in [n.as_slice(), pem_like.as_bytes()] {
            for header in [r#"{"alg":"HS256"}"#, r#"{"alg":"HS256","kid":"rsa"}"#] {
                let token = hs256(secret, header, r#"{"sub":"mallory"}"#);
                assert!(verify(&auth, &token, 0.0).is_err(), "{header}");
            }
        }
        // Nor a P-256 key for ES384, nor an RSA key for ES256, nor a JWK's `alg` overridden.
        let p256 = JwtAuth::new(&config(vec![key(None, rfc7515_ec())]), None);
        let es384 = RFC7515_A3.replacen("eyJhbGciOiJFUzI1NiJ9", &enc(br#"{"alg":"ES384"}"#), 1);
        assert_eq!(
            verify(&p256, &es384, 0.0).unwrap_err(),
            "no key fits the token's algorithm"
        );
        let mut only_ps = key(None, rsa);
        only_ps.alg = Some(JwsAlgorithm::PS256);
        let auth = JwtAuth::new(&config(vec![only_ps]), None);
        assert_eq!(
            verify(&auth, RFC7515_A2, 0.0).unwrap_err(),
            "no key fits the token's algorithm"
        );
    }

    #[test]
    fn kid_selects_the_key() {
        let other = b"another secret, also 32 bytes!!!".to_vec();
        let auth = JwtAuth::new(
            &config(vec![
                key(Some("a"), JwkKey::Oct(SECRET.to_vec())),
                key(Some("b"), JwkKey::Oct(other.clone())),
            ]),
            None,
        );
        let claims = r#"{"sub":"x"}"#;
        assert!(verify(
            &auth,
            &hs256(SECRET, r#"{"alg":"HS256","kid":"a"}"#, claims),
            0.0
        )
        .is_ok());
        assert!(verify(
            &auth,
            &hs256(&other, r#"{"alg":"HS256","kid":"b"}"#, claims),
            0.0
        )
        .is_ok());
        // Without a kid, every key of the type is tried.
        assert!(verify(&auth, &hs256(&other, r#"{"alg":"HS256"}"#, claims), 0.0).is_ok());
        // A kid names one key: another key's signature does not pass under it.
        assert_eq!(
            verify(
                &auth,
                &hs256(&other, r#"{"alg":"HS256","kid":"a"}"#, claims),
                0.0
            )
            .unwrap_err(),
            "the token's signature does not verify"
        );
        assert_eq!(
            verify(
                &auth,
                &hs256(SECRET, r#"{"alg":"HS256","kid":"c"}"#, claims),
                0.0
            )
            .unwrap_err(),
            "no key has the token's kid and algorithm"
        );
        assert_eq!(
            verify(
                &auth,
                &hs256(SECRET, r#"{"alg":"HS256","kid":7}"#, claims),
                0.0
            )
            .unwrap_err(),
            "the token's kid is not a string"
        );
    }

    /// A token whose signature verified is remembered, its claims checked again each time (it
    /// expires while remembered); one whose signature fails is not remembered.
    #[test]
    fn verified_tokens_are_remembered_and_still_expire() {
        let auth = JwtAuth::new(&config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]), None);
        let token = hs256(SECRET, r#"{"alg":"HS256"}"#, r#"{"exp":1700000000}"#);
        assert!(verify(&auth, &token, 1_699_999_999.0).is_ok());
        assert_eq!(auth.verified.len(), 1);
        assert_eq!(
            verify(&auth, &token, 1_700_000_030.0).unwrap_err(),
            "the token has expired"
        );
        let forged = hs256(
            b"another secret of at least 32 bytes",
            r#"{"alg":"HS256"}"#,
            "{}",
        );
        assert!(verify(&auth, &forged, 0.0).is_err());
        assert_eq!(auth.verified.len(), 1);
    }

    #[test]
    fn times_are_checked_with_the_leeway() {
        let auth = JwtAuth::new(&config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]), None);
        let check = |claims: &str, now: f64| {
            verify(&auth, &hs256(SECRET, r#"{"alg":"HS256"}"#, claims), now)
        };
        let now = 1_700_000_000.0;
        assert!(check(r#"{"exp":1700000000}"#, now - 1.0).is_ok());
        assert!(check(r#"{"exp":1700000000}"#, now + 29.5).is_ok());
        assert_eq!(
            check(r#"{"exp":1700000000}"#, now + 30.0).unwrap_err(),
            "the token has expired"
        );
        assert!(check(r#"{"nbf":1700000030.5}"#, now + 1.0).is_ok());
        assert_eq!(
            check(r#"{"nbf":1700000031}"#, now).unwrap_err(),
            "the token is not valid yet"
        );
        assert!(check(r#"{"iat":1700000030}"#, now).is_ok());
        assert_eq!(
            check(r#"{"iat":1700000031}"#, now).unwrap_err(),
            "the token was issued in the future"
        );
        assert_eq!(
            check(r#"{"exp":"tomorrow"}"#, now).unwrap_err(),
            "the token's exp is not a number"
        );
        // A token without times never expires; `required_claims` can demand `exp`.
        assert!(check(r#"{"sub":"x"}"#, now).is_ok());
        let mut cfg = config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]);
        cfg.required_claims = vec!["exp".into(), "sub".into()];
        cfg.leeway = std::time::Duration::ZERO;
        let strict = JwtAuth::new(&cfg, None);
        let token = hs256(SECRET, r#"{"alg":"HS256"}"#, r#"{"sub":"x"}"#);
        assert_eq!(
            verify(&strict, &token, now).unwrap_err(),
            "the token lacks the exp claim"
        );
        let token = hs256(
            SECRET,
            r#"{"alg":"HS256"}"#,
            r#"{"sub":"x","exp":1700000000}"#,
        );
        assert_eq!(
            verify(&strict, &token, now).unwrap_err(),
            "the token has expired"
        );
        assert!(verify(&strict, &token, now - 0.5).is_ok());
    }

    #[test]
    fn issuer_and_audience_must_be_listed_ones() {
        let mut cfg = config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]);
        cfg.issuers = vec!["https://idp.example".into()];
        cfg.audiences = vec!["api".into(), "admin".into()];
        let auth = JwtAuth::new(&cfg, None);
        let check = |claims: &str| verify(&auth, &hs256(SECRET, r#"{"alg":"HS256"}"#, claims), 0.0);
        assert!(check(r#"{"iss":"https://idp.example","aud":"api"}"#).is_ok());
        assert!(check(r#"{"iss":"https://idp.example","aud":["web","admin"]}"#).is_ok());
        for (claims, why) in [
            (r#"{"iss":"https://evil.example","aud":"api"}"#, "issuer"),
            (r#"{"aud":"api"}"#, "issuer"),
            (r#"{"iss":["https://idp.example"],"aud":"api"}"#, "issuer"),
            (r#"{"iss":"https://idp.example","aud":"web"}"#, "audience"),
            (r#"{"iss":"https://idp.example","aud":["web"]}"#, "audience"),
            (r#"{"iss":"https://idp.example"}"#, "audience"),
            (r#"{"iss":"https://idp.example","aud":1}"#, "audience"),
        ] {
            assert_eq!(
                check(claims).unwrap_err(),
                format!("the token's {why} is not accepted"),
                "{claims}"
            );
        }
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let auth = JwtAuth::new(&config(vec![key(None, JwkKey::Oct(SECRET.to_vec()))]), None);
        let good = hs256(SECRET, r#"{"alg":"HS256"}"#, "{}");
        let padded = format!("{good}=");
        let five = format!("{good}.x.y");
        let array_claims = hs256(SECRET, r#"{"alg":"HS256"}"#, "[1]");
        for (token, why) in [
            ("", "the token is not a JWS in compact form"),
            ("a.b", "the token is not a JWS in compact form"),
            (five.as_str(), "the token is not a JWS in compact form"),
            ("!!.e30.", "the token's header is not base64url JSON"),
            (padded.as_str(), "the token's signature is not base64url"),
            (
                array_claims.as_str(),
                "the token's claims are not a base64url JSON object",
            ),
        ] {
            assert_eq!(verify(&auth, token, 0.0).unwrap_err(), why, "{token}");
        }
    }

    /// Tokens signed here by `ring` for each asymmetric family weir verifies but RSA
    /// (whose keys `ring` cannot make; the end-to-end tests sign RS and PS with PyJWT).
    #[test]
    fn es256_es384_and_ed25519_tokens_made_by_ring() {
        use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let claims = enc(br#"{"sub":"ring"}"#);
        for (alg, signing, curve) in [
            (
                "ES256",
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                EcCurve::P256,
            ),
            (
                "ES384",
                &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
                EcCurve::P384,
            ),
        ] {
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(signing, &rng).unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).unwrap();
            let point = pair.public_key().as_ref().to_vec();
            let auth = JwtAuth::new(&config(vec![key(None, JwkKey::Ec { curve, point })]), None);
            let input = format!(
                "{}.{claims}",
                enc(format!(r#"{{"alg":"{alg}"}}"#).as_bytes())
            );
            let sig = pair.sign(&rng, input.as_bytes()).unwrap();
            let token = format!("{input}.{}", enc(sig.as_ref()));
            assert_eq!(verify(&auth, &token, 0.0).unwrap()["sub"], "ring", "{alg}");
        }
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let x = pair.public_key().as_ref().to_vec();
        let auth = JwtAuth::new(&config(vec![key(None, JwkKey::Ed25519(x))]), None);
        let input = format!("{}.{claims}", enc(br#"{"alg":"EdDSA"}"#));
        let token = format!("{input}.{}", enc(pair.sign(input.as_bytes()).as_ref()));
        assert_eq!(verify(&auth, &token, 0.0).unwrap()["sub"], "ring");
    }

    #[test]
    fn tokens_are_found_where_configured() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bEARER  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(
            query_value("a=1&token=x.y%2Ez&b", "token").as_deref(),
            Some("x.y.z")
        );
        assert_eq!(query_value("tokens=1", "token"), None);
    }

    #[test]
    fn claims_become_header_values_when_they_can() {
        let claims: Value = serde_json::from_str(
            r#"{"s":"alice","n":42,"f":1.5,"b":true,"o":{"a":1},"l":[1],"z":null,"crlf":"a\r\nb: c"}"#,
        )
        .unwrap();
        let value = |name: &str| header_value(&claims[name]).map(|v| v.into_owned());
        assert_eq!(value("s").as_deref(), Some("alice"));
        assert_eq!(value("n").as_deref(), Some("42"));
        assert_eq!(value("f").as_deref(), Some("1.5"));
        assert_eq!(value("b").as_deref(), Some("true"));
        for name in ["o", "l", "z", "crlf"] {
            assert_eq!(value(name), None, "{name}");
        }
    }
}
