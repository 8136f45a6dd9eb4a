//! End-to-end path and composition middlewares (issue 35): `replace_path`,
//! `strip_prefix_regex`, `redirect_regex` and `chain`, each checked against the cases of
//! Traefik's own tests (`pkg/middlewares/...`), cited where they are ported.

mod common;
use common::*;

/// A GET on a fresh connection with an `X-Case` header, which routes it to one middleware
/// configuration; `target` and `host` as sent.
fn case(addr: std::net::SocketAddr, name: &str, method: &str, target: &str, host: &str) -> Resp {
    request(
        addr,
        &format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nX-Case: {name}\r\nConnection: close\r\n\r\n"),
    )
}

/// Routers that each send `X-Case: NAME` requests through middleware NAME to `app`.
fn cases_config(upstream: &str, middlewares: &[(&str, &str)], entrypoints: &str) -> String {
    let mut yaml = format!("server: {{ workers: 1 }}\n{entrypoints}routers:\n");
    for (name, _) in middlewares {
        yaml += &format!(
            "  {name}:\n    rule: \"Header(`X-Case`, `{name}`)\"\n    middlewares: [{name}]\n    service: app\n"
        );
    }
    yaml += &format!("services:\n  app:\n    servers: [{{ url: \"{upstream}\" }}]\nmiddlewares:\n");
    for (name, body) in middlewares {
        yaml += &format!("  {name}: {body}\n");
    }
    yaml
}

const WEB: &str = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n";

/// The target the upstream saw and the named header it got, if any.
fn seen(resp: &Resp, header: &str) -> (String, Option<String>) {
    assert_eq!(resp.status, 200, "{}", resp.text());
    let json = resp.json();
    let target = json["target"].as_str().unwrap().to_string();
    (target, echoed_header(&json, header))
}

/// pkg/middlewares/replacepath/replace_path_test.go, TestReplacePath: every case. The
/// upstream's request target is Traefik's RequestURI; the header holds the path as sent.
#[test]
fn replace_path_replaces_the_whole_path_and_keeps_the_original() {
    let up = Upstream::start("a");
    let weir = Weir::start(&cases_config(
        &up.url(),
        &[
            ("plain", "{ replace_path: { path: /replacement-path } }"),
            ("escaped", "{ replace_path: { path: /foo%2Fbar } }"),
            ("backspace", "{ replace_path: { path: /path/%08bar } }"),
        ],
        WEB,
    ));
    let a = weir.addr();
    let header = "x-replaced-path";
    // "simple path", "long path", "path with escaped value".
    for (path, want) in [
        ("/example", "/example"),
        ("/some/really/long/path", "/some/really/long/path"),
        ("/foo%2Fbar", "/foo%2Fbar"),
    ] {
        let got = seen(&case(a, "plain", "GET", path, "t"), header);
        assert_eq!(
            got,
            ("/replacement-path".into(), Some(want.into())),
            "{path}"
        );
    }
    // "replacement with escaped value": the escape goes upstream as configured.
    let got = seen(&case(a, "escaped", "GET", "/path", "t"), header);
    assert_eq!(got, ("/foo%2Fbar".into(), Some("/path".into())));
    // "replacement with percent encoded backspace char".
    let got = seen(&case(a, "backspace", "GET", "/path/%08bar", "t"), header);
    assert_eq!(got, ("/path/%08bar".into(), Some("/path/%08bar".into())));
    // weir: the query stays, and a client's own X-Replaced-Path is replaced, not kept.
    let resp = request(
        a,
        "GET /old?q=1 HTTP/1.1\r\nHost: t\r\nX-Case: plain\r\nX-Replaced-Path: /forged\r\nConnection: close\r\n\r\n",
    );
    let json = resp.json();
    assert_eq!(json["target"], "/replacement-path?q=1");
    assert_eq!(echoed_header(&json, header).as_deref(), Some("/old"));
}

