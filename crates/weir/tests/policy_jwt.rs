//! End-to-end `jwt`: tokens made by PyJWT and `cryptography` (Debian's python3-jwt and
//! python3-cryptography) for every algorithm weir verifies, keys in a JWKS file they wrote;
//! the RFC 6750 challenges (no token, a refused one); `alg: none`, algorithm confusion, a wrong
//! `kid`, `aud` or `iss`, and times past the leeway refused before the upstream sees anything;
//! claims copied into headers the upstream echoes (a client's own copy removed), the token
//! taken out of its header, cookie or query parameter; HTTP/1.1 and HTTP/2 clients; a JWKS
//! file rotated and reloaded; a JWKS served over HTTP (`jwks_url`), rotated, shared, down and
//! short-lived; and `weir check` on bad keys. Traefik keeps JWT in its paid
//! edition, so there is no Traefik test to port: RFC 7515, 7519, 6750 and 8037 are the
//! reference.

mod common;
use base64::Engine;
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Makes the keys (once per folder: RSA 2048, P-256, P-384, Ed25519 and a 64-byte HMAC
/// secret), writes their public JWKs to `jwks.json` (kids `rsa`, `ec256`, `ec384`, `ed`,
/// `hs`), and prints a token for each spec: `{key, alg, claims, headers}`. Key `rsa-as-hmac`
/// MACs an HS256 token with the RSA public key's PEM, as an algorithm-confusion attack does
/// (PyJWT itself refuses to); alg `none` is PyJWT's unsigned token.
const PYJWT: &str = r#"
import base64, hashlib, hmac, json, os, sys
import jwt
from jwt.algorithms import RSAAlgorithm, ECAlgorithm, OKPAlgorithm, HMACAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

folder, specs = sys.argv[1], json.loads(sys.argv[2])
pems = os.path.join(folder, "keys.json")
if not os.path.exists(pems):
    def pem(key):
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()
    made = {
        "rsa": pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "ec256": pem(ec.generate_private_key(ec.SECP256R1())),
        "ec384": pem(ec.generate_private_key(ec.SECP384R1())),
        "ed": pem(ed25519.Ed25519PrivateKey.generate()),
        "hs": base64.b64encode(os.urandom(64)).decode(),
    }
    with open(pems, "w") as f:
        json.dump(made, f)
with open(pems) as f:
    made = json.load(f)
keys = {name: serialization.load_pem_private_key(made[name].encode(), None)
        for name in ["rsa", "ec256", "ec384", "ed"]}
keys["hs"] = base64.b64decode(made["hs"])
jwks = []
for name, kind in [("rsa", RSAAlgorithm), ("ec256", ECAlgorithm), ("ec384", ECAlgorithm),
                   ("ed", OKPAlgorithm)]:
    jwk = json.loads(kind.to_jwk(keys[name].public_key()))
    jwk.update(kid=name, use="sig")
    jwks.append(jwk)
jwk = json.loads(HMACAlgorithm.to_jwk(keys["hs"]))
jwk.update(kid="hs")
jwks.append(jwk)
with open(os.path.join(folder, "jwks.json"), "w") as f:
    json.dump({"keys": jwks}, f)

def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

tokens = []
for spec in specs:
    headers = spec.get("headers") or None
    if spec["key"] == "rsa-as-hmac":
        public_pem = keys["rsa"].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = {"alg": "HS256", "typ": "JWT", **(headers or {})}
        signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(spec["claims"]).encode())
        mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
        tokens.append(signing_input + "." + b64(mac))
    elif spec["alg"] == "none":
        tokens.append(jwt.encode(spec["claims"], None, algorithm="none", headers=headers))
    else:
        tokens.append(jwt.encode(spec["claims"], keys[spec["key"]], algorithm=spec["alg"],
                                 headers=headers))
print(json.dumps(tokens))
"#;

