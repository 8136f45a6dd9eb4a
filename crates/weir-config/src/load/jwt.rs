//! `middlewares.NAME.jwt`: the keys a token may be signed with (JWKs inline and a JWKS file,
//! read now, RFC 7517), the algorithms and claims accepted, and where a request carries its
//! token.

use super::{is_header_name, is_header_value, Fields, Loader};
use crate::model::*;
use crate::yaml::{Node, Pos, Value};
use base64::Engine;

/// base64url as JWK members are written: without padding (RFC 7515 section 2), though a
/// padded value from a hand-written config is read too.
const KEY_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// What is wrong with a JWK: the member at fault (`None`: the JWK as a whole) and why.
type JwkError = (Option<&'static str>, String);

fn algorithm_names() -> String {
    let names: Vec<&str> = JwsAlgorithm::ALL.iter().map(|a| a.name()).collect();
    names.join(", ")
}

impl Loader<'_> {
    /// `jwt: { jwks_url, tls, jwks_file, keys, algorithms, issuers, audiences,
    /// required_claims, leeway, token_source, claims_to_headers, forward_token }`.
    pub(super) fn jwt(&mut self, name: &str, node: &Node) -> Option<MiddlewareKind> {
        const KEYS: &[&str] = &[
            "jwks_url",
            "tls",
            "jwks_file",
            "keys",
            "algorithms",
            "issuers",
            "audiences",
            "required_claims",
            "leeway",
            "token_source",
            "claims_to_headers",
            "forward_token",
        ];
        let f = self.fields(node, "`jwt`", KEYS)?;
        let errors_before = self.errors.len();
        let jwks_url = match f.get("jwks_url") {
            Some(node) => {
                let example = "https://idp.example/.well-known/jwks.json";
                let (url, service, target) =
                    self.url_service(&f, ("jwks_url", node), example, name, "jwt")?;
                Some(JwksUrl {
                    url,
                    service,
                    target,
                })
            }
            None => {
                if let Some(tls) = f.get("tls") {
                    self.error(tls.pos, "`tls` applies to an https:// `jwks_url`");
                }
                None
            }
        };
        let mut keys = Vec::new();
        if let Some(list) = f.get("keys") {
            self.inline_jwks(list, &mut keys);
        }
        if let Some(file) = f.get("jwks_file") {
            self.jwks_file(file, &mut keys);
        }
        let algorithms = self.jwt_algorithms(&f);
        let issuers = self.names_key(&f, "issuers");
        let audiences = self.names_key(&f, "audiences");
        let mut required_claims = Vec::new();
        for (claim, pos) in self.list_key(&f, "required_claims") {
            if self.claim_name(&claim, pos) {
                required_claims.push(claim);
            }
        }
        let mut leeway = DEFAULT_JWT_LEEWAY;
        self.duration_field(&f, "leeway", &mut leeway);
        let token_source = match f.get("token_source") {
            Some(n) => self.token_source(n),
            None => vec![TokenSource::Header("authorization".into())],
        };
        let claims_to_headers = match f.get("claims_to_headers") {
            Some(n) => self.claims_to_headers(n),
            None => Vec::new(),
        };
        let forward_token = match f.get("forward_token") {
            Some(n) => self.boolean(n, "`forward_token`").unwrap_or(true),
            None => true,
        };
        // Only when nothing was refused: that error already says what is wrong.
        if self.errors.len() == errors_before {
            let accepted = if algorithms.is_empty() {
                &JwsAlgorithm::ALL[..]
            } else {
                &algorithms[..]
            };
            let usable = keys.iter().any(|k: &Jwk| {
                accepted
                    .iter()
                    .any(|a| a.fits(&k.key) && k.alg.is_none_or(|only| only == *a))
            });
            if keys.is_empty() && jwks_url.is_none() {
                self.error(
                    f.pos,
                    "`jwt` needs at least one key, in `keys`, `jwks_file` or `jwks_url`",
                );
            } else if !usable && jwks_url.is_none() {
                self.error(
                    f.pos,
                    "no key of `jwt` fits an algorithm it accepts (`algorithms`)",
                );
            }
        }
        Some(MiddlewareKind::Jwt(Box::new(Jwt {
            keys,
            jwks_url,
            algorithms,
            issuers,
            audiences,
            required_claims,
            leeway,
            token_source,
            claims_to_headers,
            forward_token,
        })))
    }

    /// `algorithms`: names from RFC 7518 and RFC 8037, never `none`; empty when absent.
    fn jwt_algorithms(&mut self, f: &Fields<'_>) -> Vec<JwsAlgorithm> {
        let mut algorithms = Vec::new();
        let listed = self.list_key(f, "algorithms");
        let listed_any = !listed.is_empty();
        let mut refused = false;
        for (name, pos) in listed {
            match JwsAlgorithm::from_name(&name) {
                Some(a) if algorithms.contains(&a) => {
                    self.error(pos, format!("`{name}` is listed twice"));
                }
                Some(a) => algorithms.push(a),
                None if name.eq_ignore_ascii_case("none") => {
                    refused = true;
                    self.error(
                        pos,
                        "`none` is never accepted: weir lets through signed tokens only",
                    );
                }
                None => {
                    refused = true;
                    self.error(
                        pos,
                        format!(
                            "unknown algorithm `{name}`{}; expected one of: {}",
                            super::suggest::did_you_mean(&name, algorithm_names().split(", ")),
                            algorithm_names()
                        ),
                    );
                }
            }
        }
        if let (Some(list), false, false) = (f.get("algorithms"), listed_any, refused) {
            self.error(list.pos, "`algorithms` must list at least one algorithm");
        }
        algorithms
    }

    /// A claim's name, which a refusal's `error_description` may quote: printable, without
    /// `"` or `\`. Says so and returns false when it is not.
    fn claim_name(&mut self, claim: &str, pos: Pos) -> bool {
        let fine = !claim.is_empty() && is_header_value(claim) && !claim.contains(['"', '\\']);
        if !fine {
            self.error(
                pos,
                format!("claim name `{claim}` must be printable text without `\"` or `\\`"),
            );
        }
        fine
    }

    /// `keys`: a list of JWKs, each a mapping of its members.
    fn inline_jwks(&mut self, list: &Node, keys: &mut Vec<Jwk>) {
        let Value::Seq(items) = &list.value else {
            self.error(
                list.pos,
                format!("`keys` must be a list of JWKs, found {}", list.kind_name()),
            );
            return;
        };
        for item in items {
            let Value::Map(entries) = &item.value else {
                self.error(
                    item.pos,
                    format!(
                        "a JWK must be a mapping of its members, found {}",
                        item.kind_name()
                    ),
                );
                continue;
            };
            // Scalar members, `${NAME}` expanded (a secret `k` from the environment); list
            // members (`key_ops`, `x5c`) are not read.
            let mut members = Vec::with_capacity(entries.len());
            for (name, value) in entries {
                if let (Some(name), Value::Scalar { .. }) = (name.as_str(), &value.value) {
                    if let Some(text) = self.string(value, &format!("JWK member `{name}`")) {
                        members.push((name.to_string(), text, value.pos));
                    }
                }
            }
            let member = |name: &str| {
                members
                    .iter()
                    .find(|(n, _, _)| n == name)
                    .map(|(_, text, _)| text.clone())
            };
            match parse_jwk(&member) {
                Ok(Some(jwk)) => keys.push(jwk),
                Ok(None) => {}
                Err((at, message)) => {
                    let pos = at
                        .and_then(|name| members.iter().find(|(n, _, _)| n == name))
                        .map_or(item.pos, |(_, _, pos)| *pos);
                    self.error(pos, message);
                }
            }
        }
    }

    /// `jwks_file`: a JWK Set (RFC 7517 section 5) or a single JWK in JSON, read now (relative
    /// to the config file's folder).
    fn jwks_file(&mut self, node: &Node, keys: &mut Vec<Jwk>) {
        let Some(path) = self.string(node, "`jwks_file`") else {
            return;
        };
        let path = self.base.join(path);
        let shown = path.display();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                self.error(node.pos, format!("cannot read jwks file `{shown}`: {e}"));
                return;
            }
        };
        let listed = match parse_jwk_set(&text) {
            Ok(listed) => listed,
            Err(why) => {
                self.error(node.pos, format!("jwks file `{shown}` {why}"));
                return;
            }
        };
        for (number, parsed) in listed.into_iter().enumerate() {
            match parsed {
                Ok(Some(jwk)) => keys.push(jwk),
                Ok(None) => {}
                Err(message) => {
                    let number = number + 1;
                    let message = format!("jwks file `{shown}` key {number}: {message}");
                    self.error(node.pos, message);
                }
            }
        }
    }

    /// `token_source: { header, cookie, query }`: at least one, looked for in that order.
    fn token_source(&mut self, node: &Node) -> Vec<TokenSource> {
        let Some(f) = self.fields(node, "`token_source`", &["header", "cookie", "query"]) else {
            return Vec::new();
        };
        let mut sources = Vec::new();
        for key in ["header", "cookie", "query"] {
            let Some(n) = f.get(key) else { continue };
            let Some(name) = self.string(n, &format!("`{key}`")) else {
                continue;
            };
            // A cookie's name is a token as a header's is (RFC 6265 section 4.1.1).
            let fine = match key {
                "query" => !name.is_empty() && !name.contains(['&', '=', '#', ' ']),
                _ => is_header_name(&name),
            };
            if !fine {
                let what = match key {
                    "header" => "header",
                    "cookie" => "cookie",
                    _ => "query parameter",
                };
                self.error(n.pos, format!("`{name}` is not a valid {what} name"));
                continue;
            }
            sources.push(match key {
                "header" => TokenSource::Header(name.to_ascii_lowercase()),
                "cookie" => TokenSource::Cookie(name),
                _ => TokenSource::Query(name),
            });
        }
        if f.entries.is_empty() {
            self.error(
                f.pos,
                "`token_source` needs at least one of `header`, `cookie`, `query`",
            );
        }
        sources
    }

    /// `claims_to_headers: { CLAIM: HEADER }`.
    fn claims_to_headers(&mut self, node: &Node) -> Vec<(String, String)> {
        let Value::Map(entries) = &node.value else {
            self.error(
                node.pos,
                format!(
                    "`claims_to_headers` must be a mapping of claims to header names, found {}",
                    node.kind_name()
                ),
            );
            return Vec::new();
        };
        let mut copies = Vec::with_capacity(entries.len());
        for (claim, header) in entries {
            let Some(claim_text) = self.string(claim, "a claim's name") else {
                continue;
            };
            let Some(header_text) = self.string(header, "a header name") else {
                continue;
            };
            if !self.claim_name(&claim_text, claim.pos) {
                continue;
            }
            if !is_header_name(&header_text) {
                self.error(
                    header.pos,
                    format!("`{header_text}` is not a valid header name"),
                );
                continue;
            }
            copies.push((claim_text, header_text));
        }
        copies
    }
}