/// pkg/middlewares/stripprefixregex/strip_prefix_regex_test.go, TestStripPrefixRegex: every
/// case but "/t /test/a2Fb", whose raw space an HTTP/1 request line cannot carry (its
/// escaped twin "/t20/test/a2Fb" is here). A path left as it was keeps its target.
#[test]
fn strip_prefix_regex_strips_the_first_matching_prefix() {
    let up = Upstream::start("a");
    let weir = Weir::start(&cases_config(
        &up.url(),
        &[
            ("a", "{ strip_prefix_regex: { regex: [\"/a/api/\"] } }"),
            (
                "b",
                "{ strip_prefix_regex: { regex: [\"/b/([a-z0-9]+)/\"] } }",
            ),
            (
                "c",
                "{ strip_prefix_regex: { regex: [\"/c/[a-z0-9]+/[0-9]+/\"] } }",
            ),
            ("t", "{ strip_prefix_regex: { regex: [\"/t /test\"] } }"),
            ("api", "{ strip_prefix_regex: { regex: [\"/api\"] } }"),
        ],
        WEB,
    ));
    let a = weir.addr();
    let header = "x-forwarded-prefix";
    // (case config, path sent, target upstream, X-Forwarded-Prefix); the Go case's name is
    // its path with `%` dropped.
    let cases: &[(&str, &str, &str, Option<&str>)] = &[
        ("a", "/a/test", "/a/test", None),
        ("a", "/a/test/", "/a/test/", None),
        ("a", "/a/api/", "/", Some("/a/api/")),
        ("a", "/a/api/test", "/test", Some("/a/api/")),
        ("a", "/a/api/test/", "/test/", Some("/a/api/")),
        ("b", "/b/api/", "/", Some("/b/api/")),
        ("b", "/b/api", "/b/api", None),
        ("b", "/b/api/test1", "/test1", Some("/b/api/")),
        ("b", "/b/api2/test2", "/test2", Some("/b/api2/")),
        ("c", "/c/api/123/", "/", Some("/c/api/123/")),
        ("c", "/c/api/123", "/c/api/123", None),
        ("c", "/c/api/123/test3", "/test3", Some("/c/api/123/")),
        ("c", "/c/api/abc/test4", "/c/api/abc/test4", None),
        ("a", "/a/api/a%2Fb", "/a%2Fb", Some("/a/api/")),
        ("b", "/b/ap%69/test", "/test", Some("/b/api/")),
        ("b", "/b/ap%69/a%2Fb", "/a%2Fb", Some("/b/api/")),
        ("t", "/t%2F/test/foo", "/t%2F/test/foo", None),
        ("t", "/t%20/test/a%2Fb", "/a%2Fb", Some("/t /test")),
    ];
    for (config, path, target, prefix) in cases {
        let got = seen(&case(a, config, "GET", path, "t"), header);
        let want = (target.to_string(), prefix.map(str::to_string));
        assert_eq!(got, want, "{path}");
    }
    // "/api./foo", "/api../foo": what is left would name another path once cleaned (the
    // same paths pass where nothing is stripped).
    for path in ["/api./foo", "/api../foo"] {
        assert_eq!(case(a, "api", "GET", path, "t").status, 400, "{path}");
        assert_eq!(
            seen(&case(a, "a", "GET", path, "t"), header),
            (path.to_string(), None)
        );
    }
    // weir: the query stays.
    let got = seen(&case(a, "a", "GET", "/a/api/x?q=1", "t"), header);
    assert_eq!(got, ("/x?q=1".into(), Some("/a/api/".into())));
}