/// Tokens PyJWT made for `specs`, with the keys of `folder` (made on first use).
fn pyjwt(folder: &std::path::Path, specs: &Value) -> Vec<String> {
    let out = python(PYJWT, &[folder.to_str().unwrap(), &specs.to_string()]);
    serde_json::from_slice(&out).expect("PyJWT's tokens as JSON")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `guarded_config` with `auth` as the `jwt` body.
fn jwt_config(upstream: &Upstream, auth: &str) -> String {
    guarded_config(upstream, "auth", "jwt", auth)
}

/// weir with `jwt` reading the keys PyJWT wrote in `dir`, and more keys (`, KEY: VALUE`).
fn start_with_jwks(upstream: &Upstream, dir: &std::path::Path, more: &str) -> Weir {
    let jwks = dir.join("jwks.json");
    Weir::start(&jwt_config(
        upstream,
        &format!("{{ jwks_file: \"{}\"{more} }}", jwks.display()),
    ))
}

/// `GET TARGET` with more header lines, over HTTP/1.1.
fn get_with(weir: &Weir, target: &str, extra: &str) -> Resp {
    request(
        weir.addr(),
        &format!("GET {target} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
    )
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

/// A refusal of a token: 401 with `error="invalid_token"` and why.
fn assert_invalid(resp: &Resp, why: &str) {
    assert_eq!(resp.status, 401, "{why}: {}", resp.text());
    assert_eq!(
        resp.header("www-authenticate"),
        Some(format!("Bearer error=\"invalid_token\", error_description=\"{why}\"").as_str())
    );
    assert_eq!(resp.text(), "401 Unauthorized\n");
}

/// Every algorithm weir verifies, from tokens PyJWT signed and keys it wrote as a JWKS: each
/// passes with its `kid`, and ES256 without one (every key of the type is tried). The claims
/// reach the upstream as headers; the token goes up as it came (`forward_token` defaults on).
#[test]
fn every_algorithm_signed_by_pyjwt_is_let_through() {
    let dir = temp_dir("jwt-algs");
    let exp = now() + 600;
    let algorithms = [
        ("rsa", "RS256"),
        ("rsa", "RS384"),
        ("rsa", "RS512"),
        ("rsa", "PS256"),
        ("rsa", "PS384"),
        ("rsa", "PS512"),
        ("ec256", "ES256"),
        ("ec384", "ES384"),
        ("ed", "EdDSA"),
        ("hs", "HS256"),
        ("hs", "HS384"),
        ("hs", "HS512"),
    ];
    let mut specs: Vec<Value> = algorithms
        .iter()
        .map(|(key, alg)| {
            json!({"key": key, "alg": alg, "headers": {"kid": key},
                   "claims": {"sub": format!("user-{alg}"), "exp": exp}})
        })
        .collect();
    specs.push(json!({"key": "ec256", "alg": "ES256", "claims": {"sub": "no-kid"}}));
    let tokens = pyjwt(&dir, &Value::Array(specs));
    let up = Upstream::start("app");
    let weir = start_with_jwks(&up, &dir, ", claims_to_headers: { sub: X-User }");
    let subjects = algorithms
        .iter()
        .map(|(_, alg)| format!("user-{alg}"))
        .chain(["no-kid".to_string()]);
    for (token, sub) in tokens.iter().zip(subjects) {
        let resp = get_with(&weir, "/x", &bearer(token));
        assert_eq!(resp.status, 200, "{sub}: {}", resp.text());
        let echo = resp.json();
        assert_eq!(echoed_header(&echo, "x-user"), Some(sub.clone()));
        assert_eq!(
            echoed_header(&echo, "authorization"),
            Some(format!("Bearer {token}")),
            "{sub}"
        );
    }
    // A route without the middleware asks for nothing.
    assert_eq!(get(weir.addr(), "t", "/open").status, 200);
}

/// RFC 6750 section 3: no token, a challenge without an error; a bad token, `invalid_token`
/// and why. `alg: none`, an HS256 token MACed with the RSA public key (algorithm confusion),
/// a `kid` no key has, a wrong audience or issuer, a token past its `exp` or before its `nbf`
/// beyond the leeway, a tampered one: all refused before the upstream sees a request.
#[test]
fn refusals_carry_the_bearer_challenge() {
    let dir = temp_dir("jwt-refusals");
    let t = now();
    let good =
        json!({"sub": "ok", "iss": "https://idp.test", "aud": ["other", "api"], "exp": t + 600});
    let with = |extra: Value| {
        let mut claims = good.clone();
        for (k, v) in extra.as_object().unwrap() {
            claims[k] = v.clone();
        }
        claims
    };
    let specs = json!([
        {"key": "rsa", "alg": "RS256", "headers": {"kid": "rsa"}, "claims": good},
        {"key": "rsa", "alg": "none", "headers": {"kid": "rsa"}, "claims": good},
        {"key": "rsa-as-hmac", "alg": "HS256", "headers": {"kid": "rsa"}, "claims": good},
        {"key": "rsa-as-hmac", "alg": "HS256", "claims": good},
        {"key": "rsa", "alg": "RS256", "headers": {"kid": "rotated-away"}, "claims": good},
        {"key": "rsa", "alg": "RS256", "claims": with(json!({"aud": "web"}))},
        {"key": "rsa", "alg": "RS256", "claims": with(json!({"iss": "https://evil.test"}))},
        {"key": "rsa", "alg": "RS256", "claims": with(json!({"exp": t - 60}))},
        {"key": "rsa", "alg": "RS256", "claims": with(json!({"exp": t - 5}))},
        {"key": "rsa", "alg": "RS256", "claims": with(json!({"nbf": t + 120}))},
        {"key": "rsa", "alg": "RS256", "claims": with(json!({"nbf": t + 5, "iat": t + 5}))},
        {"key": "ec256", "alg": "ES256", "headers": {"kid": "rsa"}, "claims": good},
        {"key": "hs", "alg": "HS256", "claims": good},
    ]);
    let tokens = pyjwt(&dir, &specs);
    let up = Upstream::start("app");
    let weir = start_with_jwks(&up, &dir, ", algorithms: [RS256, ES256], issuers: [\"https://idp.test\"], audiences: [api], required_claims: [sub]");
    assert_eq!(get_with(&weir, "/x", &bearer(&tokens[0])).status, 200);
    let seen = up.request_count();
    // No token, or not a Bearer one: the bare challenge.
    for extra in ["", "Authorization: Basic dGVzdDp0ZXN0\r\n"] {
        let resp = get_with(&weir, "/x", extra);
        assert_eq!(resp.status, 401, "{extra}");
        assert_eq!(resp.header("www-authenticate"), Some("Bearer"));
    }
    let refused = [
        (1, "the token is unsigned (alg none)"),
        (2, "the token's algorithm is not accepted"),
        (3, "the token's algorithm is not accepted"),
        (4, "no key has the token's kid and algorithm"),
        (5, "the token's audience is not accepted"),
        (6, "the token's issuer is not accepted"),
        (7, "the token has expired"),
        (9, "the token is not valid yet"),
        // The ES256 token names the RSA key's kid: no key of its type has it.
        (11, "no key has the token's kid and algorithm"),
        (12, "the token's algorithm is not accepted"),
    ];
    for (i, why) in refused {
        assert_invalid(&get_with(&weir, "/x", &bearer(&tokens[i])), why);
    }
    // Within the 30 s leeway: 5 s past `exp`, 5 s before `nbf` and `iat`.
    assert_eq!(get_with(&weir, "/x", &bearer(&tokens[8])).status, 200);
    assert_eq!(get_with(&weir, "/x", &bearer(&tokens[10])).status, 200);
    let seen = seen + 2;
    // A signature that does not verify (other claims under the first token's signature),
    // and what is not a JWS at all.
    let parts: Vec<&str> = tokens[0].split('.').collect();
    let root = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(good.to_string().replace("\"ok\"", "\"root\""));
    let tampered = format!("{}.{root}.{}", parts[0], parts[2]);
    assert_invalid(
        &get_with(&weir, "/x", &bearer(&tampered)),
        "the token's signature does not verify",
    );
    assert_invalid(
        &get_with(&weir, "/x", "Authorization: Bearer not-a-token\r\n"),
        "the token is not a JWS in compact form",
    );
    assert_eq!(
        up.request_count(),
        seen,
        "a refused request reached the upstream"
    );
    // With every algorithm accepted, the confused token still finds no key: under the RSA
    // key's kid no HMAC key serves, and without a kid the HMAC key's MAC differs.
    let open = start_with_jwks(&up, &dir, "");
    assert_invalid(
        &get_with(&open, "/x", &bearer(&tokens[2])),
        "no key has the token's kid and algorithm",
    );
    assert_invalid(
        &get_with(&open, "/x", &bearer(&tokens[3])),
        "the token's signature does not verify",
    );
    assert_invalid(
        &get_with(&open, "/x", &bearer(&tokens[1])),
        "the token is unsigned (alg none)",
    );
    assert_eq!(get_with(&open, "/x", &bearer(&tokens[12])).status, 200);
    assert_eq!(up.request_count(), seen + 1);
}

/// `claims_to_headers` copies strings, numbers and booleans, and removes the client's own copy
/// of each header whether or not the claim is there; `forward_token: false` takes the token
/// out of its header, cookie or query parameter, leaving the rest.
#[test]
fn claims_become_headers_and_the_token_stays_behind() {
    let dir = temp_dir("jwt-headers");
    let specs = json!([
        {"key": "ec256", "alg": "ES256", "claims": {"sub": "alice", "tier": 3, "admin": true,
                                                     "groups": ["a"], "exp": now() + 600}},
        {"key": "ec256", "alg": "ES256", "claims": {"sub": "bob"}},
    ]);
    let tokens = pyjwt(&dir, &specs);
    let up = Upstream::start("app");
    let weir = start_with_jwks(
        &up,
        &dir,
        ", forward_token: false, \
             token_source: { header: X-Api-Token, cookie: session, query: access_token }, \
             claims_to_headers: { sub: X-User, tier: X-Tier, admin: X-Admin, groups: X-Groups }",
    );
    let spoofed = "X-User: root\r\nX-Admin: true\r\nX-Groups: wheel\r\n";
    let resp = get_with(
        &weir,
        "/x?a=1",
        &format!("X-Api-Token: {}\r\n{spoofed}", tokens[0]),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let echo = resp.json();
    assert_eq!(echoed_header(&echo, "x-user").as_deref(), Some("alice"));
    assert_eq!(echoed_header(&echo, "x-tier").as_deref(), Some("3"));
    assert_eq!(echoed_header(&echo, "x-admin").as_deref(), Some("true"));
    assert_eq!(
        echoed_header(&echo, "x-groups"),
        None,
        "a list is no header value"
    );
    assert_eq!(echoed_header(&echo, "x-api-token"), None);
    assert_eq!(echo["target"], "/x?a=1");
    // A claim the token lacks leaves the header absent, the client's copy removed all the same.
    let resp = get_with(
        &weir,
        "/x",
        &format!(
            "Cookie: theme=dark; session={}; lang=en\r\n{spoofed}",
            tokens[1]
        ),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let echo = resp.json();
    assert_eq!(echoed_header(&echo, "x-user").as_deref(), Some("bob"));
    assert_eq!(echoed_header(&echo, "x-admin"), None);
    assert_eq!(
        echoed_header(&echo, "cookie").as_deref(),
        Some("theme=dark; lang=en")
    );
    let resp = get_with(&weir, &format!("/x?a=1&access_token={}&b=2", tokens[1]), "");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["target"], "/x?a=1&b=2");
    let resp = get_with(&weir, &format!("/x?access_token={}", tokens[1]), "");
    assert_eq!(resp.json()["target"], "/x");
    // The header source comes first; `Authorization` is not a source here.
    let resp = get_with(&weir, "/x", &bearer(&tokens[1]));
    assert_eq!(resp.status, 401);
    assert_eq!(resp.header("www-authenticate"), Some("Bearer"));
}

/// The response head and body curl gets over h2c (prior knowledge) with `args`.
fn h2_get(args: &[&str], url: &str) -> (String, String) {
    let dir = temp_dir("jwt-h2-body");
    let body = dir.join("body");
    let mut all = vec![
        "-D",
        "-",
        "-o",
        body.to_str().unwrap(),
        "--http2-prior-knowledge",
    ];
    all.extend_from_slice(args);
    all.push(url);
    let head = String::from_utf8_lossy(&curl_ok(&all)).into_owned();
    (head, std::fs::read_to_string(&body).unwrap_or_default())
}

/// Over HTTP/2: a valid token passes with its claim as a header, none gets the challenge, a
/// bad one `invalid_token`; a gRPC call without a token gets `grpc-status: 16`.
#[test]
fn http2_clients_get_the_same_answers() {
    let dir = temp_dir("jwt-h2");
    let specs = json!([
        {"key": "ed", "alg": "EdDSA", "headers": {"kid": "ed"}, "claims": {"sub": "h2-user"}},
        {"key": "ed", "alg": "EdDSA", "headers": {"kid": "ed"}, "claims": {"sub": "late", "exp": now() - 3600}},
    ]);
    let tokens = pyjwt(&dir, &specs);
    let up = Upstream::start("app");
    let weir = start_with_jwks(&up, &dir, ", claims_to_headers: { sub: X-User }");
    let url = format!("http://{}/x", weir.addr());
    let auth = format!("authorization: Bearer {}", tokens[0]);
    let (head, body) = h2_get(&["-H", &auth, "-H", "x-user: root"], &url);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echoed_header(&echo, "x-user").as_deref(), Some("h2-user"));
    let (head, _) = h2_get(&[], &url);
    assert!(head.starts_with("HTTP/2 401"), "{head}");
    assert_eq!(header_value(&head, "www-authenticate"), Some("Bearer"));
    let auth = format!("authorization: Bearer {}", tokens[1]);
    let (head, body) = h2_get(&["-H", &auth], &url);
    assert!(head.starts_with("HTTP/2 401"), "{head}");
    assert_eq!(
        header_value(&head, "www-authenticate"),
        Some("Bearer error=\"invalid_token\", error_description=\"the token has expired\"")
    );
    assert_eq!(body, "401 Unauthorized\n");
    // A gRPC call gets the refusal in gRPC form (UNAUTHENTICATED), the challenge beside it.
    let head = curl_grpc_head(&["--http2-prior-knowledge"], &url);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_eq!(header_value(&head, "grpc-status"), Some("16"), "{head}");
    assert_eq!(header_value(&head, "www-authenticate"), Some("bearer"));
}

/// `weir check` names the place of an unknown algorithm, a JWK that does not parse, and a
/// jwks file that cannot be read or is not a JWK Set.
#[test]
fn weir_check_refuses_bad_keys() {
    let dir = temp_dir("jwt-check");
    std::fs::write(dir.join("not-json"), "{ keys: nope").unwrap();
    let up = Upstream::start("app");
    let path = dir.join("weir.yaml");
    let check = |auth: &str| {
        std::fs::write(&path, jwt_config(&up, auth)).unwrap();
        let out = weir_check(&path);
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        (out.status.success(), text)
    };
    let secret = "{ kty: oct, k: AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow }";
    let missing = dir.join("missing.json");
    let not_json = dir.join("not-json");
    // (the `jwt` body, where in it the error is, what it says)
    let cases = [
        (
            format!("{{ keys: [{secret}], algorithms: [HS256, XS256] }}"),
            "XS256",
            "unknown algorithm `XS256`; expected one of: HS256,".to_string(),
        ),
        (
            "{ keys: [{ kty: EC, crv: P-256, x: \"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU\", y: \"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0A\" }] }".to_string(),
            "\"x_FE",
            "the JWK's `y` must be 32 bytes for P-256, found 33".to_string(),
        ),
        (
            "{ keys: [{ kty: RSA, n: \"AQAB\" }] }".to_string(),
            "{ kty",
            "a JWK of type `RSA` needs `e`".to_string(),
        ),
        (
            "{ jwks_file: missing.json }".to_string(),
            "missing.json",
            format!("cannot read jwks file `{}`", missing.display()),
        ),
        (
            "{ jwks_file: not-json }".to_string(),
            "not-json",
            format!("jwks file `{}` is not JSON: ", not_json.display()),
        ),
    ];
    for (auth, needle, message) in cases {
        let (ok, text) = check(&auth);
        assert!(!ok, "{auth}");
        // The body is on line 11, after `    jwt: `.
        let column = 9 + auth.find(needle).unwrap() + 1;
        let line = format!("{}:11:{column}: {message}", path.display());
        assert!(text.contains(&line), "{auth}: no `{line}` in {text}");
    }
    let (ok, text) = check(&format!("{{ keys: [{secret}] }}"));
    assert!(ok, "{text}");
}

/// The keys of `jwks_file` are read again on reload: after the file is rotated to a new key
/// under the same kid and weir reloads, a token of the old key is refused and one of the new
/// key passes (the middleware is not carried over as unchanged); a file broken meanwhile
/// refuses the reload and the key in use stays.
#[test]
fn a_rotated_jwks_file_is_read_on_reload() {
    let (old_keys, new_keys) = (temp_dir("jwt-rotate-old"), temp_dir("jwt-rotate-new"));
    let spec = json!([{"key": "ec256", "alg": "ES256", "headers": {"kid": "ec256"}, "claims": {"sub": "x"}}]);
    let old_token = pyjwt(&old_keys, &spec).remove(0);
    let new_token = pyjwt(&new_keys, &spec).remove(0);
    let up = Upstream::start("app");
    let served = temp_dir("jwt-rotate-served");
    let jwks = served.join("jwks.json");
    // Only the EC key of each set, so the key is all that changes (its kid stays `ec256`).
    let serve = |from: &std::path::Path| {
        let set: Value =
            serde_json::from_str(&std::fs::read_to_string(from.join("jwks.json")).unwrap())
                .unwrap();
        let ec: Vec<&Value> = set["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["kid"] == "ec256")
            .collect();
        std::fs::write(&jwks, json!({ "keys": ec }).to_string()).unwrap();
    };
    serve(&old_keys);
    let weir = start_with_jwks(&up, &served, "");
    assert_eq!(get_with(&weir, "/x", &bearer(&old_token)).status, 200);
    assert_invalid(
        &get_with(&weir, "/x", &bearer(&new_token)),
        "the token's signature does not verify",
    );
    std::fs::write(&jwks, "{\"keys\": [").unwrap();
    // The ready line comes once SIGHUP is handled (before, it would end the process).
    weir.wait_for_line("worker(s) running", 1);
    weir.signal("HUP");
    weir.wait_for_line(": reload (SIGHUP) refused", 1);
    assert_eq!(get_with(&weir, "/x", &bearer(&old_token)).status, 200);
    serve(&new_keys);
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    assert_eq!(get_with(&weir, "/x", &bearer(&new_token)).status, 200);
    assert_invalid(
        &get_with(&weir, "/x", &bearer(&old_token)),
        "the token's signature does not verify",
    );
}

/// The EC key of the set PyJWT wrote in `folder`, with kid `kid`.
fn ec_jwk(folder: &std::path::Path, kid: &str) -> Value {
    let set: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("jwks.json")).unwrap()).unwrap();
    let mut key = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == "ec256")
        .unwrap()
        .clone();
    key["kid"] = json!(kid);
    key
}

/// An ES256 token of the EC key PyJWT made in `folder`, naming `kid`.
fn es256_token(folder: &std::path::Path, kid: &str) -> String {
    let spec =
        json!([{"key": "ec256", "alg": "ES256", "headers": {"kid": kid}, "claims": {"sub": "x"}}]);
    pyjwt(folder, &spec).remove(0)
}

/// What a [`JwksServer`] answers: its body and `Cache-Control` (none when empty).
type Served = std::sync::Arc<std::sync::Mutex<(String, String)>>;

/// A JWKS server over HTTP/1.1 answering every request with what `served` holds at the time;
/// its log counts the requests.
fn jwks_server(served: &Served) -> RawUpstream {
    let served = served.clone();
    RawUpstream::start(move |conn| {
        while conn.read_head().is_some() {
            let (body, cache_control) = served.lock().unwrap().clone();
            let mut headers = vec![("content-type", "application/json")];
            if !cache_control.is_empty() {
                headers.push(("cache-control", cache_control.as_str()));
            }
            conn.write(http_answer(200, &headers, &body).as_bytes());
        }
    })
}

fn serving(keys: &[Value], cache_control: &str) -> (String, String) {
    (
        json!({ "keys": keys }).to_string(),
        cache_control.to_string(),
    )
}

/// A `jwks_url` set is fetched by the first request, used while fresh, and fetched again for
/// a token of unknown kid (a rotated key then passes), never more often than once per 5 s
/// however many such tokens come.
#[test]
fn a_jwks_url_is_fetched_and_fetched_again_for_a_new_kid() {
    let (first, next) = (temp_dir("jwt-url-first"), temp_dir("jwt-url-next"));
    let old_token = es256_token(&first, "k1");
    let new_token = es256_token(&next, "k2");
    let unknown = es256_token(&next, "nobody");
    let served: Served = Default::default();
    *served.lock().unwrap() = serving(&[ec_jwk(&first, "k1")], "max-age=300");
    let jwks = jwks_server(&served);
    let up = Upstream::start("app");
    let weir = Weir::start(&jwt_config(
        &up,
        &format!("{{ jwks_url: \"{}/keys?v=1\" }}", jwks.url()),
    ));
    let fetched_at = std::time::Instant::now();
    assert_eq!(get_with(&weir, "/x", &bearer(&old_token)).status, 200);
    assert_eq!(jwks.log(), ["GET /keys?v=1 HTTP/1.1"]);
    assert_eq!(get_with(&weir, "/x", &bearer(&old_token)).status, 200);
    // The key rotates: within 5 s of the last fetch the new kid is not fetched for.
    *served.lock().unwrap() = serving(&[ec_jwk(&next, "k2")], "max-age=300");
    assert_invalid(
        &get_with(&weir, "/x", &bearer(&new_token)),
        "no key has the token's kid and algorithm",
    );
    assert_eq!(jwks.count("GET"), 1);
    std::thread::sleep(Duration::from_millis(5200).saturating_sub(fetched_at.elapsed()));
    assert_eq!(get_with(&weir, "/x", &bearer(&new_token)).status, 200);
    assert_eq!(jwks.count("GET"), 2);
    let refetched_at = std::time::Instant::now();
    // The old key left the set: its token is verified again, and refused.
    assert_invalid(
        &get_with(&weir, "/x", &bearer(&old_token)),
        "no key has the token's kid and algorithm",
    );
    for _ in 0..5 {
        assert_invalid(
            &get_with(&weir, "/x", &bearer(&unknown)),
            "no key has the token's kid and algorithm",
        );
    }
    // (A loaded machine may have taken 5 s over these: then one more fetch is right.)
    let spaced = refetched_at.elapsed() >= Duration::from_secs(5);
    assert_eq!(jwks.count("GET"), if spaced { 3 } else { 2 });
    std::thread::sleep(Duration::from_millis(5200).saturating_sub(refetched_at.elapsed()));
    for _ in 0..5 {
        assert_eq!(get_with(&weir, "/x", &bearer(&unknown)).status, 401);
    }
    assert!(jwks.count("GET") <= 4, "{:?}", jwks.log());
    assert!(jwks.count("GET") >= 3, "{:?}", jwks.log());
}

/// Requests arriving together on both workers while no set is held share one fetch: the JWKS
/// server, slow to answer, sees one request, and all of them pass once it has.
#[test]
fn concurrent_requests_share_one_jwks_fetch() {
    let dir = temp_dir("jwt-url-together");
    let token = es256_token(&dir, "k1");
    let body = json!({ "keys": [ec_jwk(&dir, "k1")] }).to_string();
    let jwks = RawUpstream::start(move |conn| {
        while conn.read_head().is_some() {
            std::thread::sleep(Duration::from_millis(300));
            conn.write(http_answer(200, &[], &body).as_bytes());
        }
    });
    let up = Upstream::start("app");
    let weir = Weir::start(&jwt_config(
        &up,
        &format!("{{ jwks_url: \"{}/jwks\" }}", jwks.url()),
    ));
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let asking: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| get_with(&weir, "/x", &bearer(&token)).status))
            .collect();
        asking.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(statuses, [200; 8]);
    assert_eq!(jwks.count("GET"), 1, "{:?}", jwks.log());
}

