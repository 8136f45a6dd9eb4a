//! End-to-end `forward_auth` middleware against the binary, with two in-process upstreams: a
//! forward-auth server scripted per test, and the app, which answers with the request head it
//! got (so a test reads what was let through). Cases are ported from Traefik's
//! pkg/middlewares/auth/forward_test.go (named on each test). Not ported:
//! `TestForwardAuthDoesNotForwardCONNECTBody` (weir does not proxy `CONNECT`),
//! `TestForwardAuthClientClosedRequest` (499 is never sent),
//! `TestForwardAuthTracing`, and the keys weir does not have (`TestForwardAuthMaxResponseBodySize`,
//! `TestForwardAuthAuthSigninURL`, `TestForwardAuthPreserveRequestMethod`,
//! `TestForwardAuth_oldWriteHeader`: weir's `trust_forward_header` is `false` or `true`, never
//! unset).

mod common;
use common::*;
use std::collections::BTreeSet;

/// The app: `200` with the head it got and its body, with cookies and a field of its own
/// (`TestForwardAuthSuccess`'s next handler).
fn app() -> RawUpstream {
    RawUpstream::answering(|head, body| {
        let fields = [
            ("set-cookie", "authCookie=Backend"),
            ("set-cookie", "backendCookie=Backend"),
            ("other-header", "BackendHeaderValue"),
        ];
        http_answer(
            200,
            &fields,
            &format!("{head}{}", String::from_utf8_lossy(body)),
        )
    })
}

/// weir proxying to the app behind `forward_auth: {auth}` (its `address` given).
fn weir_with(app: &RawUpstream, auth: &str) -> Weir {
    Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [auth], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  auth: {{ forward_auth: {auth} }}\n",
        app.url()
    ))
}

/// A request to weir for `http://foo.bar/path?q=1` (Traefik's writeHeader request), with more
/// header lines `extra`.
fn ask(weir: &Weir, extra: &str) -> Resp {
    request(
        weir.addr(),
        &format!("GET /path?q=1 HTTP/1.1\r\nHost: foo.bar\r\n{extra}Connection: close\r\n\r\n"),
    )
}

/// Every value of field `name` in an answer.
fn all<'r>(r: &'r Resp, name: &str) -> Vec<&'r str> {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// TestForwardAuthFail: the server's refusal (403, its `Proxy-Authenticate`, its body) is the
/// answer; the app is never asked.
#[test]
fn a_refusal_is_answered_as_the_server_sent_it() {
    let auth = RawUpstream::answering(|_, _| {
        let fields = [
            ("proxy-authenticate", "test"),
            ("content-type", "text/plain; charset=utf-8"),
        ];
        http_answer(403, &fields, "Forbidden\n")
    });
    let app = app();
    let weir = weir_with(&app, &format!("{{ address: \"{}\" }}", auth.url()));
    let r = ask(&weir, "");
    assert_eq!((r.status, r.text().as_str()), (403, "Forbidden\n"));
    assert_eq!(r.header("proxy-authenticate"), Some("test"));
    assert_eq!(app.count("GET"), 0);
    assert_eq!(auth.count("GET / HTTP/1.1"), 1);
}

/// TestForwardAuthSuccess: a 2xx lets the request through with `auth_response_headers` (every
/// value, in place of the client's) and the fields `auth_response_headers_regex` matches (the
/// client's that match removed), and the server's cookies named in
/// `add_auth_cookies_to_response` replace the app's of that name on the answer.
#[test]
fn a_2xx_lets_the_request_through_with_the_named_fields_and_cookies() {
    let auth = RawUpstream::answering(|_, _| {
        let fields = [
            ("X-Auth-User", "user@example.com"),
            ("X-Auth-Secret", "secret"),
            ("X-Auth-Group", "group1"),
            ("X-Auth-Group", "group2"),
            ("Foo-Bar", "auth-value"),
            ("Set-Cookie", "authCookie=Auth"),
            ("Set-Cookie", "authCookieNotAdded=Auth"),
        ];
        http_answer(200, &fields, "Success\n")
    });
    let app = app();
    let weir = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", auth_response_headers: [X-Auth-User, X-Auth-Group], \
             auth_response_headers_regex: \"^Foo-\", add_auth_cookies_to_response: [authCookie] }}",
            auth.url()
        ),
    );
    let r = ask(
        &weir,
        "X-Auth-Group: admin_group\r\nFoo-Bar: client-value\r\nFoo-Baz: client-value\r\n",
    );
    assert_eq!(r.status, 200);
    let seen = r.text();
    let values = |name: &str| -> Vec<String> {
        seen.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    };
    assert_eq!(values("x-auth-user"), ["user@example.com"]);
    assert!(values("x-auth-secret").is_empty());
    assert_eq!(values("x-auth-group"), ["group1", "group2"]);
    assert_eq!(values("foo-bar"), ["auth-value"]);
    assert!(values("foo-baz").is_empty(), "{seen}");
    assert_eq!(
        all(&r, "set-cookie"),
        ["backendCookie=Backend", "authCookie=Auth"]
    );
    assert_eq!(all(&r, "other-header"), ["BackendHeaderValue"]);
}