/// The keys of a JWK Set (RFC 7517 section 5) or of a single JWK, in JSON: each key in order
/// (`Ok(None)`: not meant for signatures) or what is wrong with it. `Err`: what is wrong with
/// the text as a whole, said of it ("is not JSON: ...").
pub fn parse_jwk_set(text: &str) -> Result<Vec<Result<Option<Jwk>, String>>, String> {
    let set: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("is not JSON: {e}"))?;
    let listed = match (set.get("keys"), set.get("kty")) {
        (Some(serde_json::Value::Array(list)), _) => list.iter().collect(),
        (None, Some(_)) => vec![&set],
        _ => return Err("must hold a JWK Set (`{\"keys\": [...]}`) or a JWK".into()),
    };
    let parsed = listed.into_iter().map(|jwk| {
        if !jwk.is_object() {
            return Err("a JWK must be an object".to_string());
        }
        let member = |name: &str| jwk.get(name)?.as_str().map(str::to_string);
        parse_jwk(&member).map_err(|(_, message)| message)
    });
    Ok(parsed.collect())
}

/// The key a JWK describes, read by `member` (a member's text, when it is a string); `Ok(None)`
/// for a key not meant for signatures (`use` other than `sig`).
fn parse_jwk(member: &dyn Fn(&str) -> Option<String>) -> Result<Option<Jwk>, JwkError> {
    let Some(kty) = member("kty") else {
        return Err((None, "a JWK needs `kty`".into()));
    };
    if member("use").is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    let alg = match member("alg") {
        None => None,
        Some(name) => match JwsAlgorithm::from_name(&name) {
            Some(a) => Some(a),
            None => {
                let message = format!(
                    "the JWK's `alg` `{name}` is not a signature algorithm weir verifies; expected one of: {}",
                    algorithm_names()
                );
                return Err((Some("alg"), message));
            }
        },
    };
    let bytes = |name: &'static str| -> Result<Vec<u8>, JwkError> {
        let Some(text) = member(name) else {
            return Err((None, format!("a JWK of type `{kty}` needs `{name}`")));
        };
        KEY_BASE64
            .decode(text.as_bytes())
            .map_err(|_| (Some(name), format!("the JWK's `{name}` is not base64url")))
    };
    let key = match kty.as_str() {
        "RSA" => rsa_key(bytes("n")?, bytes("e")?)?,
        "EC" => {
            let crv = member("crv").ok_or((None, "a JWK of type `EC` needs `crv`".into()))?;
            let (curve, len) = match crv.as_str() {
                "P-256" => (EcCurve::P256, 32),
                "P-384" => (EcCurve::P384, 48),
                _ => {
                    let message =
                        format!("curve `{crv}` is not one weir verifies; expected P-256 or P-384");
                    return Err((Some("crv"), message));
                }
            };
            let mut point = vec![4];
            for name in ["x", "y"] {
                let coordinate = bytes(name)?;
                // RFC 7518 section 6.2.1.2 wants the full length, but some writers (PyJWT 2.6,
                // Debian 12's) drop leading zero bytes: the number is the same.
                if coordinate.len() > len {
                    let message = format!(
                        "the JWK's `{name}` must be {len} bytes for {crv}, found {}",
                        coordinate.len()
                    );
                    return Err((Some(name), message));
                }
                point.resize(point.len() + len - coordinate.len(), 0);
                point.extend_from_slice(&coordinate);
            }
            JwkKey::Ec { curve, point }
        }
        "OKP" => {
            let crv = member("crv").ok_or((None, "a JWK of type `OKP` needs `crv`".into()))?;
            if crv != "Ed25519" {
                let message = format!("curve `{crv}` is not one weir verifies; expected Ed25519");
                return Err((Some("crv"), message));
            }
            let x = bytes("x")?;
            if x.len() != 32 {
                let message = format!("the JWK's `x` must be 32 bytes, found {}", x.len());
                return Err((Some("x"), message));
            }
            JwkKey::Ed25519(x)
        }
        "oct" => {
            let k = bytes("k")?;
            // RFC 7518 section 3.2: at least as long as HS256's hash.
            if k.len() < 32 {
                let message = format!(
                    "an HMAC key (`k`) must be at least 32 bytes, found {}",
                    k.len()
                );
                return Err((Some("k"), message));
            }
            JwkKey::Oct(k)
        }
        _ => {
            let message = format!("unknown key type `{kty}`; expected RSA, EC, OKP or oct");
            return Err((Some("kty"), message));
        }
    };
    if let Some(alg) = alg.filter(|a| !a.fits(&key)) {
        let message = format!("a key of type `{kty}` cannot verify `{}`", alg.name());
        return Err((Some("alg"), message));
    }
    Ok(Some(Jwk {
        kid: member("kid"),
        alg,
        key,
    }))
}