/// A reload that points `jwks_url` elsewhere builds the middleware afresh: the new server's set
/// is fetched by the next request, and the old server's keys are gone.
#[test]
fn a_reload_to_another_jwks_url_starts_afresh() {
    let (first, next) = (temp_dir("jwt-url-reload-a"), temp_dir("jwt-url-reload-b"));
    let (old_token, new_token) = (es256_token(&first, "k1"), es256_token(&next, "k2"));
    let (a, b): (Served, Served) = Default::default();
    *a.lock().unwrap() = serving(&[ec_jwk(&first, "k1")], "");
    *b.lock().unwrap() = serving(&[ec_jwk(&next, "k2")], "");
    let (server_a, server_b) = (jwks_server(&a), jwks_server(&b));
    let up = Upstream::start("app");
    let config = |server: &RawUpstream| {
        jwt_config(&up, &format!("{{ jwks_url: \"{}/jwks\" }}", server.url()))
    };
    let weir = Weir::start(&config(&server_a));
    assert_eq!(get_with(&weir, "/x", &bearer(&old_token)).status, 200);
    weir.wait_for_line("worker(s) running", 1);
    std::fs::write(weir.config_path(), config(&server_b)).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    assert_eq!(get_with(&weir, "/x", &bearer(&new_token)).status, 200);
    assert_invalid(
        &get_with(&weir, "/x", &bearer(&old_token)),
        "no key has the token's kid and algorithm",
    );
    assert_eq!((server_a.count("GET"), server_b.count("GET")), (1, 1));
}