/// TestForwardAuthNotForwardBody: the server is asked without the body; the app gets it.
#[test]
fn the_body_goes_to_the_app_and_not_to_the_server() {
    let auth = RawUpstream::answering(|head, body| {
        assert!(body.is_empty() && header_value(head, "content-length").is_none());
        http_answer(200, &[], "")
    });
    let app = app();
    let weir = weir_with(&app, &format!("{{ address: \"{}\" }}", auth.url()));
    let r = request(
        weir.addr(),
        "GET /path HTTP/1.1\r\nHost: foo.bar\r\nContent-Length: 15\r\nConnection: close\r\n\r\nforwardBodyTest",
    );
    assert_eq!(r.status, 200);
    assert!(
        r.text().ends_with("\r\n\r\nforwardBodyTest"),
        "{}",
        r.text()
    );
    assert_eq!((auth.count("GET"), app.count("GET")), (1, 1));
}

/// TestForwardAuthRedirect and TestForwardAuthRemoveHopByHopHeaders: a redirect is passed on
/// with its `Location` and body, without the server's hop-by-hop fields.
#[test]
fn a_redirect_is_passed_on_without_hop_by_hop_fields() {
    let auth = RawUpstream::answering(|_, _| {
        let body = "<a href=\"http://example.com/redirect-test\">Found</a>.\n\n";
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://example.com/redirect-test\r\n\
             Connection: test\r\nKeep-Alive: test\r\nTe: test\r\nTrailers: test\r\nUpgrade: test\r\n\
             Content-Type: text/html; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        )
    });
    let app = app();
    let weir = weir_with(&app, &format!("{{ address: \"{}\" }}", auth.url()));
    let r = ask(&weir, "");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("http://example.com/redirect-test")
    );
    for hop in [
        "keep-alive",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
    ] {
        assert_eq!(r.header(hop), None, "{hop}");
    }
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "weir's own, for this client"
    );
    assert!(r.text().contains("Found"));
}

/// TestForwardAuthFailResponseHeaders: a refusal carries the server's fields, cookies included,
/// and no others but its length and weir's `Date`.
#[test]
fn a_refusal_carries_the_server_s_fields() {
    let auth = RawUpstream::answering(|_, _| {
        let fields = [
            ("Set-Cookie", "example=testing; Path=/"),
            ("X-Foo", "bar"),
            ("Content-Type", "text/plain; charset=utf-8"),
            ("X-Content-Type-Options", "nosniff"),
        ];
        http_answer(403, &fields, "Forbidden\n")
    });
    let app = app();
    let weir = weir_with(&app, &format!("{{ address: \"{}\" }}", auth.url()));
    let r = request(weir.addr(), "GET /path HTTP/1.1\r\nHost: foo.bar\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (403, "Forbidden\n"));
    assert_eq!(all(&r, "set-cookie"), ["example=testing; Path=/"]);
    let names: BTreeSet<String> = r
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    let expected = [
        "content-length",
        "content-type",
        "date",
        "set-cookie",
        "x-content-type-options",
        "x-foo",
    ];
    assert_eq!(names, expected.iter().map(|n| n.to_string()).collect());
    assert_eq!(r.header("content-length"), Some("10"));
}

/// TestForwardAuthForwardError: a server that cannot be reached is a 500; the app is never
/// asked.
#[test]
fn a_server_that_cannot_be_reached_is_a_500() {
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let app = app();
    let weir = weir_with(&app, &format!("{{ address: \"{refused}/auth\" }}"));
    let r = ask(&weir, "");
    assert_eq!(r.status, 500);
    assert_eq!(app.count("GET"), 0);
    let line = weir.wait_for_line(": forward_auth: ", 1);
    assert!(
        line.contains(&format!("{refused}/auth: upstream connection failed")),
        "{line}"
    );
}

/// TestForwardAuthPreserveLocationHeader, and without it, the `Location` made absolute against
/// the address (Go's `Response.Location`).
#[test]
fn a_relative_location_is_kept_or_made_absolute() {
    let auth = RawUpstream::answering(|_, _| {
        http_answer(401, &[("Location", "/index.html")], "Unauthorized\n")
    });
    let app = app();
    let preserved = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", preserve_location_header: true }}",
            auth.url()
        ),
    );
    let r = ask(&preserved, "");
    assert_eq!((r.status, r.header("location")), (401, Some("/index.html")));
    let resolved = weir_with(&app, &format!("{{ address: \"{}/check\" }}", auth.url()));
    let r = ask(&resolved, "");
    let expected = format!("{}/index.html", auth.url());
    assert_eq!(
        (r.status, r.header("location")),
        (401, Some(expected.as_str()))
    );
}

