//! The response cache on the real binary, with Debian's nginx as the origin setting the
//! headers under test. Each origin answer carries nginx's `$request_id`, so two answers with
//! the same id are one origin request served twice. Checked here: a fresh answer is stored
//! and served with `Age` and `Cache-Status`, HEAD from a stored GET, `no-store`, `private`,
//! `Set-Cookie` and `Authorization` keep answers out, `Vary` keeps variants apart, an expired
//! answer is fetched again, the client's `no-cache` goes to the origin, an answer over
//! `max_object_size` passes whole without being stored, and an unsafe method's success removes
//! its URL and its `Location` and `Content-Location` (a failure removes nothing).

mod common;
use common::*;

/// The origin: each location sets the headers its name says and answers with its request id.
const ORIGIN: &str = r#"
    location /fresh { add_header cache-control "max-age=60"; return 200 "id=$request_id\n"; }
    location /short { add_header cache-control "max-age=1"; return 200 "id=$request_id\n"; }
    location /nostore { add_header cache-control "no-store"; return 200 "id=$request_id\n"; }
    location /private { add_header cache-control "private, max-age=60"; return 200 "id=$request_id\n"; }
    location /cookie { add_header cache-control "max-age=60"; add_header set-cookie "s=1"; return 200 "id=$request_id\n"; }
    location /vary { add_header cache-control "max-age=60"; add_header vary "accept-language"; return 200 "id=$request_id lang=$http_accept_language\n"; }
    location /big { add_header cache-control "max-age=60"; return 200 "id=$request_id $request_id $request_id $request_id\n"; }
    location /update { add_header content-location /fresh-other; add_header location http://cache.test/fresh-third?x=1; return 200 "updated\n"; }
    location /fresh-keep { add_header cache-control "max-age=60"; if ($request_method = POST) { return 500 "no\n"; } return 200 "id=$request_id\n"; }
    return 200 "id=$request_id\n";
"#;

fn start() -> (Nginx, Weir) {
    let origin = Nginx::with_location(ORIGIN);
    let yaml = format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         caches:\n  main: {{ memory: 16MiB, max_object_size: 100 }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        origin.addr
    );
    let weir = Weir::start(&yaml);
    (origin, weir)
}

fn ask(weir: &Weir, target: &str, extra: &str) -> Resp {
    request(
        weir.addr(),
        &format!("GET {target} HTTP/1.1\r\nHost: cache.test\r\n{extra}Connection: close\r\n\r\n"),
    )
}

fn status_of(resp: &Resp) -> String {
    resp.header("cache-status").unwrap_or("").to_string()
}

#[test]
fn fresh_answers_are_stored_and_served() {
    let (_origin, weir) = start();
    let first = ask(&weir, "/fresh", "");
    assert_eq!(first.status, 200);
    assert_eq!(
        status_of(&first),
        "weir; fwd=uri-miss; fwd-status=200; stored"
    );
    // Two workers share the store: every later request is a hit, whichever worker takes it.
    for _ in 0..6 {
        let again = ask(&weir, "/fresh", "");
        assert_eq!(again.text(), first.text(), "served from the store");
        assert!(
            status_of(&again).starts_with("weir; hit; ttl="),
            "{}",
            status_of(&again)
        );
        let age: u64 = again.header("age").unwrap().parse().unwrap();
        assert!(age <= 2);
    }
    // HEAD is answered from the stored GET, with its length.
    let head = request(
        weir.addr(),
        "HEAD /fresh HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n",
    );
    assert!(
        status_of(&head).starts_with("weir; hit"),
        "{}",
        status_of(&head)
    );
    assert_eq!(
        head.header("content-length"),
        Some(first.text().len().to_string().as_str())
    );
    // The client's `no-cache` goes to the origin (and the new answer is stored).
    let forced = ask(&weir, "/fresh", "Cache-Control: no-cache\r\n");
    assert_ne!(forced.text(), first.text());
    assert!(
        status_of(&forced).contains("fwd=stale"),
        "{}",
        status_of(&forced)
    );
    // Another host is another key.
    let other = request(
        weir.addr(),
        "GET /fresh HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
    );
    assert!(
        status_of(&other).contains("fwd=uri-miss"),
        "{}",
        status_of(&other)
    );
}

#[test]
fn what_must_not_be_stored_is_not() {
    let (_origin, weir) = start();
    for (target, extra, detail) in [
        ("/nostore", "", "no-store"),
        ("/private", "", "private"),
        ("/cookie", "", "set-cookie"),
        (
            "/fresh?auth",
            "Authorization: Bearer x\r\n",
            "authorization",
        ),
        ("/big", "", "too-large"),
    ] {
        let first = ask(&weir, target, extra);
        let second = ask(&weir, target, extra);
        assert_eq!(first.status, 200);
        assert_ne!(
            first.text(),
            second.text(),
            "{target} went to the origin twice"
        );
        assert!(
            status_of(&second).ends_with(&format!("fwd-status=200; detail={detail}")),
            "{target}: {}",
            status_of(&second)
        );
    }
    // The answer over `max_object_size` still arrived whole.
    let big = ask(&weir, "/big", "");
    assert!(big.text().len() > 100, "{}", big.text());
}

#[test]
fn vary_keeps_variants_apart() {
    let (_origin, weir) = start();
    let en = ask(&weir, "/vary", "Accept-Language: en\r\n");
    let fr = ask(&weir, "/vary", "Accept-Language: fr\r\n");
    assert!(en.text().contains("lang=en") && fr.text().contains("lang=fr"));
    assert!(
        status_of(&fr).contains("fwd=vary-miss"),
        "{}",
        status_of(&fr)
    );
    let en_again = ask(&weir, "/vary", "Accept-Language: en\r\n");
    assert_eq!(en_again.text(), en.text());
    let fr_again = ask(&weir, "/vary", "Accept-Language: fr\r\n");
    assert_eq!(fr_again.text(), fr.text());
}

#[test]
fn an_expired_answer_is_fetched_again() {
    let (_origin, weir) = start();
    let first = ask(&weir, "/short", "");
    assert_eq!(ask(&weir, "/short", "").text(), first.text());
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let later = ask(&weir, "/short", "");
    assert_ne!(later.text(), first.text());
    assert!(
        status_of(&later).contains("fwd=stale"),
        "{}",
        status_of(&later)
    );
}

#[test]
fn unsafe_methods_invalidate_what_they_change() {
    let (_origin, weir) = start();
    let send = |method: &str, target: &str| {
        request(
            weir.addr(),
            &format!("{method} {target} HTTP/1.1\r\nHost: cache.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        )
    };
    let stored = |target: &str| {
        let first = ask(&weir, target, "");
        assert_eq!(
            ask(&weir, target, "").text(),
            first.text(),
            "{target} is stored"
        );
        first.text()
    };
    // A failed POST changes nothing; a successful one removes its own URL.
    let keep = stored("/fresh-keep");
    assert_eq!(send("POST", "/fresh-keep").status, 500);
    assert_eq!(ask(&weir, "/fresh-keep", "").text(), keep);
    let fresh = stored("/fresh");
    assert_eq!(send("DELETE", "/fresh").status, 200);
    let after = ask(&weir, "/fresh", "");
    assert_ne!(after.text(), fresh, "DELETE /fresh removed it");
    assert!(
        status_of(&after).contains("fwd=uri-miss"),
        "{}",
        status_of(&after)
    );
    // Content-Location and Location (same host, with its query) go too; others stay.
    let other = stored("/fresh-other");
    let third = stored("/fresh-third?x=1");
    let kept = stored("/fresh-third?x=2");
    assert_eq!(send("POST", "/update").status, 200);
    assert_ne!(ask(&weir, "/fresh-other", "").text(), other);
    assert_ne!(ask(&weir, "/fresh-third?x=1", "").text(), third);
    assert_eq!(ask(&weir, "/fresh-third?x=2", "").text(), kept);
}