/// An `https://` JWKS server (Debian's nginx) verified against `tls.ca`; one whose certificate
/// is not trusted cannot be asked: no key, 401.
#[test]
fn an_https_jwks_url_is_verified_with_tls() {
    let dir = temp_dir("jwt-url-tls");
    let token = es256_token(&dir, "k1");
    let cert = make_cert(&dir, "idp", &["127.0.0.1"], false);
    let set = json!({ "keys": [ec_jwk(&dir, "k1")] });
    let location = format!("default_type application/json;\n    return 200 '{set}';");
    let nginx = Nginx::start_tls_location(&cert.cert, &cert.key, &location);
    let up = Upstream::start("app");
    let url = format!("https://{}/jwks.json", nginx.addr);
    let ca = cert.cert.display();
    let trusting = Weir::start(&jwt_config(
        &up,
        &format!("{{ jwks_url: \"{url}\", tls: {{ ca: \"{ca}\" }} }}"),
    ));
    assert_eq!(get_with(&trusting, "/x", &bearer(&token)).status, 200);
    let untrusting = Weir::start(&jwt_config(&up, &format!("{{ jwks_url: \"{url}\" }}")));
    assert_eq!(get_with(&untrusting, "/x", &bearer(&token)).status, 401);
    let line = untrusting.wait_for_line(": jwt: jwks_url", 1);
    assert!(line.contains(&url), "{line}");
}

