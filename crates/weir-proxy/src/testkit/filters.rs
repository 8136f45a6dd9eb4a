//! Middleware decisions as a request meets them on its way through a worker
//! (`middlewares/mod.rs`): the path and headers the upstream gets, the headers the client
//! gets, in which order filters apply, and when `redirect_scheme` answers instead.

use super::{proxy, respond, run, Response, Seen, Setup, Step, Upstream, HELLO};
use crate::http::Scheme;

/// The request line and head the upstream saw for `GET target` sent through `setup`'s
/// router (a proxy to a default upstream).
async fn upstream_sees(target: &str, setup: impl FnOnce(Setup) -> Setup) -> Seen {
    let up = Upstream::start([]).await;
    let h = setup(proxy(&[up.url()])).harness();
    assert_eq!(h.connect().get(target).await.status(), 200);
    up.seen().remove(0)
}

#[test]
fn strip_prefix_strips_keeps_the_query_and_names_the_prefix() {
    run(async {
        let seen = upstream_sees("/api/users?page=2", |s| {
            s.middleware("strip", "{ strip_prefix: [/api] }")
        })
        .await;
        assert_eq!(seen.line(), "GET /users?page=2 HTTP/1.1");
        assert_eq!(seen.header("x-forwarded-prefix"), Some("/api"));
    });
}

#[test]
fn strip_prefix_of_the_whole_path_leaves_the_root() {
    run(async {
        let seen = upstream_sees("/api", |s| {
            s.middleware("strip", "{ strip_prefix: [/api] }")
        })
        .await;
        assert_eq!(seen.line(), "GET / HTTP/1.1");
    });
}

#[test]
fn strip_prefix_without_a_match_leaves_the_request_alone() {
    run(async {
        let seen = upstream_sees("/web/x", |s| {
            s.middleware("strip", "{ strip_prefix: [/api] }")
        })
        .await;
        assert_eq!(seen.line(), "GET /web/x HTTP/1.1");
        assert_eq!(seen.header("x-forwarded-prefix"), None);
    });
}

#[test]
fn add_prefix_prepends_to_the_path() {
    run(async {
        let seen =
            upstream_sees("/users?x=1", |s| s.middleware("add", "{ add_prefix: /v2 }")).await;
        assert_eq!(seen.line(), "GET /v2/users?x=1 HTTP/1.1");
    });
}

#[test]
fn replace_path_regex_rewrites_a_matching_path_and_keeps_the_original() {
    run(async {
        let replace = r#"{ replace_path_regex: { regex: "^/u/(.*)", replacement: "/users/$1" } }"#;
        let seen = upstream_sees("/u/7", |s| s.middleware("replace", replace)).await;
        assert_eq!(seen.line(), "GET /users/7 HTTP/1.1");
        assert_eq!(seen.header("x-replaced-path"), Some("/u/7"));
        let seen = upstream_sees("/v/7", |s| s.middleware("replace", replace)).await;
        assert_eq!(seen.line(), "GET /v/7 HTTP/1.1");
        assert_eq!(seen.header("x-replaced-path"), None);
    });
}

#[test]
fn filters_apply_in_the_router_s_order() {
    run(async {
        let seen = upstream_sees("/api/x", |s| {
            s.middleware("strip", "{ strip_prefix: [/api] }")
                .middleware("add", "{ add_prefix: /v2 }")
        })
        .await;
        assert_eq!(seen.line(), "GET /v2/x HTTP/1.1");
        let seen = upstream_sees("/api/x", |s| {
            s.middleware("add", "{ add_prefix: /v2 }")
                .middleware("strip", "{ strip_prefix: [/api] }")
        })
        .await;
        assert_eq!(seen.line(), "GET /v2/api/x HTTP/1.1");
    });
}

#[test]
fn request_headers_are_set_added_and_removed_before_the_upstream() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()])
            .middleware(
                "h",
                "{ headers: { request: { set: { x-set: new }, add: { x-add: two }, \
                 remove: [x-drop] } } }",
            )
            .harness();
        let get = "GET / HTTP/1.1\r\nhost: t.test\r\nx-set: old\r\nx-add: one\r\nx-drop: 1\r\n\r\n";
        h.connect().request(get).await;
        let seen = &up.seen()[0];
        assert_eq!(seen.header("x-set"), Some("new"));
        assert_eq!(seen.header("x-drop"), None);
        let adds: Vec<&str> = seen
            .head
            .lines()
            .filter(|l| l.starts_with("x-add"))
            .collect();
        assert_eq!(adds, ["x-add: one", "x-add: two"]);
    });
}

