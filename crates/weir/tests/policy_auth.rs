//! End-to-end `basic_auth`: users files written by Debian's `htpasswd` (bcrypt, apr1, SHA-1),
//! the 401 and its challenge (plain and in gRPC form), the user's name sent upstream, the
//! `Authorization` header removed, verified credentials remembered on a keep-alive connection,
//! and `weir check` on bad users. Cases ported from Traefik's
//! `pkg/middlewares/auth/basic_auth_test.go` say which test they come from.

mod common;
use base64::Engine;
use common::*;
use std::process::Command;
use std::time::Instant;

/// Traefik's test hash for user `test`, password `test`.
const TRAEFIK_TEST: &str = "test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/";

/// `htpasswd -b FLAGS FILE USER PASSWORD`, creating the file when it does not exist.
fn htpasswd(file: &std::path::Path, flags: &[&str], user: &str, password: &str) {
    let create = if file.exists() { "-b" } else { "-cb" };
    let out = Command::new("htpasswd")
        .arg(create)
        .args(flags)
        .arg(file)
        .args([user, password])
        .output()
        .expect("htpasswd (Debian's apache2-utils) is installed");
    assert!(out.status.success(), "htpasswd: {out:?}");
}

/// The test bed with `auth`, the `basic_auth` body given, on every path but `/open`.
fn auth_config(upstream: &Upstream, auth: &str) -> String {
    guarded_config(upstream, "auth", "basic_auth", auth)
}

fn authorization(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// One request with `user`'s credentials (none for `None`) and more header lines.
fn get_as(weir: &Weir, credentials: Option<(&str, &str)>, extra: &str) -> Resp {
    let auth = credentials
        .map(|(u, p)| format!("Authorization: {}\r\n", authorization(u, p)))
        .unwrap_or_default();
    request(
        weir.addr(),
        &format!("GET /x HTTP/1.1\r\nHost: t\r\n{auth}{extra}Connection: close\r\n\r\n"),
    )
}

/// A refusal as Traefik's go-http-auth writes it: 401, `401 Unauthorized` and the challenge.
fn assert_refused(resp: &Resp, realm: &str) {
    assert_eq!(resp.status, 401, "{}", resp.text());
    assert_eq!(
        resp.header("www-authenticate"),
        Some(format!("Basic realm=\"{realm}\"").as_str())
    );
    assert_eq!(resp.text(), "401 Unauthorized\n");
}

/// Every hash `htpasswd` writes that Traefik verifies: bcrypt (`-B`), apr1 (`-m`, the default)
/// and SHA-1 (`-s`), from one users file. Also TestBasicAuthSuccess (Traefik's apr1 hash in
/// `users`) and the missing- and wrong-credential refusals.
#[test]
fn users_written_by_htpasswd_are_let_through() {
    let dir = temp_dir("auth-htpasswd");
    let users = dir.join("users");
    htpasswd(&users, &["-B", "-C", "5"], "bob", "bcrypt pw");
    htpasswd(&users, &["-m"], "alice", "apr1:pw");
    htpasswd(&users, &["-s"], "sam", "sha1 pw");
    let text = std::fs::read_to_string(&users).unwrap();
    assert!(text.contains("bob:$2y$05$"), "{text}");
    assert!(text.contains("alice:$apr1$"), "{text}");
    assert!(text.contains("sam:{SHA}"), "{text}");
    let up = Upstream::start("app");
    let weir = Weir::start(&auth_config(
        &up,
        &format!(
            "{{ users_file: \"{}\", users: [\"{TRAEFIK_TEST}\"] }}",
            users.display()
        ),
    ));
    for (user, password) in [
        ("bob", "bcrypt pw"),
        ("alice", "apr1:pw"),
        ("sam", "sha1 pw"),
        ("test", "test"),
    ] {
        let resp = get_as(&weir, Some((user, password)), "");
        assert_eq!(resp.status, 200, "{user}: {}", resp.text());
        assert_eq!(resp.json()["name"], "app");
        let wrong = get_as(&weir, Some((user, "wrong")), "");
        assert_refused(&wrong, "weir");
    }
    assert_refused(&get_as(&weir, None, ""), "weir");
    assert_refused(&get_as(&weir, Some(("nobody", "test")), ""), "weir");
    // Not Basic, or not base64: no credentials.
    assert_refused(
        &get_as(&weir, None, "Authorization: Bearer abc\r\n"),
        "weir",
    );
    assert_refused(&get_as(&weir, None, "Authorization: Basic !!\r\n"), "weir");
    // The scheme's name in any case, as Go reads it.
    let lower = authorization("test", "test").replace("Basic", "basic");
    let resp = get_as(&weir, None, &format!("Authorization: {lower}\r\n"));
    assert_eq!(resp.status, 200);
    // A route without the middleware asks for nothing.
    assert_eq!(get(weir.addr(), "t", "/open").status, 200);
}

/// One of TestBasicAuthUsersFromFile's cases: its name, the users file, `users`, the names
/// and passwords let through, the realm.
type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);