/// The auth server of the writeHeader cases: it refuses with the head it got as its body.
fn echoing_auth() -> RawUpstream {
    RawUpstream::answering(|head, _| http_answer(401, &[], head))
}

/// The fields the server got, by lower-case name, as `TestForwardAuth_writeHeader` reads them.
fn fields_seen(r: &Resp) -> Vec<(String, String)> {
    r.text()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

fn seen<'f>(fields: &'f [(String, String)], name: &str) -> Option<&'f str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// TestForwardAuth_writeHeader: "trust forward header", "not trust forward header", "trust
/// forward header with forwarded URI", "not trust forward header with forward requested URI",
/// "trust forward header with forwarded request Method", "not trust forward header with forward
/// request Method", "X-Forwarded and X_forwarded headers are removed when not trusted" and
/// "X-Forwarded-Proto is not used to calculate X-Forwarded-Port if trustForwardHeader=false".
#[test]
fn forwarding_fields_are_the_client_s_only_when_trusted() {
    let auth = echoing_auth();
    let app = app();
    let trusting = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", trust_forward_header: true }}",
            auth.url()
        ),
    );
    let distrusting = weir_with(&app, &format!("{{ address: \"{}\" }}", auth.url()));
    let client = "Accept: application/json\r\nX-Forwarded-Host: fii.bir\r\n\
                  X-Forwarded-Uri: /forward?q=1\r\nX-Forwarded-Method: OPTIONS\r\n\
                  X_forwarded_for: 10.0.0.9\r\nX-Forwarded-Port: 8443\r\n";
    let f = fields_seen(&ask(&trusting, client));
    assert_eq!(seen(&f, "accept"), Some("application/json"));
    assert_eq!(seen(&f, "x-forwarded-host"), Some("fii.bir"));
    assert_eq!(seen(&f, "x-forwarded-uri"), Some("/forward?q=1"));
    assert_eq!(seen(&f, "x-forwarded-method"), Some("OPTIONS"));
    assert_eq!(seen(&f, "x-forwarded-port"), Some("8443"));
    assert_eq!(seen(&f, "x_forwarded_for"), Some("10.0.0.9"));
    let f = fields_seen(&ask(&distrusting, client));
    assert_eq!(seen(&f, "accept"), Some("application/json"));
    assert_eq!(seen(&f, "x-forwarded-host"), Some("foo.bar"));
    assert_eq!(seen(&f, "x-forwarded-uri"), Some("/path?q=1"));
    assert_eq!(seen(&f, "x-forwarded-method"), Some("GET"));
    assert_eq!(seen(&f, "x-forwarded-port"), Some("80"));
    assert_eq!(seen(&f, "x_forwarded_for"), None);
    let f = fields_seen(&ask(&distrusting, "X-Forwarded-Proto: https\r\n"));
    assert_eq!(seen(&f, "x-forwarded-proto"), Some("http"));
    assert_eq!(seen(&f, "x-forwarded-port"), Some("80"));
}