/// A response-headers middleware setting `x-by: weir` and removing `server`.
const RESPONSE_HEADERS: &str =
    "{ headers: { response: { set: { x-by: weir }, remove: [server] } } }";

#[test]
fn response_headers_are_edited_on_a_proxied_answer() {
    run(async {
        let answer = "HTTP/1.1 200 OK\r\nserver: app/1\r\ncontent-length: 2\r\n\r\nok";
        let up = Upstream::start([Step::answer(answer)]).await;
        let h = proxy(&[up.url()])
            .middleware("h", RESPONSE_HEADERS)
            .harness();
        let r = h.connect().get("/").await;
        assert_eq!((r.header("x-by"), r.header("server")), (Some("weir"), None));
        assert_eq!(r.text(), "ok");
    });
}

#[test]
fn response_headers_are_edited_on_a_local_answer_too() {
    run(async {
        let h = respond("{ body: hello, headers: { server: local } }")
            .middleware("h", RESPONSE_HEADERS)
            .harness();
        let r = h.connect().get("/").await;
        assert_eq!((r.header("x-by"), r.header("server")), (Some("weir"), None));
        assert_eq!(r.text(), "hello");
    });
}

/// The answer to `method target` over `scheme` on a router whose first middleware is
/// `redirect_scheme` to https, with `permanent`.
async fn redirected(scheme: Scheme, permanent: bool, method: &str, target: &str) -> Response {
    let definition = format!("{{ redirect_scheme: {{ scheme: https, permanent: {permanent} }} }}");
    let h = respond(HELLO).middleware("https", &definition).harness();
    let mut c = h.connect_as(scheme);
    let request =
        format!("{method} {target} HTTP/1.1\r\nhost: t.test:8080\r\ncontent-length: 0\r\n\r\n");
    c.request(&request).await
}

#[test]
fn redirect_scheme_sends_a_plain_request_to_https_without_the_port() {
    run(async {
        let r = redirected(Scheme::Http, false, "GET", "/p?q=1").await;
        assert_eq!(r.status(), 302);
        assert_eq!(r.header("location"), Some("https://t.test/p?q=1"));
    });
}

#[test]
fn redirect_scheme_lets_a_request_already_on_https_through() {
    run(async {
        let r = redirected(Scheme::Https, false, "GET", "/p").await;
        assert_eq!((r.status(), r.text()), (200, "hello"));
    });
}

#[test]
fn redirect_scheme_keeps_the_method_of_unsafe_requests_and_says_permanent() {
    run(async {
        for (permanent, method, status) in [
            (false, "POST", 307),
            (true, "POST", 308),
            (true, "GET", 301),
            (false, "HEAD", 302),
        ] {
            let r = redirected(Scheme::Http, permanent, method, "/p").await;
            assert_eq!(r.status(), status, "{method}, permanent: {permanent}");
        }
    });
}

#[test]
fn redirect_scheme_of_an_absolute_form_request_names_its_path_once() {
    run(async {
        let r = redirected(Scheme::Http, false, "GET", "http://t.test/p").await;
        assert_eq!(r.header("location"), Some("https://t.test/p"));
    });
}

#[test]
fn the_forwarding_headers_name_the_client_and_its_scheme() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        let get = "GET / HTTP/1.1\r\nhost: t.test\r\nx-forwarded-for: 10.0.0.1\r\n\r\n";
        h.connect_as(Scheme::Https).request(get).await;
        let seen = &up.seen()[0];
        assert_eq!(seen.header("x-forwarded-for"), Some("10.0.0.1, 192.0.2.7"));
        assert_eq!(seen.header("x-real-ip"), Some("192.0.2.7"));
        assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
        assert_eq!(seen.header("x-forwarded-host"), Some("t.test"));
    });
}