/// An RSA public key as `ring` verifies with: a modulus of 2048 to 8192 bits and an odd
/// exponent from 3 to 2^33 - 1.
fn rsa_key(n: Vec<u8>, e: Vec<u8>) -> Result<JwkKey, JwkError> {
    let strip = |mut v: Vec<u8>| {
        let zeros = v.iter().take_while(|&&b| b == 0).count();
        v.drain(..zeros);
        v
    };
    let (n, e) = (strip(n), strip(e));
    let bits = match n.first() {
        Some(first) => n.len() * 8 - first.leading_zeros() as usize,
        None => 0,
    };
    if !(2048..=8192).contains(&bits) {
        let message =
            format!("the RSA modulus has {bits} bits; weir verifies keys of 2048 to 8192 bits");
        return Err((Some("n"), message));
    }
    let exponent = (e.len() <= 5).then(|| e.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b)));
    if !exponent.is_some_and(|x| x % 2 == 1 && (3..1 << 33).contains(&x)) {
        let message = "the RSA exponent (`e`) must be odd, from 3 to 2^33 - 1".to_string();
        return Err((Some("e"), message));
    }
    Ok(JwkKey::Rsa { n, e })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    /// RFC 7515 appendix A.1.1's HMAC key and A.3.1's P-256 key (public part).
    const OCT: &str = "{ kty: oct, k: AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow }";
    const EC: &str = "{ kty: EC, crv: P-256, kid: ec1, x: f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU, y: x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0 }";

    fn mw(body: &str) -> String {
        format!("{BASE}middlewares:\n  auth:\n    jwt: {body}\n")
    }

    fn jwt(text: &str, file: &str) -> Jwt {
        match load_str(text, file) {
            Ok(cfg) => match &cfg.middlewares[0].kind {
                MiddlewareKind::Jwt(j) => (**j).clone(),
                other => panic!("not jwt: {other:?}"),
            },
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn defaults_and_settings() {
        let j = jwt(&mw(&format!("{{ keys: [{OCT}] }}")), "t.yaml");
        assert_eq!(j.keys.len(), 1);
        assert!(matches!(&j.keys[0].key, JwkKey::Oct(k) if k.len() == 64));
        assert_eq!(j.keys[0].kid, None);
        assert!(j.algorithms.is_empty() && j.issuers.is_empty() && j.audiences.is_empty());
        assert_eq!(j.leeway, DEFAULT_JWT_LEEWAY);
        assert_eq!(
            j.token_source,
            vec![TokenSource::Header("authorization".into())]
        );
        assert!(j.forward_token && j.claims_to_headers.is_empty());
        let j = jwt(
            &mw(&format!(
                "{{ keys: [{EC}], algorithms: [ES256], issuers: [idp], audiences: [api, web], \
                 required_claims: [sub], leeway: 5s, forward_token: false, \
                 token_source: {{ header: X-Token, cookie: session, query: access_token }}, \
                 claims_to_headers: {{ sub: X-User, admin: X-Admin }} }}"
            )),
            "t.yaml",
        );
        assert_eq!(j.keys[0].kid.as_deref(), Some("ec1"));
        assert!(
            matches!(&j.keys[0].key, JwkKey::Ec { curve: EcCurve::P256, point } if point.len() == 65 && point[0] == 4)
        );
        assert_eq!(j.algorithms, vec![JwsAlgorithm::ES256]);
        assert_eq!((j.issuers.len(), j.audiences.len()), (1, 2));
        assert_eq!(j.required_claims, vec!["sub"]);
        assert_eq!(j.leeway, std::time::Duration::from_secs(5));
        assert!(!j.forward_token);
        assert_eq!(
            j.token_source,
            vec![
                TokenSource::Header("x-token".into()),
                TokenSource::Cookie("session".into()),
                TokenSource::Query("access_token".into())
            ]
        );
        assert_eq!(
            j.claims_to_headers,
            vec![
                ("sub".to_string(), "X-User".to_string()),
                ("admin".to_string(), "X-Admin".to_string())
            ]
        );
    }

    /// `t.yaml:5:COLUMN: message` for an error at `needle` (past `skip` characters of it) in
    /// the `jwt` body `body`, which [`mw`] writes on line 5 after 9 characters.
    fn at(body: &str, needle: &str, skip: usize, message: &str) -> String {
        let column = 9 + body.find(needle).expect("needle in body") + skip + 1;
        format!("t.yaml:5:{column}: {message}")
    }

    #[test]
    fn algorithm_errors() {
        let body = format!("{{ keys: [{OCT}], algorithms: [HS256, none, RS257, HS256] }}");
        assert_eq!(
            errors(&mw(&body)),
            vec![
                at(&body, "none,", 0, "`none` is never accepted: weir lets through signed tokens only"),
                at(&body, "RS257", 0, "unknown algorithm `RS257` (did you mean `RS256`?); expected one of: HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA"),
                at(&body, "HS256] }", 0, "`HS256` is listed twice"),
            ]
        );
        let body = format!("{{ keys: [{OCT}], algorithms: [] }}");
        assert_eq!(
            errors(&mw(&body)),
            vec![at(
                &body,
                "[] }",
                0,
                "`algorithms` must list at least one algorithm"
            )]
        );
        let body = format!("{{ keys: [{OCT}], algorithms: [ES256] }}");
        assert_eq!(
            errors(&mw(&body)),
            vec![at(
                &body,
                "{",
                0,
                "no key of `jwt` fits an algorithm it accepts (`algorithms`)"
            )]
        );
    }

    #[test]
    fn jwk_errors_point_at_the_member() {
        let cases = [
            (
                "{ kty: RSA, n: AQAB, e: AQAB }",
                "n: ",
                3,
                "the RSA modulus has 17 bits; weir verifies keys of 2048 to 8192 bits",
            ),
            (
                "{ kty: RSA, n: AAAAAA, e: AQAB }",
                "n: ",
                3,
                "the RSA modulus has 0 bits; weir verifies keys of 2048 to 8192 bits",
            ),
            (
                "{ kty: EC, crv: P-521, x: AA, y: AA }",
                "P-521",
                0,
                "curve `P-521` is not one weir verifies; expected P-256 or P-384",
            ),
            (
                "{ kty: EC, crv: P-256, x: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA, y: AA }",
                "AAAA",
                0,
                "the JWK's `x` must be 32 bytes for P-256, found 33",
            ),
            (
                "{ kty: OKP, crv: X25519, x: AA }",
                "X25519",
                0,
                "curve `X25519` is not one weir verifies; expected Ed25519",
            ),
            (
                "{ kty: oct, k: c2hvcnQ }",
                "c2hvcnQ",
                0,
                "an HMAC key (`k`) must be at least 32 bytes, found 5",
            ),
            (
                "{ kty: oct, k: \"not base64!\" }",
                "\"not",
                0,
                "the JWK's `k` is not base64url",
            ),
            ("{ kty: oct }", "{ kty", 0, "a JWK of type `oct` needs `k`"),
            ("{ k: AA }", "{ k: AA", 0, "a JWK needs `kty`"),
            (
                "{ kty: DSA }",
                "DSA",
                0,
                "unknown key type `DSA`; expected RSA, EC, OKP or oct",
            ),
            (
                "[kty, oct]",
                "[kty",
                0,
                "a JWK must be a mapping of its members, found a list",
            ),
        ];
        let with = |members: &str| OCT.replace("kty: oct", &format!("kty: oct, {members}"));
        let none = format!(
            "the JWK's `alg` `none` is not a signature algorithm weir verifies; expected one of: {}",
            algorithm_names()
        );
        let more = [
            (
                with("alg: RS256"),
                "RS256",
                "a key of type `oct` cannot verify `RS256`".to_string(),
            ),
            (with("alg: none"), "none", none),
            // A key for encryption is left out; with no other key, there is none.
            (
                with("use: enc"),
                "{",
                "`jwt` needs at least one key, in `keys`, `jwks_file` or `jwks_url`".to_string(),
            ),
        ];
        let cases = cases
            .into_iter()
            .map(|(key, needle, skip, message)| {
                (key.to_string(), needle, skip, message.to_string())
            })
            .chain(
                more.into_iter()
                    .map(|(key, needle, message)| (key, needle, 0, message)),
            );
        for (key, needle, skip, message) in cases {
            let body = format!("{{ keys: [{key}] }}");
            assert_eq!(
                errors(&mw(&body)),
                vec![at(&body, needle, skip, &message)],
                "{key}"
            );
        }
    }

    /// A folder of its own for a test, with `text` in its file `jwks.json`: the path of a
    /// config file beside it.
    fn beside_jwks(test: &str, text: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("weir-config-{}-jwt-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("jwks.json"), text).unwrap();
        dir.join("t.yaml")
    }

    #[test]
    fn jwks_file_is_read_at_load() {
        let file = beside_jwks(
            "good",
            r#"{"keys": [
                {"kty":"EC","crv":"P-256","kid":"e","use":"sig","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","key_ops":["verify"]},
                {"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"},
                {"kty":"OKP","crv":"Ed25519","alg":"EdDSA","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
            ]}"#,
        );
        let file = file.to_str().unwrap();
        let j = jwt(
            &mw(&format!("{{ keys: [{OCT}], jwks_file: jwks.json }}")),
            file,
        );
        let kinds: Vec<String> = j.keys.iter().map(|k| format!("{:?}", k.key)).collect();
        let prefixes = ["Oct(64 bytes, ", "Ec(P256, ", "Ed25519("];
        assert_eq!(kinds.len(), 3);
        for (kind, prefix) in kinds.iter().zip(prefixes) {
            assert!(kind.starts_with(prefix), "{kind}");
        }
        // The secret is not shown, but another secret of the same length shows differently.
        assert!(!kinds[0].contains("AyM1") && !kinds[0].contains("[3, 35"));
        let other = format!("{:?}", JwkKey::Oct(vec![7; 64]));
        assert!(other.starts_with("Oct(64 bytes, ") && other != kinds[0]);
        assert_eq!(j.keys[2].alg, Some(JwsAlgorithm::EdDSA));
        // A coordinate written without its leading zero byte (31 bytes) is the same number.
        let short = EC.replace(
            "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            &format!("{}w", "_".repeat(41)),
        );
        let j = jwt(&mw(&format!("{{ keys: [{short}] }}")), "t.yaml");
        let JwkKey::Ec { point, .. } = &j.keys[0].key else {
            panic!("not EC");
        };
        assert_eq!((point.len(), point[1], point[2]), (65, 0, 0xff));
    }

    #[test]
    fn jwks_file_errors_name_the_file_and_the_key() {
        let path = beside_jwks(
            "bad",
            r#"{"keys": [{"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"}, {"kty":"EC","crv":"P-256","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AA"}, 7]}"#,
        );
        let file = path.to_str().unwrap();
        let dir = path.parent().unwrap();
        let jwks = dir.join("jwks.json");
        let jwks = jwks.display();
        // The errors of loading `body` from `file`, after `jwks.json` is made `text`.
        let errors_with = |text: Option<&str>, body: &str| -> Vec<String> {
            if let Some(text) = text {
                std::fs::write(dir.join("jwks.json"), text).unwrap();
            }
            let errs = load_str(&mw(body), file).unwrap_err();
            errs.iter().map(|e| e.to_string()).collect()
        };
        let body = "{ jwks_file: jwks.json }";
        assert_eq!(
            errors_with(None, body),
            vec![
                format!("{file}:5:23: jwks file `{jwks}` key 2: the JWK's `x` must be 32 bytes for P-256, found 33"),
                format!("{file}:5:23: jwks file `{jwks}` key 3: a JWK must be an object"),
            ]
        );
        assert_eq!(
            errors_with(Some("{\"keys\": ["), body),
            vec![format!("{file}:5:23: jwks file `{jwks}` is not JSON: EOF while parsing a list at line 1 column 10")]
        );
        assert_eq!(
            errors_with(Some("[]"), body),
            vec![format!("{file}:5:23: jwks file `{jwks}` must hold a JWK Set (`{{\"keys\": [...]}}`) or a JWK")]
        );
        let missing = dir.join("missing.json");
        let errs = errors_with(None, "{ jwks_file: missing.json }");
        assert_eq!(errs.len(), 1, "{errs:?}");
        let expected = format!(
            "{file}:5:23: cannot read jwks file `{}`: ",
            missing.display()
        );
        assert!(errs[0].starts_with(&expected), "{errs:?}");
    }

    #[test]
    fn jwks_url_is_a_service_of_one_server() {
        let j = jwt(
            &mw("{ jwks_url: \"https://idp.test:8443/keys?v=2\", tls: { server_name: idp } }"),
            "t.yaml",
        );
        let url = j.jwks_url.unwrap();
        assert_eq!(url.url, "https://idp.test:8443/keys?v=2");
        assert_eq!(url.target, "/keys?v=2");
        assert_eq!(url.service.name, "auth (jwt)");
        assert_eq!(url.service.servers[0].url, "https://idp.test:8443");
        assert_eq!(url.service.tls.server_name.as_deref(), Some("idp"));
        assert!(!url.service.pass_host_header && j.keys.is_empty());
        // Beside `keys`, which always count.
        let j = jwt(
            &mw(&format!("{{ keys: [{OCT}], jwks_url: \"http://idp\" }}")),
            "t.yaml",
        );
        assert_eq!(
            (j.keys.len(), j.jwks_url.unwrap().target.as_str()),
            (1, "/")
        );
        assert!(jwt(&mw(&format!("{{ keys: [{OCT}] }}")), "t.yaml")
            .jwks_url
            .is_none());
    }

    #[test]
    fn other_errors() {
        assert_eq!(
            errors(&mw("{}")),
            vec![at(
                "{}",
                "{",
                0,
                "`jwt` needs at least one key, in `keys`, `jwks_file` or `jwks_url`"
            )]
        );
        let url_errors = [
            (
                "{ jwks_url: \"ftp://idp/jwks\" }".to_string(),
                "\"ftp",
                "`jwks_url` must be an http:// or https:// URL with a host, e.g. \"https://idp.example/.well-known/jwks.json\", found `ftp://idp/jwks`",
            ),
            (
                format!("{{ keys: [{OCT}], tls: {{ insecure_skip_verify: true }} }}"),
                "{ insecure",
                "`tls` applies to an https:// `jwks_url`",
            ),
            (
                "{ jwks_url: \"http://idp/jwks\", tls: { insecure_skip_verify: true } }".to_string(),
                "{ insecure",
                "`tls` applies to https:// servers; this service has none",
            ),
        ];
        for (body, needle, message) in url_errors {
            assert_eq!(errors(&mw(&body)), vec![at(&body, needle, 0, message)]);
        }
        let body = format!(
            "{{ keys: [{OCT}], token_source: {{}}, leeway: soon, forward_token: maybe, required_claims: [\"a\\\"b\"] }}"
        );
        assert_eq!(
            errors(&mw(&body)),
            vec![
                at(
                    &body,
                    "{}",
                    0,
                    "`token_source` needs at least one of `header`, `cookie`, `query`"
                ),
                at(
                    &body,
                    "soon",
                    0,
                    "`leeway` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `soon`"
                ),
                at(
                    &body,
                    "maybe",
                    0,
                    "`forward_token` must be `true` or `false`, found `maybe`"
                ),
                at(
                    &body,
                    "\"a",
                    0,
                    "claim name `a\"b` must be printable text without `\"` or `\\`"
                ),
            ]
        );
        let body = format!(
            "{{ keys: [{OCT}], token_source: {{ header: \"a b\", cookie: \"c;d\", query: \"e&f\" }}, claims_to_headers: {{ sub: \"X User\" }} }}"
        );
        assert_eq!(
            errors(&mw(&body)),
            vec![
                at(&body, "\"a b", 0, "`a b` is not a valid header name"),
                at(&body, "\"c;d", 0, "`c;d` is not a valid cookie name"),
                at(
                    &body,
                    "\"e&f",
                    0,
                    "`e&f` is not a valid query parameter name"
                ),
                at(&body, "\"X User", 0, "`X User` is not a valid header name"),
            ]
        );
        let body = format!("{{ keys: [{OCT}], audience: [a] }}");
        assert!(errors(&mw(&body))[0].starts_with(&at(
            &body,
            "audience",
            0,
            "unknown key `audience` in `jwt` (did you mean `audiences`?); expected one of: jwks_url, tls, jwks_file, keys,"
        )));
    }
}