/// TestForwardAuth_writeHeader: "remove hop-by-hop headers", "filter forward request headers",
/// "filter forward request headers doesn't add new headers" and "authRequestHeaders and
/// XForwarded are kept if trusted": exactly these fields reach the server, besides the Host,
/// `X-Forwarded-For` and `X-Real-Ip` weir writes on every request it sends upstream.
#[test]
fn only_the_named_request_fields_and_the_forwarding_ones_go_to_the_server() {
    let auth = echoing_auth();
    let app = app();
    let names = |weir: &Weir, extra: &str| -> BTreeSet<String> {
        let f = fields_seen(&ask(weir, extra));
        let weirs = ["host", "x-forwarded-for", "x-real-ip"];
        f.into_iter()
            .map(|(n, _)| n)
            .filter(|n| !weirs.contains(&n.as_str()))
            .collect()
    };
    let set = |list: &[&str]| -> BTreeSet<String> { list.iter().map(|n| n.to_string()).collect() };
    let forwarding = [
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-uri",
        "x-forwarded-method",
        "x-forwarded-port",
    ];
    let all_fields = weir_with(&app, &format!("{{ address: \"{}\" }}", auth.url()));
    let hop = "Keep-Alive: KeepAlive\r\nTe: Te\r\nTrailers: Trailers\r\nUpgrade: Upgrade\r\n\
               X-CustomHeader: CustomHeader\r\n";
    let mut expected = set(&forwarding);
    expected.insert("x-customheader".into());
    assert_eq!(names(&all_fields, hop), expected);
    let filtered = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", auth_request_headers: [X-CustomHeader, X-Non-Exists-Header] }}",
            auth.url()
        ),
    );
    let client =
        "X-CustomHeader: CustomHeader\r\nContent-Type: multipart/form-data; boundary=---123456\r\n\
                  X-Forwarded-Uri: /path?q=2\r\n";
    let mut expected = set(&forwarding);
    expected.insert("x-customheader".into());
    assert_eq!(names(&filtered, client), expected);
    let f = fields_seen(&ask(&filtered, client));
    assert_eq!(seen(&f, "x-forwarded-uri"), Some("/path?q=1"));
    let trusted = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", auth_request_headers: [X-CustomHeader], trust_forward_header: true }}",
            auth.url()
        ),
    );
    assert_eq!(names(&trusted, client), expected);
    let f = fields_seen(&ask(&trusted, client));
    assert_eq!(seen(&f, "x-forwarded-uri"), Some("/path?q=2"));
}

/// A server that lets every request through, saying in `X-Auth-Body` what body it got.
fn body_echoing_auth() -> RawUpstream {
    body_echoing_auth_as("X-Auth-Body")
}

/// The same, saying it in the field `field`.
fn body_echoing_auth_as(field: &'static str) -> RawUpstream {
    RawUpstream::answering(move |_, body| {
        let got = format!("[{}]", String::from_utf8_lossy(body));
        http_answer(200, &[(field, &got)], "")
    })
}

const WITH_BODY: &str = "auth_response_headers: [X-Auth-Body], forward_body: true";

const FIFTEEN_BYTES: &str = "GET /path HTTP/1.1\r\nHost: foo.bar\r\nContent-Length: 15\r\n\
                             Connection: close\r\n\r\nforwardBodyTest";

/// TestForwardAuthForwardBody and TestForwardAuthForwardBodyEmptyBody: with `forward_body`,
/// the server gets the body (none when there is none), and so does the app.
#[test]
fn with_forward_body_the_server_and_the_app_both_get_the_body() {
    let (auth, app) = (body_echoing_auth(), app());
    let weir = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", {WITH_BODY}, max_body_size: 15 }}",
            auth.url()
        ),
    );
    let r = request(weir.addr(), FIFTEEN_BYTES);
    assert_eq!(r.status, 200);
    let seen = r.text();
    assert_eq!(
        header_value(&seen, "x-auth-body"),
        Some("[forwardBodyTest]")
    );
    assert_eq!(header_value(&seen, "content-length"), Some("15"));
    assert!(seen.ends_with("\r\n\r\nforwardBodyTest"), "{seen}");
    let r = ask(&weir, "");
    assert_eq!(r.status, 200);
    assert_eq!(header_value(&r.text(), "x-auth-body"), Some("[]"));
    assert_eq!((auth.count("GET"), app.count("GET")), (2, 2));
}

/// TestForwardAuthForwardBodySizeLimit: a body over `max_body_size` is refused with 401, and
/// neither the server nor the app is asked.
#[test]
fn a_body_over_max_body_size_is_refused_with_401() {
    let (auth, app) = (body_echoing_auth(), app());
    let weir = weir_with(
        &app,
        &format!(
            "{{ address: \"{}\", {WITH_BODY}, max_body_size: 14 }}",
            auth.url()
        ),
    );
    let r = request(weir.addr(), FIFTEEN_BYTES);
    assert_eq!(r.status, 401);
    assert_eq!((auth.count("GET"), app.count("GET")), (0, 0));
}