/// TestBasicAuthUsersFromFile, each case: users found in the file, merged with `users`,
/// `users` winning over the file for the same name, the realm in the challenge, comments
/// skipped; `foo:foo` refused each time, without the upstream's body.
#[test]
fn users_file_cases_from_traefik() {
    let file_two =
        "test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/\ntest2:$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0\n";
    let overridden = "\"test2:$apr1$mK.GtItK$ncnLYvNLek0weXdxo68690\"";
    let cases: [Case; 5] = [
        (
            "Finds the users in the file",
            file_two,
            "[]",
            &[("test", "test"), ("test2", "test2")],
            "",
        ),
        (
            "Merges given users with users from the file",
            "test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/\n",
            "[\"test2:$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0\", \"test3:$apr1$3rJbDP0q$RfzJiorTk78jQ1EcKqWso0\"]",
            &[("test", "test"), ("test2", "test2"), ("test3", "test3")],
            "",
        ),
        (
            "Given users have priority over users in the file",
            file_two,
            overridden,
            &[("test", "test"), ("test2", "overridden")],
            "",
        ),
        (
            "Should authenticate the correct user based on the realm",
            file_two,
            overridden,
            &[("test", "test"), ("test2", "overridden")],
            "traefik",
        ),
        (
            "Should skip comments",
            "#Comment\ntest:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/\ntest2:$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0\n",
            "[]",
            &[("test", "test"), ("test2", "test2")],
            "traefiker",
        ),
    ];
    let up = Upstream::start("traefik");
    for (desc, file, given, expected, realm) in cases {
        let dir = temp_dir("auth-file");
        let users = dir.join("auth-users");
        std::fs::write(&users, file).unwrap();
        let realm_key = if realm.is_empty() {
            String::new()
        } else {
            format!(", realm: \"{realm}\"")
        };
        let weir = Weir::start(&auth_config(
            &up,
            &format!(
                "{{ users_file: \"{}\", users: {given}{realm_key} }}",
                users.display()
            ),
        ));
        for &(user, password) in expected {
            let resp = get_as(&weir, Some((user, password)), "");
            assert_eq!(resp.status, 200, "{desc}: cannot authenticate {user}");
            assert_eq!(resp.json()["name"], "traefik", "{desc}");
        }
        let refused = get_as(&weir, Some(("foo", "foo")), "");
        let realm = if realm.is_empty() { "weir" } else { realm };
        assert_refused(&refused, realm);
        assert!(!refused.text().contains("traefik"), "{desc}");
        if given == overridden {
            // The file's hash for test2 is no longer the one checked.
            assert_refused(&get_as(&weir, Some(("test2", "test2")), ""), realm);
        }
    }
}