/// A `static` route behind `strip_prefix_regex` redirects a folder asked without its
/// trailing slash to the path the client asked for, prefix included (as behind
/// `strip_prefix`).
#[test]
fn a_folder_redirect_keeps_a_prefix_stripped_by_regex() {
    let root = temp_dir("static-prefix-regex");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/index.html"), "inside\n").unwrap();
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\n{WEB}\
         middlewares:\n  files: {{ strip_prefix_regex: {{ regex: [\"/files/[a-z]+/\"] }} }}\n\
         routers:\n  files:\n    rule: \"PathPrefix(`/files`)\"\n    middlewares: [files]\n    static: {{ root: \"{}\" }}\n",
        root.display()
    ));
    let moved = get(weir.addr(), "x", "/files/abc/sub?a=1");
    assert_eq!(moved.status, 301);
    assert_eq!(moved.header("location"), Some("/files/abc/sub/?a=1"));
    let followed = get(weir.addr(), "x", "/files/abc/sub/");
    assert_eq!(
        (followed.status, followed.text().as_str()),
        (200, "inside\n")
    );
}

/// A redirect case: (Go case, config, method, target, X-Forwarded-Proto, status, Location).
type RedirectCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    u16,
    Option<&'static str>,
);

/// pkg/middlewares/redirect/redirect_regex_test.go, TestRedirectRegexHandler: the Go test
/// sends its `url` as the request target (absolute form), so these do too. "invalid regex" is
/// weir-config's `redirect_regex_settings_and_their_errors`; the `secured` cases are in
/// `redirect_regex_takes_https_from_the_connection`.
#[test]
fn redirect_regex_matches_the_request_url() {
    let up = Upstream::start("a");
    let www = "{ redirect_regex: { regex: \"(https?)://[^/:]+(:[0-9]+)?/(.*)\", replacement: \"$1://example.com$2/$3\", permanent: true } }";
    let weir = Weir::start(&cases_config(
        &up.url(),
        &[
            ("simple", "{ redirect_regex: { regex: \"^(?:http?:\\\\/\\\\/)(foo)(\\\\.com)(:\\\\d+)(.*)$\", replacement: \"https://$${1}bar$2:443$4\" } }"),
            ("invalid", "{ redirect_regex: { regex: \"^(.*)$\", replacement: \"http://192.168.0.%31/\" } }"),
            ("tohttps", "{ redirect_regex: { regex: \"^http://\", replacement: \"https://$1\" } }"),
            ("tohttpsperm", "{ redirect_regex: { regex: \"^http://\", replacement: \"https://$1\", permanent: true } }"),
            ("port", "{ redirect_regex: { regex: \"http://foo:80\", replacement: \"https://foo:443\" } }"),
            ("port88", "{ redirect_regex: { regex: \"http://foo:80\", replacement: \"http://foo:88\" } }"),
            ("www", www),
            ("same", "{ redirect_regex: { regex: \"^http://www.example.com:8080/x\", replacement: \"http://www.example.com:8080/x\" } }"),
        ],
        WEB,
    ));
    let a = weir.addr();
    // The Go config "simple redirection" writes `${1}`, here `$${1}` (see docs).
    let cases: &[RedirectCase] = &[
        (
            "simple redirection",
            "simple",
            "GET",
            "http://foo.com:80",
            "",
            302,
            Some("https://foobar.com:443"),
        ),
        (
            "URL doesn't match regex",
            "simple",
            "GET",
            "http://bar.com:80",
            "",
            200,
            None,
        ),
        (
            "invalid rewritten URL",
            "invalid",
            "GET",
            "http://foo.com:80",
            "",
            502,
            None,
        ),
        (
            "HTTP to HTTPS permanent",
            "tohttpsperm",
            "GET",
            "http://foo",
            "",
            301,
            Some("https://foo"),
        ),
        (
            "HTTP to HTTPS",
            "port",
            "GET",
            "http://foo:80",
            "",
            302,
            Some("https://foo:443"),
        ),
        // The header does not change the URL's scheme.
        (
            "HTTP to HTTPS, with X-Forwarded-Proto",
            "port",
            "GET",
            "http://foo:80",
            "https",
            302,
            Some("https://foo:443"),
        ),
        (
            "HTTP to HTTP",
            "port88",
            "GET",
            "http://foo:80",
            "",
            302,
            Some("http://foo:88"),
        ),
        (
            "HTTP to HTTP POST",
            "tohttps",
            "POST",
            "http://foo",
            "",
            307,
            Some("https://foo"),
        ),
        (
            "www-redirect without port",
            "www",
            "GET",
            "http://www.example.com/path",
            "",
            301,
            Some("http://example.com/path"),
        ),
        (
            "www-redirect with port",
            "www",
            "GET",
            "http://www.example.com:8080/path",
            "",
            301,
            Some("http://example.com:8080/path"),
        ),
        (
            "www-redirect without port, root path",
            "www",
            "GET",
            "http://www.example.com/",
            "",
            301,
            Some("http://example.com/"),
        ),
        (
            "HTTP to HTTP POST permanent",
            "tohttpsperm",
            "POST",
            "http://foo",
            "",
            308,
            Some("https://foo"),
        ),
        // weir's own, from redirect.go's moveHandler: only GET keeps 302, HEAD gets 307.
        (
            "HEAD",
            "tohttps",
            "HEAD",
            "http://foo",
            "",
            307,
            Some("https://foo"),
        ),
        // An origin-form target: `http://`, the Host header as sent (port included), the target.
        (
            "origin form",
            "www",
            "GET",
            "/path?q=1",
            "",
            301,
            Some("http://example.com:8080/path?q=1"),
        ),
        // A replacement that leaves the URL as it was lets the request through.
        ("unchanged", "same", "GET", "/x", "", 200, None),
    ];
    for (name, config, method, target, proto, status, location) in cases {
        let proto = match *proto {
            "" => String::new(),
            proto => format!("X-Forwarded-Proto: {proto}\r\n"),
        };
        let resp = request(
            a,
            &format!("{method} {target} HTTP/1.1\r\nHost: www.example.com:8080\r\nX-Case: {config}\r\n{proto}Connection: close\r\n\r\n"),
        );
        assert_eq!(
            (resp.status, resp.header("location")),
            (*status, *location),
            "{name}"
        );
    }
}

/// pkg/middlewares/redirect/redirect_regex_test.go, TestRedirectRegexHandler, the `secured`
/// cases ("HTTPS to HTTP permanent", "HTTPS to HTTP", "www-redirect HTTPS without port"):
/// over TLS the URL's scheme is https whatever the target says.
#[test]
fn redirect_regex_takes_https_from_the_connection() {
    let up = Upstream::start("a");
    let dir = temp_dir("redirect-regex-tls");
    let cert = make_cert(&dir, "foo", &["foo", "www.example.com"], false);
    let websecure = format!(
        "entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n    tls:\n      certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n",
        cert.cert.display(),
        cert.key.display()
    );
    let weir = Weir::start(&cases_config(
        &up.url(),
        &[
            ("perm", "{ redirect_regex: { regex: \"https://foo\", replacement: \"http://foo\", permanent: true } }"),
            ("port", "{ redirect_regex: { regex: \"https://foo:443\", replacement: \"http://foo:80\" } }"),
            ("www", "{ redirect_regex: { regex: \"(https?)://[^/:]+(:[0-9]+)?/(.*)\", replacement: \"$1://example.com$2/$3\", permanent: true } }"),
        ],
        &websecure,
    ));
    let port = weir.addr().port();
    let over = |version: &str, name: &str, host: &str, target: &str| {
        let head = curl_ok(&[
            "-k",
            version,
            "-o",
            "/dev/null",
            "-D",
            "-",
            "-H",
            &format!("X-Case: {name}"),
            "--resolve",
            &format!("{host}:{port}:127.0.0.1"),
            "--request-target",
            target,
            &format!("https://{host}:{port}/"),
        ]);
        let head = String::from_utf8(head).unwrap();
        if version == "--http2" {
            assert!(head.starts_with("HTTP/2 "), "{head}");
        }
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, header_value(&head, "location").map(str::to_string))
    };
    let redirect = |name: &str, host: &str, target: &str| over("--http1.1", name, host, target);
    // The Go cases' targets, sent in absolute form with plain `http` where TLS must win.
    assert_eq!(
        redirect("perm", "foo", "https://foo"),
        (301, Some("http://foo".into()))
    );
    assert_eq!(
        redirect("port", "foo", "http://foo:443"),
        (302, Some("http://foo:80".into()))
    );
    assert_eq!(
        redirect("www", "www.example.com", "https://www.example.com/path"),
        (301, Some("https://example.com/path".into()))
    );
    // An origin-form target over TLS: https, the Host header (curl adds the port).
    assert_eq!(
        redirect("www", "www.example.com", "/path"),
        (301, Some(format!("https://example.com:{port}/path")))
    );
    // The same over HTTP/2: `:authority` is the host, `:path` the target.
    assert_eq!(
        over("--http2", "www", "www.example.com", "/path"),
        (301, Some(format!("https://example.com:{port}/path")))
    );
}

/// A chain of two of these middlewares, used in two routers and nested in another chain:
/// applied in order wherever it is named (Traefik's chain.go builds the same in-order
/// handler).
#[test]
fn a_chain_applies_its_middlewares_in_order() {
    let up = Upstream::start("a");
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\n{WEB}routers:\n\
         \x20 direct:\n    rule: \"PathPrefix(`/v1`)\"\n    middlewares: [version-then-replace]\n    service: app\n\
         \x20 nested:\n    rule: \"PathPrefix(`/old`)\"\n    middlewares: [www-then-more]\n    service: app\n\
         services:\n  app:\n    servers: [{{ url: \"{}\" }}]\n\
         middlewares:\n\
         \x20 strip-version: {{ strip_prefix_regex: {{ regex: [\"/v[0-9]+\"] }} }}\n\
         \x20 to-root: {{ replace_path: {{ path: /root }} }}\n\
         \x20 version-then-replace: {{ chain: {{ middlewares: [strip-version, to-root] }} }}\n\
         \x20 www: {{ redirect_regex: {{ regex: \"^http://www\\\\.(.*)\", replacement: \"http://$1\" }} }}\n\
         \x20 www-then-more: {{ chain: {{ middlewares: [www, version-then-replace] }} }}\n",
        up.url()
    ));
    let a = weir.addr();
    // strip_prefix_regex first (it records /v1), then replace_path (it records what is left).
    let json = get(a, "t", "/v1/items?q=1").json();
    assert_eq!(json["target"], "/root?q=1");
    assert_eq!(
        echoed_header(&json, "x-forwarded-prefix").as_deref(),
        Some("/v1")
    );
    assert_eq!(
        echoed_header(&json, "x-replaced-path").as_deref(),
        Some("/items")
    );
    // The outer chain redirects first; a request it lets through meets the inner chain.
    let moved = get(a, "www.example.com", "/old");
    assert_eq!(
        (moved.status, moved.header("location")),
        (302, Some("http://example.com/old"))
    );
    let json = get(a, "example.com", "/old/x").json();
    assert_eq!(json["target"], "/root");
    assert_eq!(
        echoed_header(&json, "x-replaced-path").as_deref(),
        Some("/old/x")
    );
}

/// `weir check` names where a chain goes wrong.
#[test]
fn weir_check_names_a_chain_that_loops() {
    let stderr = weir_check_refuses(
        "chain-loop",
        &format!("{WEB}middlewares:\n  a: {{ chain: {{ middlewares: [b] }} }}\n  b: {{ chain: {{ middlewares: [a, nope] }} }}\n"),
    );
    assert!(
        stderr.contains("weir.yaml:4:31: chain `a` loops: a → b → a"),
        "{stderr}"
    );
    assert!(
        stderr.contains("weir.yaml:5:31: chain `b` loops: b → a → b"),
        "{stderr}"
    );
    assert!(
        stderr.contains("weir.yaml:5:34: chain `b` names middleware `nope`"),
        "{stderr}"
    );
}
