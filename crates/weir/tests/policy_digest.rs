//! End-to-end `digest_auth`: users files written by Debian's `htdigest`, real `curl --digest`
//! over HTTP/1.1 and HTTP/2, the challenge and its nonces (replayed, out of order, forged,
//! shared by the workers, kept over a reload), the user's name sent upstream, `Authorization`
//! removed, the gRPC form of the refusal, and `weir check` on bad users. Cases ported from
//! Traefik's `pkg/middlewares/auth/digest_auth_test.go` (with its client,
//! `digest_auth_request_test.go`) and go-http-auth's `digest_test.go` say which test they come
//! from.

mod common;
use common::*;
use md5::{Digest, Md5};
use std::process::{Command, Stdio};

/// Traefik's test user `test`, realm `traefik`, password `test`.
const TRAEFIK_TEST: &str = "test:traefik:a2688e031edb4be6a3797f3882655c05";

/// `htdigest FILE REALM USER`, creating the file when it does not exist, with the password
/// typed on its standard input (twice, as it asks).
fn htdigest(file: &std::path::Path, realm: &str, user: &str, password: &str) {
    let mut command = Command::new("htdigest");
    if !file.exists() {
        command.arg("-c");
    }
    let mut child = command
        .arg(file)
        .args([realm, user])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("htdigest (Debian's apache2-utils) is installed");
    use std::io::Write;
    let typed = format!("{password}\n{password}\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(typed.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "htdigest failed");
}

/// The test bed with `auth`, the `digest_auth` body given, on every path but `/open`.
fn auth_config(upstream: &Upstream, auth: &str) -> String {
    guarded_config(upstream, "auth", "digest_auth", auth)
}

/// A config with Traefik's test user alone, and `more` settings (`, key: value`).
fn test_user_config(upstream: &Upstream, more: &str) -> String {
    auth_config(
        upstream,
        &format!("{{ users: [\"{TRAEFIK_TEST}\"]{more} }}"),
    )
}

fn md5_hex(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The parameters of a `WWW-Authenticate: Digest` challenge.
#[derive(Debug, Clone)]
struct Challenge {
    realm: String,
    nonce: String,
    opaque: String,
    stale: bool,
}

/// The challenge of a refusal, which must be go-http-auth's: 401, `401 Unauthorized`, and
/// `Digest realm, nonce, opaque, [stale,] algorithm=MD5, qop="auth"` in that order.
fn challenge_of(resp: &Resp) -> Challenge {
    assert_eq!(resp.status, 401, "{}", resp.text());
    assert_eq!(resp.text(), "401 Unauthorized\n");
    let value = resp.header("www-authenticate").expect("a challenge");
    let rest = value.strip_prefix("Digest ").expect(value);
    let pairs: Vec<(&str, &str)> = rest
        .split(", ")
        .map(|pair| pair.split_once('=').expect(value))
        .collect();
    let names: Vec<&str> = pairs.iter().map(|(n, _)| *n).collect();
    let stale = names.contains(&"stale");
    let expected: &[&str] = if stale {
        &["realm", "nonce", "opaque", "stale", "algorithm", "qop"]
    } else {
        &["realm", "nonce", "opaque", "algorithm", "qop"]
    };
    assert_eq!(names, expected, "{value}");
    let get = |name: &str| pairs.iter().find(|(n, _)| *n == name).unwrap().1;
    assert_eq!(get("algorithm"), "MD5", "{value}");
    assert_eq!(get("qop"), "\"auth\"", "{value}");
    if stale {
        assert_eq!(get("stale"), "true", "{value}");
    }
    let quoted = |name: &str| {
        let v = get(name);
        v.strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{name} unquoted in {value}"))
            .to_string()
    };
    Challenge {
        realm: quoted("realm"),
        nonce: quoted("nonce"),
        opaque: quoted("opaque"),
        stale,
    }
}

/// An `Authorization: Digest` value as Traefik's test client (`digestRequest`) makes it, for
/// `method` on `uri` with count `nc`.
fn authorization(
    (user, password): (&str, &str),
    ch: &Challenge,
    method: &str,
    uri: &str,
    nc: u32,
) -> String {
    let ha1 = md5_hex(&format!("{user}:{}:{password}", ch.realm));
    digest_with_ha1(user, &ha1, ch, method, uri, nc)
}

fn digest_with_ha1(
    user: &str,
    ha1: &str,
    ch: &Challenge,
    method: &str,
    uri: &str,
    nc: u32,
) -> String {
    let ha2 = md5_hex(&format!("{method}:{uri}"));
    let nc = format!("{nc:08x}");
    let cnonce = "0a4f113b";
    let response = md5_hex(&format!("{ha1}:{}:{nc}:{cnonce}:auth:{ha2}", ch.nonce));
    format!(
        "Digest username=\"{user}\", realm=\"{}\", nonce=\"{}\", uri=\"{uri}\", algorithm=MD5, qop=auth, nc={nc}, cnonce=\"{cnonce}\", response=\"{response}\", opaque=\"{}\"",
        ch.realm, ch.nonce, ch.opaque
    )
}

/// `method target` with `authorization` (none for `None`) and more header lines, on a
/// connection of its own.
fn send(weir: &Weir, method: &str, target: &str, authorization: Option<&str>, extra: &str) -> Resp {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    request(
        weir.addr(),
        &format!("{method} {target} HTTP/1.1\r\nHost: t\r\n{auth}{extra}Connection: close\r\n\r\n"),
    )
}

/// A fresh challenge from `weir`, for a request without credentials.
fn fresh_challenge(weir: &Weir) -> Challenge {
    challenge_of(&send(weir, "GET", "/x", None, ""))
}

/// Traefik's `digestRequest.Do`: asks once without credentials, then sends `target` with
/// the digest over the challenge's nonce (nc 1), its `uri` the whole URL as Go's client
/// writes `req.URL.String()`.
fn traefik_client_get(weir: &Weir, credentials: (&str, &str), extra: &str) -> Resp {
    let ch = fresh_challenge(weir);
    let uri = format!("http://{}", weir.addr());
    let auth = authorization(credentials, &ch, "GET", &uri, 1);
    send(weir, "GET", "/", Some(&auth), extra)
}

/// `curl --digest -u USER:PASSWORD` on `urls` (one connection, in turn) with `args`: the
/// status lines of every response, the 401s curl answered included, and what the last body
/// was.
fn curl_digest(
    user: &str,
    password: &str,
    args: &[&str],
    urls: &[String],
) -> (Vec<String>, String) {
    let dir = temp_dir("digest-curl");
    let body = dir.join("body");
    let credentials = format!("{user}:{password}");
    let mut all = vec!["--digest", "-u", &credentials, "-D", "-"];
    all.extend_from_slice(args);
    let body_path = body.to_str().unwrap().to_string();
    let mut outputs = Vec::new();
    for url in urls {
        outputs.push("-o".to_string());
        outputs.push(body_path.clone());
        outputs.push(url.clone());
    }
    all.extend(outputs.iter().map(String::as_str));
    let heads = String::from_utf8_lossy(&curl_ok(&all)).into_owned();
    let statuses = heads
        .lines()
        .filter(|l| l.starts_with("HTTP/"))
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    (statuses, std::fs::read_to_string(&body).unwrap_or_default())
}

/// Users written by `htdigest`, checked by a real `curl --digest` over HTTP/1.1 and HTTP/2
/// (over TLS: curl 7.88 fails a second request on an h2c prior-knowledge connection, nginx's
/// too, and `--digest` always sends one): the right password goes through after one 401; a
/// wrong one, a user of another realm and an unknown name do not; two URLs on one kept-alive
/// connection each go through.
#[test]
fn htdigest_users_and_curl_over_h1_and_h2() {
    let dir = temp_dir("digest-htdigest");
    let users = dir.join("users");
    htdigest(&users, "traefik", "alice", "alice pw");
    htdigest(&users, "traefik", "bob", "b:o:b");
    htdigest(&users, "elsewhere", "carol", "carol pw");
    let text = std::fs::read_to_string(&users).unwrap();
    assert!(
        text.contains(&format!(
            "alice:traefik:{}",
            md5_hex("alice:traefik:alice pw")
        )),
        "{text}"
    );
    let cert = make_cert(&dir, "site", &["digest.test"], false);
    let up = Upstream::start("app");
    let config = auth_config(
        &up,
        &format!("{{ users_file: \"{}\" }}", users.display()),
    )
    .replace(
        "entrypoints:\n",
        &format!(
            "entrypoints:\n  secure: {{ address: \"127.0.0.1:0\", tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }} }}\n",
            cert.cert.display(),
            cert.key.display()
        ),
    );
    let weir = Weir::start(&config);
    let port = weir.addrs["secure"].port();
    let resolve = format!("digest.test:{port}:127.0.0.1");
    let ca = cert.cert.to_str().unwrap();
    let h1 = (
        vec!["--http1.1"],
        format!("http://{}", weir.addr()),
        "HTTP/1.1",
    );
    let h2 = (
        vec!["--http2", "--cacert", ca, "--resolve", &resolve],
        format!("https://digest.test:{port}"),
        "HTTP/2",
    );
    for (protocol, base, version) in [h1, h2] {
        let url = format!("{base}/x");
        for (user, password) in [("alice", "alice pw"), ("bob", "b:o:b")] {
            let (statuses, body) =
                curl_digest(user, password, &protocol, std::slice::from_ref(&url));
            assert_eq!(
                statuses,
                vec![format!("{version} 401"), format!("{version} 200")],
                "{user} over {version}"
            );
            assert!(body.contains("\"name\":\"app\""), "{body}");
        }
        for (user, password) in [("alice", "wrong"), ("carol", "carol pw"), ("nobody", "x")] {
            let (statuses, body) =
                curl_digest(user, password, &protocol, std::slice::from_ref(&url));
            assert_eq!(
                statuses.last().map(String::as_str),
                Some(format!("{version} 401").as_str()),
                "{user} over {version}: {statuses:?}"
            );
            assert_eq!(body, "401 Unauthorized\n");
        }
        // Two URLs on one connection: curl 7.88 asks each without credentials first, then
        // with a digest over the nonce of its own challenge.
        let two = [url.clone(), format!("{base}/y")];
        let (statuses, _) = curl_digest("alice", "alice pw", &protocol, &two);
        let round = [format!("{version} 401"), format!("{version} 200")];
        assert_eq!(statuses, [round.clone(), round].concat(), "over {version}");
    }
    // A route without the middleware asks for nothing.
    assert_eq!(get(weir.addr(), "t", "/open").status, 200);
}

/// TestDigestAuthUsersFromFile, each case, with Traefik's client (its `uri` the whole URL,
/// without a path): users found in the file, merged with `users`, `users` winning over the
/// file for the same name, the user of the configured realm chosen among two of one name;
/// `foo:foo` refused each time, without the upstream's body.
#[test]
fn users_file_cases_from_traefik() {
    let file_two = "test:traefik:a2688e031edb4be6a3797f3882655c05\ntest2:traefik:518845800f9e2bfb1f1f740ec24f074e\n";
    let cases: [UsersFileCase; 4] = [
        (
            "Finds the users in the file",
            file_two,
            "[]",
            &[("test", "test"), ("test2", "test2")],
            "",
        ),
        (
            "Merges given users with users from the file",
            "test:traefik:a2688e031edb4be6a3797f3882655c05\n",
            "[\"test2:traefik:518845800f9e2bfb1f1f740ec24f074e\", \"test3:traefik:c8e9f57ce58ecb4424407f665a91646c\"]",
            &[("test", "test"), ("test2", "test2"), ("test3", "test3")],
            "",
        ),
        (
            "Given users have priority over users in the file",
            file_two,
            "[\"test2:traefik:8de60a1c52da68ccf41f0c0ffb7c51a0\"]",
            &[("test", "test"), ("test2", "overridden")],
            "",
        ),
        (
            "Should authenticate the correct user based on the realm",
            "test:traefik:a2688e031edb4be6a3797f3882655c05\ntest:traefiker:a3d334dff2645b914918de78bec50bf4\n",
            "[]",
            &[("test", "test2")],
            "traefiker",
        ),
    ];
    let up = Upstream::start("traefik");
    for (desc, file, given, expected, realm) in cases {
        let weir = Weir::start(&auth_config(&up, &users_file_settings(file, given, realm)));
        for &credentials in expected {
            let resp = traefik_client_get(&weir, credentials, "");
            assert_eq!(
                resp.status, 200,
                "{desc}: cannot authenticate {credentials:?}"
            );
            assert_eq!(resp.json()["name"], "traefik", "{desc}");
        }
        let refused = traefik_client_get(&weir, ("foo", "foo"), "");
        let ch = challenge_of(&refused);
        let realm = if realm.is_empty() { "traefik" } else { realm };
        assert_eq!(ch.realm, realm, "{desc}");
        assert!(!refused.text().contains("traefik"), "{desc}");
    }
}

/// TestDigestAuthFail: Basic credentials of a digest user are refused with the challenge.
#[test]
fn basic_credentials_are_refused() {
    let up = Upstream::start("app");
    let weir = Weir::start(&test_user_config(&up, ""));
    let resp = send(&weir, "GET", "/", Some("Basic dGVzdDp0ZXN0"), "");
    let ch = challenge_of(&resp);
    assert_eq!(ch.realm, "traefik");
    assert!(!ch.stale);
}

/// TestDigestAuthUserHeaderCanonical: the user's name goes upstream in `header_field`, spelled
/// as configured, replacing what the client sent under that name in any case; with
/// `remove_header`, `Authorization` does not go upstream (it does without).
#[test]
fn the_user_goes_upstream_and_authorization_stays_unless_removed() {
    let up = Upstream::start("app");
    let weir = Weir::start(&test_user_config(&up, ", header_field: x-user"));
    let j = traefik_client_get(&weir, ("test", "test"), "X-User: admin\r\n").json();
    let x_user: Vec<(&str, &str)> = j["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h[0].as_str().unwrap(), h[1].as_str().unwrap()))
        .filter(|(name, _)| name.eq_ignore_ascii_case("x-user"))
        .collect();
    assert_eq!(x_user, vec![("x-user", "test")], "{j}");
    let sent = echoed_header(&j, "authorization").expect("Authorization kept");
    assert!(sent.starts_with("Digest username=\"test\""), "{sent}");

    let weir = Weir::start(&test_user_config(
        &up,
        ", header_field: X-Webauth-User, remove_header: true",
    ));
    let j = traefik_client_get(&weir, ("test", "test"), "").json();
    assert_eq!(echoed_header(&j, "x-webauth-user").as_deref(), Some("test"));
    assert_eq!(echoed_header(&j, "authorization"), None, "{j}");
}

/// The nonce's life, each request on a connection of its own (so on either worker): a nonce
/// works on any connection with a growing count; the same count again is a replay (a plain
/// 401), a lower one is out of order (401 with `stale=true`, a right digest over an old
/// nonce); a nonce weir did not sign, another instance's, a wrong opaque, another qop or
/// algorithm are refused.
#[test]
fn nonces_are_counted_and_checked_on_every_worker() {
    let up = Upstream::start("app");
    let config = test_user_config(&up, "");
    let weir = Weir::start(&config);
    let other = Weir::start(&config);
    let me = ("test", "test");
    let ch = fresh_challenge(&weir);
    assert!(!ch.stale);
    assert_ne!(
        ch.nonce,
        fresh_challenge(&weir).nonce,
        "each challenge has its own nonce"
    );
    let at = |nc: u32| authorization(me, &ch, "GET", "/x", nc);
    for nc in [1, 2, 5] {
        let resp = send(&weir, "GET", "/x", Some(&at(nc)), "");
        assert_eq!(resp.status, 200, "nc {nc}: {}", resp.text());
    }
    let replay = send(&weir, "GET", "/x", Some(&at(5)), "");
    assert!(!challenge_of(&replay).stale, "a replay is refused outright");
    let late = send(&weir, "GET", "/x", Some(&at(3)), "");
    let renewed = challenge_of(&late);
    assert!(renewed.stale, "an out-of-order count is stale");
    assert_ne!(renewed.nonce, ch.nonce);
    assert_eq!(renewed.opaque, ch.opaque);
    let next = authorization(me, &renewed, "GET", "/x", 1);
    assert_eq!(send(&weir, "GET", "/x", Some(&next), "").status, 200);

    // Not weir's nonces, or not its terms.
    let theirs = fresh_challenge(&other);
    // One character of the signature changed (never the last: part of it is padding).
    let swapped = if ch.nonce.as_bytes()[30] == b'A' {
        "B"
    } else {
        "A"
    };
    let forged = Challenge {
        nonce: format!("{}{swapped}{}", &ch.nonce[..30], &ch.nonce[31..]),
        ..ch.clone()
    };
    let wrong_opaque = Challenge {
        opaque: "U7H+ier3Ae8Skd/g".into(),
        ..ch.clone()
    };
    for (what, ch) in [
        (
            "another instance's nonce",
            Challenge {
                opaque: ch.opaque.clone(),
                ..theirs
            },
        ),
        ("a forged nonce", forged),
        ("another opaque", wrong_opaque),
    ] {
        let auth = authorization(me, &ch, "GET", "/x", 9);
        let resp = send(&weir, "GET", "/x", Some(&auth), "");
        assert!(!challenge_of(&resp).stale, "{what}");
    }
    let fresh = fresh_challenge(&weir);
    let good = authorization(me, &fresh, "GET", "/x", 1);
    for (what, auth) in [
        ("qop auth-int", good.replace("qop=auth", "qop=auth-int")),
        (
            "MD5-sess",
            good.replace("algorithm=MD5", "algorithm=MD5-sess"),
        ),
        ("no qop", good.replace("qop=auth, ", "")),
        ("a response in capitals", {
            let at = good.find("response=\"").unwrap() + 10;
            let end = at + 32;
            format!(
                "{}{}{}",
                &good[..at],
                good[at..end].to_uppercase(),
                &good[end..]
            )
        }),
    ] {
        let resp = send(&weir, "GET", "/x", Some(&auth), "");
        assert_eq!(resp.status, 401, "{what}");
    }
    // Without `algorithm`, MD5 is meant (go-http-auth's allowance for such clients).
    let no_algorithm = good.replace("algorithm=MD5, ", "");
    assert_eq!(
        send(&weir, "GET", "/x", Some(&no_algorithm), "").status,
        200
    );
}

/// go-http-auth's TestAuthDigest, on the `uri` a digest names: the request target, or a
/// path the request's path starts with (a digest for `/` lets `/t3` through); a longer or
/// another path is refused. The method is part of the digest.
#[test]
fn the_digest_names_the_request() {
    let up = Upstream::start("app");
    let weir = Weir::start(&test_user_config(&up, ""));
    let me = ("test", "test");
    let ch = fresh_challenge(&weir);
    let mut nc = 0;
    let mut try_as = |method: &str, digest_uri: &str, target: &str| {
        nc += 1;
        let auth = authorization(me, &ch, method, digest_uri, nc);
        send(&weir, method, target, Some(&auth), "").status
    };
    assert_eq!(try_as("GET", "/t2?a=1", "/t2?a=1"), 200);
    assert_eq!(try_as("GET", "/t2", "/"), 401, "bad request path");
    assert_eq!(try_as("GET", "/t2", "/t3"), 401, "bad request path");
    assert_eq!(try_as("GET", "/", "/t3"), 200, "valid request in subpath");
    assert_eq!(
        try_as("GET", "/t%33", "/t3/x"),
        200,
        "paths compared decoded"
    );
    assert_eq!(try_as("HEAD", "/t2", "/t2"), 200);
    let auth = authorization(me, &ch, "GET", "/t2", 100);
    assert_eq!(
        send(&weir, "POST", "/t2", Some(&auth), "Content-Length: 0\r\n").status,
        401
    );
}

/// What go-http-auth lets through and weir does not: a digest computed over an empty HA1,
/// which go-http-auth checks an unknown name (or a user of another realm) against, so anyone
/// could compute it without a password.
#[test]
fn an_unknown_name_never_passes() {
    let up = Upstream::start("app");
    let weir = Weir::start(&auth_config(
        &up,
        &format!("{{ users: [\"{TRAEFIK_TEST}\", \"other:elsewhere:a2688e031edb4be6a3797f3882655c05\"] }}"),
    ));
    for user in ["nobody", "other"] {
        let ch = fresh_challenge(&weir);
        let auth = digest_with_ha1(user, "", &ch, "GET", "/x", 1);
        let resp = send(&weir, "GET", "/x", Some(&auth), "");
        assert!(!challenge_of(&resp).stale, "{user}");
        assert_eq!(up.request_count(), 0);
    }
}

/// TestDigestAuthError (`test`: no realm or hash) and what `weir check` refuses beside it: a
/// malformed users-file line and an unreadable file (at `users_file`'s place, with the file's
/// line), a hash that is not 32 hex digits, no user of the realm. A relative `users_file` is
/// read from the config file's folder.
#[test]
fn weir_check_refuses_bad_users() {
    let dir = temp_dir("digest-check");
    std::fs::write(dir.join("users"), format!("{TRAEFIK_TEST}\ntest:traefik\n")).unwrap();
    let up = Upstream::start("app");
    let path = dir.join("weir.yaml");
    let users = dir.join("users");
    let cases = [
        (
            "{ users: [test] }",
            vec!["11:28: a user must be `name:realm:hash`, as htdigest writes it".to_string()],
        ),
        (
            "{ users: [\"test:traefik:test\"] }",
            vec!["11:28: user `test`'s hash must be 32 hex digits".to_string()],
        ),
        (
            "{ users_file: users }",
            vec![format!(
                "11:32: users file `{}` line 2: a user must be `name:realm:hash`",
                users.display()
            )],
        ),
        (
            "{ users_file: missing }",
            vec!["11:32: cannot read users file".to_string()],
        ),
        (
            &format!("{{ users: [\"{TRAEFIK_TEST}\"], realm: other }}"),
            vec!["11:18: `digest_auth` needs at least one user of realm `other`".to_string()],
        ),
    ];
    assert_check_refuses_at(&path, |auth| auth_config(&up, auth), &cases);
    std::fs::write(&users, format!("{TRAEFIK_TEST}\n")).unwrap();
    let (ok, text) = check_config(&path, &auth_config(&up, "{ users_file: users }"));
    assert!(ok, "{text}");
}

/// A reload keeps the nonces of an unchanged `digest_auth` (another router changed): a
/// client goes on counting on its nonce. A changed one starts afresh, with a new key and a new
/// `opaque`, as go-http-auth's authenticator is made again in Traefik: the client's digest is
/// then answered with a new challenge.
#[test]
fn a_reload_keeps_the_nonces_of_an_unchanged_middleware() {
    let up = Upstream::start("app");
    let config = test_user_config(&up, "");
    let weir = Weir::start(&config);
    let me = ("test", "test");
    let ch = fresh_challenge(&weir);
    let at = |nc: u32| authorization(me, &ch, "GET", "/x", nc);
    assert_eq!(send(&weir, "GET", "/x", Some(&at(1)), "").status, 200);
    let other_router_changed = config.replace("PathPrefix(`/open`)", "PathPrefix(`/opened`)");
    std::fs::write(weir.config_path(), &other_router_changed).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    assert_eq!(send(&weir, "GET", "/x", Some(&at(2)), "").status, 200);
    let users_changed = other_router_changed.replace(
        &format!("[\"{TRAEFIK_TEST}\"]"),
        &format!("[\"{TRAEFIK_TEST}\", \"other:traefik:a2688e031edb4be6a3797f3882655c05\"]"),
    );
    assert_ne!(users_changed, other_router_changed);
    std::fs::write(weir.config_path(), users_changed).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 2);
    let renewed = challenge_of(&send(&weir, "GET", "/x", Some(&at(3)), ""));
    assert_ne!(renewed.opaque, ch.opaque, "a new middleware, a new opaque");
    let next = authorization(me, &renewed, "GET", "/x", 1);
    assert_eq!(send(&weir, "GET", "/x", Some(&next), "").status, 200);
}

/// A gRPC call refused by `digest_auth` gets the refusal in gRPC form (HTTP 200,
/// `grpc-status: 16` UNAUTHENTICATED) with the challenge beside it.
#[test]
fn a_grpc_call_is_refused_in_grpc_form() {
    let up = Upstream::start("app");
    let weir = Weir::start(&test_user_config(&up, ""));
    let url = format!("http://{}/weir.Echo/Unary", weir.addr());
    let head = curl_grpc_head(&["--http2-prior-knowledge"], &url);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_eq!(header_value(&head, "grpc-status"), Some("16"), "{head}");
    let challenge = header_value(&head, "www-authenticate").unwrap_or_default();
    assert!(
        challenge.starts_with("digest realm=\"traefik\", nonce=\""),
        "{head}"
    );
    assert_eq!(up.request_count(), 0);
}
