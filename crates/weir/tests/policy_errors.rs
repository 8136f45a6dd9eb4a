//! End-to-end `errors` middleware against the binary, with two in-process upstreams: the app,
//! which answers the status the client asks for in `X-Code` (as Traefik's tests set their
//! backend's code), and a page service that answers every path with a page naming what it was
//! asked (its request head). Cases are ported from Traefik's
//! pkg/middlewares/customerrors/custom_errors_test.go `TestHandler` (named on each test);
//! weir's own errors (502, 503, 504), `status_rewrites`, HEAD requests, a failing page service
//! and the order against other middlewares are weir's. Not ported: "forward only allowlisted
//! headers", "forward no headers" and the "nginx headers" cases (weir has neither
//! `errorRequestHeaders` nor `nginxHeaders`), and `Test1xxResponses` (weir sends no interim
//! answers on; `errors::tests` checks that none is caught).

mod common;
use common::*;

/// The app: the status in `X-Code` (200 without one), its body the status's text and a line
/// break as Traefik's test backend writes it, with a field of its own.
fn app() -> RawUpstream {
    RawUpstream::answering(|head, _| {
        let code: u16 = header_value(head, "x-code").map_or(200, |c| c.parse().unwrap());
        let text = match code {
            200 => "OK",
            206 => "Partial Content",
            500 => "Internal Server Error",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            _ => "Other",
        };
        let fields = [("x-app", "yes"), ("content-type", "text/plain")];
        http_answer(code, &fields, &format!("{text}\n"))
    })
}

/// The page service: `200` with a page holding the request head it got.
fn pages() -> RawUpstream {
    RawUpstream::answering(|head, _| {
        let fields = [("x-page", "yes"), ("content-type", "text/html")];
        http_answer(200, &fields, &format!("My error page.\n{head}"))
    })
}