/// A JWKS server that refuses connections or does not answer: the request is judged on the
/// keys held within about the 1 s timeout (401 with none, a `keys` key still counts), and the
/// failure is one error-log line, not one per request.
#[test]
fn a_jwks_server_down_or_silent_costs_a_request_one_second_at_most() {
    let dir = temp_dir("jwt-url-down");
    let token = es256_token(&dir, "k1");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let silent = RawUpstream::start(|conn| {
        if conn.read_head().is_some() {
            std::thread::sleep(Duration::from_secs(10));
        }
    });
    let up = Upstream::start("app");
    let inline = ec_jwk(&dir, "k1");
    for (url, keys, status) in [
        (closed_url.clone(), String::new(), 401),
        (silent.url(), String::new(), 401),
        (silent.url(), format!(", keys: [{inline}]"), 200),
    ] {
        let weir = Weir::start(&jwt_config(
            &up,
            &format!("{{ jwks_url: \"{url}/jwks.json\"{keys} }}"),
        ));
        for _ in 0..3 {
            let started = std::time::Instant::now();
            let resp = get_with(&weir, "/x", &bearer(&token));
            assert_eq!(resp.status, status, "{url}{keys}: {}", resp.text());
            assert!(started.elapsed() < Duration::from_secs(3), "{url}{keys}");
        }
        let line = weir.wait_for_line(": jwt: jwks_url", 1);
        assert!(line.contains(&url), "{line}");
        std::thread::sleep(Duration::from_millis(200));
        let lines = weir.stderr();
        let logged = lines
            .iter()
            .filter(|l| l.contains(": jwt: jwks_url"))
            .count();
        assert_eq!(logged, 1, "{lines:#?}");
    }
}