/// TestBasicAuthUserHeader and TestBasicAuthUserHeaderCanonical: the user's name goes upstream
/// in `header_field`, replacing what the client sent under that name in any case.
/// TestBasicAuthHeaderPresent and TestBasicAuthHeaderRemoved: `Authorization` goes upstream
/// unless `remove_header`.
#[test]
fn the_user_goes_upstream_and_authorization_stays_unless_removed() {
    let up = Upstream::start("app");
    let weir = Weir::start(&auth_config(
        &up,
        &format!("{{ users: [\"{TRAEFIK_TEST}\"], header_field: X-Webauth-User }}"),
    ));
    let j = get_as(&weir, Some(("test", "test")), "").json();
    assert_eq!(echoed_header(&j, "x-webauth-user").as_deref(), Some("test"));
    assert_eq!(
        echoed_header(&j, "authorization"),
        Some(authorization("test", "test"))
    );

    let weir = Weir::start(&auth_config(
        &up,
        &format!("{{ users: [\"{TRAEFIK_TEST}\"], header_field: x-user, remove_header: true }}"),
    ));
    let j = get_as(&weir, Some(("test", "test")), "X-User: admin\r\n").json();
    let x_user: Vec<&str> = j["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0].as_str().unwrap().eq_ignore_ascii_case("x-user"))
        .map(|h| h[1].as_str().unwrap())
        .collect();
    assert_eq!(x_user, vec!["test"], "{j}");
    assert_eq!(echoed_header(&j, "authorization"), None, "{j}");
}

/// TestBasicAuthConcurrentHashOnce, as weir does it: a bcrypt check is made once for a name
/// and password, then remembered, so a keep-alive client's next requests are not checked
/// again (Traefik shares one check between concurrent requests instead). A wrong password is
/// never remembered as good.
#[test]
fn a_verified_password_is_remembered_and_a_wrong_one_never() {
    let dir = temp_dir("auth-cost");
    let users = dir.join("users");
    // Cost 12: hundreds of milliseconds per check, far above a proxied request's time.
    htpasswd(&users, &["-B", "-C", "12"], "slow", "right");
    let up = Upstream::start("app");
    let weir = Weir::start(&auth_config(
        &up,
        &format!("{{ users_file: \"{}\" }}", users.display()),
    ));
    let mut conn = Conn::open(weir.addr());
    let mut send = |password: &str| {
        let started = Instant::now();
        conn.send(
            format!(
                "GET /x HTTP/1.1\r\nHost: t\r\nAuthorization: {}\r\n\r\n",
                authorization("slow", password)
            )
            .as_bytes(),
        );
        let resp = conn.read(false).expect("an answer");
        (resp.status, started.elapsed())
    };
    let (status, first) = send("right");
    assert_eq!(status, 200);
    let started = Instant::now();
    for _ in 0..10 {
        assert_eq!(send("right").0, 200);
    }
    let ten = started.elapsed();
    assert!(
        ten < first,
        "ten remembered requests took {ten:?}, one checked took {first:?}"
    );
    for _ in 0..2 {
        let (status, took) = send("wrong");
        assert_eq!(status, 401);
        assert!(took > first / 4, "a wrong password answered in {took:?}");
    }
    assert_eq!(send("right").0, 200);
}

/// A gRPC request refused by `basic_auth` gets the refusal in gRPC form (HTTP 200,
/// `grpc-status: 16` UNAUTHENTICATED) with the challenge beside it.
#[test]
fn a_grpc_request_is_refused_in_grpc_form() {
    let up = Upstream::start("app");
    let weir = Weir::start(&auth_config(
        &up,
        &format!("{{ users: [\"{TRAEFIK_TEST}\"], realm: grpc }}"),
    ));
    let url = format!("http://{}/weir.Echo/Unary", weir.addr());
    // No message: a body weir has not read when it answers early makes curl 7.88 fail the
    // stream (any early answer on HTTP/2 does it, not this middleware's alone).
    let head = h2_head(GRPC_CALL, &url);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(
        header_value(&head, "content-type"),
        Some("application/grpc")
    );
    assert_eq!(header_value(&head, "grpc-status"), Some("16"), "{head}");
    assert_eq!(
        header_value(&head, "www-authenticate"),
        Some("Basic realm=\"grpc\""),
        "{head}"
    );
    // HTTP/2 without gRPC: the plain 401.
    let head = h2_head(&[], &url);
    assert!(head.starts_with("HTTP/2 401"), "{head}");
    assert_eq!(
        header_value(&head, "www-authenticate"),
        Some("Basic realm=\"grpc\"")
    );
}

/// TestNewBasicEmpty and TestBasicAuthFail's refused configuration (`test`, no hash), and
/// what weir refuses where Traefik fails every request (TestBasicAuthFail's `test:test`, a
/// plain password): `weir check` names the place. A relative `users_file` is read from the
/// config file's folder.
#[test]
fn weir_check_refuses_bad_users() {
    let dir = temp_dir("auth-check");
    std::fs::write(dir.join("users"), format!("{TRAEFIK_TEST}\nbroken\n")).unwrap();
    let up = Upstream::start("app");
    let path = dir.join("weir.yaml");
    // `weir check` on `auth`: whether it passed, and its output.
    let check = |auth: &str| {
        std::fs::write(&path, auth_config(&up, auth)).unwrap();
        let out = weir_check(&path);
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        (out.status.success(), text)
    };
    let users = dir.join("users");
    let cases = [
        (
            "{ users: [] }",
            vec!["11:17: `basic_auth` needs at least one user".to_string()],
        ),
        (
            "{ users: [test, \"test:test\"] }",
            vec![
                "11:27: a user must be `name:hash`".to_string(),
                "11:33: user `test`'s hash is not one weir verifies".to_string(),
            ],
        ),
        (
            "{ users_file: users }",
            vec![format!(
                "11:31: users file `{}` line 2: a user must be `name:hash`",
                users.display()
            )],
        ),
        (
            "{ users_file: missing }",
            vec!["11:31: cannot read users file".to_string()],
        ),
    ];
    for (auth, expected) in cases {
        let (ok, text) = check(auth);
        assert!(!ok, "{auth}");
        for place in expected {
            let line = format!("{}:{place}", path.display());
            assert!(text.contains(&line), "{auth}: no `{line}` in {text}");
        }
    }
    std::fs::write(&users, format!("{TRAEFIK_TEST}\n")).unwrap();
    let (ok, text) = check("{ users_file: users }");
    assert!(ok, "{text}");
}