/// A chunked body, and one over HTTP/2, are read whole and sent with their length to both.
#[test]
fn a_chunked_or_http2_body_goes_with_its_length() {
    let (auth, app) = (body_echoing_auth(), app());
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [auth], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  auth: {{ forward_auth: {{ address: \"{}\", {WITH_BODY} }} }}\n",
        app.url(),
        auth.url()
    ));
    let r = request(
        weir.addr(),
        "POST /path HTTP/1.1\r\nHost: foo.bar\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n7\r\nforward\r\n8\r\nBodyTest\r\n0\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let seen = r.text();
    assert_eq!(
        header_value(&seen, "x-auth-body"),
        Some("[forwardBodyTest]")
    );
    assert_eq!(header_value(&seen, "content-length"), Some("15"));
    assert_eq!(header_value(&seen, "transfer-encoding"), None);
    assert!(seen.ends_with("\r\n\r\nforwardBodyTest"), "{seen}");
    let url = format!("http://{}/h2", weir.addr());
    let out = curl_ok(&[
        "-s",
        "--http2-prior-knowledge",
        "--data-binary",
        "overHTTP2",
        &url,
    ]);
    let seen = String::from_utf8(out).unwrap();
    assert_eq!(header_value(&seen, "x-auth-body"), Some("[overHTTP2]"));
    assert!(seen.ends_with("\r\n\r\noverHTTP2"), "{seen}");
}

/// `max_body_size` without `forward_body` is refused where it is written.
#[test]
fn a_body_limit_without_forward_body_is_refused_where_it_is_written() {
    let out = weir_check_refuses(
        "forward-auth-body",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n\
         middlewares:\n  a: { forward_auth: { address: \"http://127.0.0.1:9\", max_body_size: 1KiB } }\n",
    );
    assert!(
        out.contains(":4:70: `max_body_size` applies with `forward_body: true`"),
        "{out}"
    );
}

/// Two `forward_body` middlewares on one route: the first reads the body and its server gets
/// it; the second's server is asked without it; the app gets it whole.
#[test]
fn a_second_forward_body_middleware_asks_without_the_body() {
    let (first, second) = (body_echoing_auth(), body_echoing_auth_as("X-Second-Body"));
    let app = app();
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [one, two], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  \
           one: {{ forward_auth: {{ address: \"{}\", forward_body: true, auth_response_headers: [X-Auth-Body] }} }}\n  \
           two: {{ forward_auth: {{ address: \"{}\", forward_body: true, auth_response_headers: [X-Second-Body] }} }}\n",
        app.url(),
        first.url(),
        second.url()
    ));
    let r = request(weir.addr(), FIFTEEN_BYTES);
    assert_eq!(r.status, 200);
    let seen = r.text();
    assert_eq!(
        header_value(&seen, "x-auth-body"),
        Some("[forwardBodyTest]")
    );
    assert_eq!(header_value(&seen, "x-second-body"), Some("[]"));
    assert_eq!(header_value(&seen, "content-length"), Some("15"));
    assert!(seen.ends_with("\r\n\r\nforwardBodyTest"), "{seen}");
}

/// `tls`: an `https://` server (Debian's nginx) verified against `ca`, as a service's servers
/// are; one whose certificate is not trusted cannot be asked (500).
#[test]
fn an_https_server_is_verified_with_tls() {
    let dir = temp_dir("forward-auth-tls");
    let cert = make_cert(&dir, "auth", &["127.0.0.1"], false);
    let decide = "if ($http_authorization = \"Bearer ok\") { return 204; }\n    \
                  return 401 \"denied\\n\";";
    let nginx = Nginx::start_tls_location(&cert.cert, &cert.key, decide);
    let app = app();
    let address = format!("https://{}/verify", nginx.addr);
    let ca = cert.cert.display();
    let weir = weir_with(
        &app,
        &format!("{{ address: \"{address}\", tls: {{ ca: \"{ca}\" }} }}"),
    );
    let r = ask(&weir, "Authorization: Bearer ok\r\n");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("GET /path?q=1 HTTP/1.1\r\n"));
    let r = ask(&weir, "Authorization: Bearer no\r\n");
    assert_eq!((r.status, r.text().as_str()), (401, "denied\n"));
    let untrusted = weir_with(&app, &format!("{{ address: \"{address}\" }}"));
    assert_eq!(ask(&untrusted, "Authorization: Bearer ok\r\n").status, 500);
    assert_eq!(app.count("GET"), 1);
}