/// A set is fetched again once its `Cache-Control: max-age` has passed (kept 5 minutes
/// without one); an answer that is not a JWK Set keeps the keys held.
#[test]
fn a_jwks_url_set_is_fetched_again_after_its_max_age() {
    let dir = temp_dir("jwt-url-max-age");
    let token = es256_token(&dir, "k1");
    let up = Upstream::start("app");
    let (short, plain): (Served, Served) = Default::default();
    *short.lock().unwrap() = serving(&[ec_jwk(&dir, "k1")], "public, max-age=1");
    *plain.lock().unwrap() = serving(&[ec_jwk(&dir, "k1")], "");
    let (short_server, plain_server) = (jwks_server(&short), jwks_server(&plain));
    let start = |server: &RawUpstream| {
        let url = server.url();
        Weir::start(&jwt_config(&up, &format!("{{ jwks_url: \"{url}/\" }}")))
    };
    let (short_weir, plain_weir) = (start(&short_server), start(&plain_server));
    let fetched_at = std::time::Instant::now();
    for weir in [&short_weir, &plain_weir] {
        assert_eq!(get_with(weir, "/x", &bearer(&token)).status, 200);
    }
    short.lock().unwrap().0 = "{\"keys\": [".into();
    // Past the max-age, but within 5 s of the last fetch: none.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(get_with(&short_weir, "/x", &bearer(&token)).status, 200);
    assert_eq!(short_server.count("GET"), 1);
    std::thread::sleep(Duration::from_millis(5300).saturating_sub(fetched_at.elapsed()));
    for weir in [&short_weir, &plain_weir] {
        assert_eq!(get_with(weir, "/x", &bearer(&token)).status, 200);
    }
    assert_eq!(short_server.count("GET"), 2);
    assert_eq!(plain_server.count("GET"), 1);
    let line = short_weir.wait_for_line(": jwt: jwks_url", 1);
    assert!(line.contains("is not JSON"), "{line}");
}