/// weir with the app and the page service, a router per `(host, middlewares)`, and
/// `middlewares` (YAML lines under `middlewares:`).
fn weir_with(app: &str, pages: &str, routes: &[(&str, &str)], middlewares: &str) -> Weir {
    let mut routers = String::new();
    for (i, (host, mws)) in routes.iter().enumerate() {
        routers.push_str(&format!(
            "  r{i}: {{ rule: \"Host(`{host}`)\", middlewares: [{mws}], service: app }}\n"
        ));
    }
    // One worker: its pools are the ones every request uses.
    Weir::start(&format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n{routers}\
         services:\n  app: {{ servers: [{{ url: \"{app}\" }}], timeouts: {{ response_header: 300ms }} }}\n  \
         pages: {{ servers: [{{ url: \"{pages}\" }}] }}\n\
         middlewares:\n{middlewares}"
    ))
}

/// `GET /test?foo=bar&baz=buz` to `host` (Traefik's test request), the app asked for `code`,
/// with more header lines `extra`.
fn ask(weir: &Weir, method: &str, host: &str, code: u16, extra: &str) -> Resp {
    request(
        weir.addr(),
        &format!(
            "{method} /test?foo=bar&baz=buz HTTP/1.1\r\nHost: {host}\r\nX-Code: {code}\r\n\
             {extra}Connection: close\r\n\r\n"
        ),
    )
}

const TRAEFIK_RANGES: &str = "[\"500-501\", \"503-599\"]";

/// TestHandler "no error", "no error, but not a 200", "a 304, so no Write called", "in the
/// range", "not in the range", and "non-nginx: code modifier enforces original error code":
/// only a status in a range is caught; the client then gets the page's body and fields with
/// the caught status (the page service answered 200), none of the app's.
#[test]
fn only_statuses_in_a_range_are_replaced_by_the_page_with_their_status() {
    let (app, pages) = (app(), pages());
    let mw = format!(
        "  e: {{ errors: {{ status: {TRAEFIK_RANGES}, service: pages, query: /test }} }}\n"
    );
    let weir = weir_with(&app.url(), &pages.url(), &[("t", "e")], &mw);
    for (code, body) in [
        (200, "OK\n"),
        (206, "Partial Content\n"),
        (304, ""),
        (502, "Bad Gateway\n"),
    ] {
        let r = ask(&weir, "GET", "t", code, "");
        assert_eq!((r.status, r.text().as_str()), (code, body));
        assert_eq!(r.header("x-app"), Some("yes"));
    }
    assert_eq!(pages.count("GET"), 0, "the page service is not asked");
    let r = ask(&weir, "GET", "t", 500, "");
    assert_eq!(r.status, 500);
    assert!(
        r.text()
            .starts_with("My error page.\nGET /test HTTP/1.1\r\n"),
        "{}",
        r.text()
    );
    assert_eq!(r.header("x-page"), Some("yes"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("x-app"), None, "the app's fields are dropped");
    assert_eq!(pages.count("GET /test "), 1);
    // The replaced answer's body is read to its end, as Traefik reads it: the app's connection
    // and the page service's are kept for the next requests.
    let again = ask(&weir, "GET", "t", 501, "");
    assert_eq!(again.status, 501);
    assert!(again.text().starts_with("My error page.\n"));
    assert_eq!((app.count("connection"), pages.count("connection")), (1, 1));
}

/// TestHandler "query replacement" (`/{status}`, range 503-503), "single code and query
/// replacement" (status `503`), "full query replacement" (`{url}`, escaped as a query value),
/// and "forward request host header" (the page request carries the client's Host).
#[test]
fn the_query_names_the_status_and_the_url_and_the_host_is_the_client_s() {
    let (app, pages) = (app(), pages());
    let mws = "  range: { errors: { status: [\"503-503\"], service: pages, query: \"/{status}\" } }\n  \
               single: { errors: { status: [\"503\"], service: pages, query: \"/{status}\" } }\n  \
               full: { errors: { status: [\"503\"], service: pages, query: \"/?status={status}&url={url}\" } }\n";
    let routes = [
        ("range", "range"),
        ("single", "single"),
        ("localhost", "full"),
    ];
    let weir = weir_with(&app.url(), &pages.url(), &routes, mws);
    for host in ["range", "single"] {
        let r = ask(&weir, "GET", host, 503, "");
        assert_eq!(r.status, 503);
        assert!(
            r.text()
                .starts_with("My error page.\nGET /503 HTTP/1.1\r\n"),
            "{}",
            r.text()
        );
        assert_eq!(header_value(&r.text(), "host"), Some(host));
    }
    let r = ask(&weir, "GET", "localhost", 503, "");
    assert_eq!(r.status, 503);
    let expected =
        "GET /?status=503&url=http%3A%2F%2Flocalhost%2Ftest%3Ffoo%3Dbar%26baz%3Dbuz HTTP/1.1";
    assert!(r.text().contains(expected), "{}", r.text());
    assert_eq!(header_value(&r.text(), "host"), Some("localhost"));
}

/// TestHandler "forward all headers by default": the client's fields go with the page request.
#[test]
fn the_client_s_fields_go_with_the_page_request() {
    let (app, pages) = (app(), pages());
    let mw = "  e: { errors: { status: [\"503\"], service: pages, query: /test } }\n";
    let weir = weir_with(&app.url(), &pages.url(), &[("t", "e")], mw);
    let extra = "X-Request-Id: trace-abc\r\nAuthorization: Bearer secret\r\n";
    let r = ask(&weir, "GET", "t", 503, extra);
    let page = r.text();
    assert_eq!(header_value(&page, "x-request-id"), Some("trace-abc"));
    assert_eq!(header_value(&page, "authorization"), Some("Bearer secret"));
    assert_eq!(header_value(&page, "x-forwarded-for"), Some("127.0.0.1"));
}

/// `status_rewrites` (Traefik's `statusRewrites`): the client gets the rewritten status and the
/// query's `{status}` is it; `{originalStatus}` is the status caught.
#[test]
fn a_rewritten_status_is_answered_and_the_original_stays_in_the_query() {
    let (app, pages) = (app(), pages());
    let mw = "  e: { errors: { status: [\"500-599\"], service: pages, query: \"/{status}/{originalStatus}.html\", status_rewrites: { \"502-504\": 500, \"418\": 400 } } }\n";
    let weir = weir_with(&app.url(), &pages.url(), &[("t", "e")], mw);
    let r = ask(&weir, "GET", "t", 503, "");
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("GET /500/503.html HTTP/1.1"),
        "{}",
        r.text()
    );
    let r = ask(&weir, "GET", "t", 501, "");
    assert_eq!(r.status, 501);
    assert!(
        r.text().contains("GET /501/501.html HTTP/1.1"),
        "{}",
        r.text()
    );
}

/// weir's own errors are caught as the app's are: a server that refuses connections (502), a
/// service with no usable server (503), and one that does not answer in time (504).
#[test]
fn weir_s_own_errors_get_the_page_too() {
    let pages = pages();
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let silent = RawUpstream::start(|conn| {
        conn.read_head();
        std::thread::sleep(std::time::Duration::from_secs(3));
    });
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  \
           refused: {{ rule: \"Host(`refused`)\", middlewares: [e], service: refused }}\n  \
           silent: {{ rule: \"Host(`silent`)\", middlewares: [e], service: silent }}\n  \
           none: {{ rule: \"Host(`none`)\", middlewares: [e], service: none }}\n\
         services:\n  \
           refused: {{ servers: [{{ url: \"{refused}\" }}] }}\n  \
           silent: {{ servers: [{{ url: \"{}\" }}], timeouts: {{ response_header: 200ms }} }}\n  \
           none: {{ servers: [] }}\n  \
           pages: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  e: {{ errors: {{ status: [\"502-504\"], service: pages, query: \"/{{status}}.html\" }} }}\n",
        silent.url(),
        pages.url()
    ));
    for (host, status) in [("refused", 502), ("none", 503), ("silent", 504)] {
        let r = get(weir.addr(), host, "/x");
        assert_eq!(r.status, status, "{host}");
        let line = format!("My error page.\nGET /{status}.html HTTP/1.1\r\n");
        assert!(r.text().starts_with(&line), "{host}: {}", r.text());
    }
}

/// When the page service fails, the client gets the caught status with weir's error for the
/// page service, as Traefik answers with its page service's failure under the caught status.
#[test]
fn a_failing_page_service_leaves_the_status_with_weir_s_error() {
    let app = app();
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let mw = "  e: { errors: { status: [\"500-599\"], service: pages } }\n";
    let weir = weir_with(&app.url(), &refused, &[("t", "e")], mw);
    let r = ask(&weir, "GET", "t", 503, "");
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "upstream connection failed\n");
    assert_eq!(r.header("x-app"), None);
    let line = weir.wait_for_line(": errors: ", 1);
    assert!(
        line.ends_with("page service `pages`: upstream connection failed"),
        "{line}"
    );
}

/// A HEAD request gets the page's head alone (the page is asked with a GET, as Traefik asks).
#[test]
fn a_head_request_gets_the_page_s_head_without_its_body() {
    let (app, pages) = (app(), pages());
    let mw = "  e: { errors: { status: [\"503\"], service: pages, query: /page } }\n";
    let weir = weir_with(&app.url(), &pages.url(), &[("t", "e")], mw);
    let r = ask(&weir, "HEAD", "t", 503, "");
    assert_eq!(r.status, 503);
    assert!(r.body.is_empty());
    assert_eq!(r.header("x-page"), Some("yes"));
    let length: usize = r.header("content-length").unwrap().parse().unwrap();
    assert!(length > "My error page.\n".len());
    assert_eq!(pages.count("GET /page "), 1);
}

/// As Traefik nests middlewares: one before `errors` sees the page (its response edits apply),
/// one after it sees only the answer that was replaced. A route without `errors` is untouched.
#[test]
fn middlewares_before_errors_see_the_page_and_those_after_do_not() {
    let (app, pages) = (app(), pages());
    let mws = "  e: { errors: { status: [\"503\"], service: pages } }\n  \
               outer: { headers: { response: { set: { x-outer: \"1\" } } } }\n  \
               inner: { headers: { response: { set: { x-inner: \"1\" } } } }\n";
    let routes = [("t", "outer, e, inner"), ("plain", "outer, inner")];
    let weir = weir_with(&app.url(), &pages.url(), &routes, mws);
    let r = ask(&weir, "GET", "t", 503, "");
    assert_eq!((r.status, r.header("x-page")), (503, Some("yes")));
    assert_eq!(
        (r.header("x-outer"), r.header("x-inner")),
        (Some("1"), None)
    );
    let r = ask(&weir, "GET", "plain", 503, "");
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, "Service Unavailable\n")
    );
    assert_eq!(
        (r.header("x-outer"), r.header("x-inner")),
        (Some("1"), Some("1"))
    );
}

/// `weir check` names an undefined page service where it is written.
#[test]
fn an_undefined_page_service_is_refused_where_it_is_named() {
    let out = weir_check_refuses(
        "errors-service",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n\
         middlewares:\n  e: { errors: { status: [\"500\"], service: nowhere } }\n",
    );
    assert!(
        out.contains(":4:44: middleware `e` names service `nowhere`, which is not defined"),
        "{out}"
    );
}

/// A reload that changes only the page service's servers is followed: the unchanged `errors`
/// middleware asks the new ones (it holds services, so it is built afresh).
#[test]
fn a_reload_that_moves_the_page_service_is_followed() {
    let (app, old_pages) = (app(), pages());
    let new_pages = RawUpstream::answering(|_, _| http_answer(200, &[], "The new page.\n"));
    let mw = "  e: { errors: { status: [\"503\"], service: pages } }\n";
    let weir = weir_with(&app.url(), &old_pages.url(), &[("t", "e")], mw);
    assert!(ask(&weir, "GET", "t", 503, "")
        .text()
        .starts_with("My error page."));
    let moved = std::fs::read_to_string(weir.config_path())
        .unwrap()
        .replace(&old_pages.url(), &new_pages.url());
    std::fs::write(weir.config_path(), moved).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    let r = ask(&weir, "GET", "t", 503, "");
    assert_eq!((r.status, r.text().as_str()), (503, "The new page.\n"));
}

/// With a circuit breaker after `errors` on the router, the breaker counts the answer `errors`
/// replaced (as in Traefik, where it wraps the service inside `errors`): the app's 500s open it
/// although the client gets them rewritten to 418, and the app is then spared while the client
/// still gets the page (the breaker's 503 is caught too).
#[test]
fn a_circuit_breaker_after_errors_counts_the_answer_it_replaced() {
    let pages = pages();
    let up = FlakyUpstream::start();
    up.set(Behaviour::Status(500));
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [e, cb], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n  \
         pages: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n  \
           e: {{ errors: {{ status: [\"500-599\"], service: pages, status_rewrites: {{ \"500-599\": 418 }} }} }}\n  \
           cb: {{ circuit_breaker: {{ expression: \"ResponseCodeRatio(500, 600, 0, 600) > 0.5\", fallback_duration: 30s }} }}\n",
        up.url(),
        pages.url()
    ));
    let mut unchanged = 0;
    for _ in 0..300 {
        let before = up.answered();
        let r = get(weir.addr(), "t", "/x");
        assert_eq!(r.status, 418);
        assert!(r.text().starts_with("My error page.\n"), "{}", r.text());
        unchanged = if up.answered() == before {
            unchanged + 1
        } else {
            0
        };
        if unchanged == 5 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "the breaker never opened: {} answers from the app",
        up.answered()
    );
}
