//! The response cache on the real binary, with Debian's nginx as the origin setting the
//! headers under test. Each origin answer carries nginx's `$request_id`, so two answers with
//! the same id are one origin request served twice. Checked here: a fresh answer is stored
//! and served with `Age` and `Cache-Status`, HEAD from a stored GET, `no-store`, `private`,
//! `Set-Cookie` and `Authorization` keep answers out, the fields `no-cache="..."` names stay
//! out of hits, a 503 with `max-age` is stored, `Vary` keeps variants apart, an expired
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
    location /swr { add_header cache-control "max-age=1, stale-while-revalidate=30"; return 200 "id=$request_id\n"; }
    location /sie { add_header cache-control "max-age=1, stale-if-error=60"; return 200 "id=$request_id\n"; }
    location /nocache-field { add_header cache-control 'max-age=60, no-cache="x-secret"'; add_header x-secret s; add_header x-kept k; return 200 "id=$request_id\n"; }
    location /unavailable { add_header cache-control "max-age=60" always; return 503 "id=$request_id\n"; }
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
    // Zero, or one when a second boundary fell between the origin's `Date` and the answer.
    let age: u64 = first.header("age").unwrap().parse().unwrap();
    assert!(age <= 1, "{age}");
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
fn no_cache_fields_are_left_out_and_any_status_with_freshness_is_stored() {
    let (_origin, weir) = start();
    // `no-cache="x-secret"`: the first answer is the origin's; hits go without the field.
    let first = ask(&weir, "/nocache-field", "");
    assert_eq!(first.header("x-secret"), Some("s"));
    let hit = ask(&weir, "/nocache-field", "");
    assert_eq!(hit.text(), first.text());
    assert!(
        status_of(&hit).starts_with("weir; hit"),
        "{}",
        status_of(&hit)
    );
    assert_eq!(hit.header("x-secret"), None);
    assert_eq!(hit.header("x-kept"), Some("k"));
    // A 503 with explicit freshness is stored like any final status (RFC 9111 §3).
    let error = ask(&weir, "/unavailable", "");
    assert_eq!(error.status, 503);
    let again = ask(&weir, "/unavailable", "");
    assert_eq!((again.status, again.text()), (503, error.text()));
    assert!(
        status_of(&again).starts_with("weir; hit"),
        "{}",
        status_of(&again)
    );
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

/// nginx serving the files under a fresh folder (its `ETag`, `Last-Modified`, conditionals and
/// ranges), each answer with `max-age` and its request id in `x-origin-id`, every request
/// written to `access.log` in that folder; and weir caching it.
fn file_origin(max_age: u32, location_extra: &str) -> (Nginx, Weir, std::path::PathBuf) {
    let dir = temp_dir("cache-origin");
    let origin = Nginx::with_location(&format!(
        "root {dir}; access_log {dir}/access.log; add_header cache-control \"max-age={max_age}\"; \
         add_header x-origin-id $request_id; {location_extra}",
        dir = dir.display()
    ));
    let yaml = format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         caches:\n  main: {{ memory: 64MiB, max_object_size: 1MiB, purge: {{ allow: [127.0.0.1/32] }} }}\n  \
         closed: {{ memory: 1MiB, max_object_size: 64KiB, purge: {{ allow: [10.0.0.0/8] }} }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n  \
         closed: {{ rule: \"PathPrefix(`/closed`)\", service: origin, cache: closed }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        origin.addr
    );
    (origin, Weir::start(&yaml), dir)
}

/// The origin's access-log lines once it has written at least `expected` (nginx writes a line
/// after its answer is sent, so a client can be faster than the log), and a moment more for
/// any line beyond them.
fn origin_log(dir: &std::path::Path, expected: usize) -> Vec<String> {
    let read = || -> Vec<String> {
        std::fs::read_to_string(dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while read().len() < expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    read()
}

#[test]
fn conditions_and_ranges_are_answered_from_the_store() {
    let (_origin, weir, dir) = file_origin(60, "");
    std::fs::write(dir.join("a.txt"), "hello, cached world\n").unwrap();
    // A miss asked for a range: the origin is asked for the whole file, which is stored, and
    // the range is cut from it.
    let part = ask(&weir, "/a.txt", "Range: bytes=0-4\r\n");
    assert_eq!(part.status, 206);
    assert_eq!(part.text(), "hello");
    assert_eq!(part.header("content-range"), Some("bytes 0-4/20"));
    assert_eq!(
        status_of(&part),
        "weir; fwd=uri-miss; fwd-status=200; stored"
    );
    let log = origin_log(&dir, 1);
    assert_eq!(log.len(), 1);
    assert!(log[0].contains("\" 200 20 "), "{}", log[0]);
    let whole = ask(&weir, "/a.txt", "");
    assert_eq!(whole.text(), "hello, cached world\n");
    let etag = whole.header("etag").unwrap().to_string();
    let modified = whole.header("last-modified").unwrap().to_string();
    for (extra, status, body) in [
        (format!("If-None-Match: {etag}\r\n"), 304, ""),
        (format!("If-None-Match: \"x\", W/{etag}\r\n"), 304, ""),
        (format!("If-Modified-Since: {modified}\r\n"), 304, ""),
        (
            "If-None-Match: \"other\"\r\n".into(),
            200,
            "hello, cached world\n",
        ),
        (
            "If-Match: \"other\"\r\n".into(),
            412,
            "precondition failed\n",
        ),
        ("Range: bytes=-6\r\n".into(), 206, "world\n"),
        ("Range: bytes=100-\r\n".into(), 416, ""),
        (
            "Range: bytes=0-4\r\nIf-Range: \"stale\"\r\n".into(),
            200,
            "hello, cached world\n",
        ),
        (
            format!("Range: bytes=7-12\r\nIf-Range: {etag}\r\n"),
            206,
            "cached",
        ),
    ] {
        let answer = ask(&weir, "/a.txt", &extra);
        assert_eq!(answer.status, status, "{extra}");
        assert_eq!(answer.text(), body, "{extra}");
        if status != 412 && status != 416 {
            assert!(status_of(&answer).starts_with("weir; hit"), "{extra}");
        }
    }
    let many = ask(&weir, "/a.txt", "Range: bytes=0-1,7-8\r\n");
    assert_eq!(many.status, 206);
    assert!(many
        .header("content-type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    assert!(many
        .text()
        .contains("content-range: bytes 7-8/20\r\n\r\nca\r\n"));
    assert_eq!(
        origin_log(&dir, 1).len(),
        1,
        "all from the one stored answer"
    );
}

#[test]
fn a_stale_answer_is_revalidated_and_a_304_refreshes_it() {
    let (_origin, weir, dir) = file_origin(1, "");
    std::fs::write(dir.join("b.txt"), "validated by etag\n").unwrap();
    let first = ask(&weir, "/b.txt", "");
    let first_id = first.header("x-origin-id").unwrap().to_string();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let again = ask(&weir, "/b.txt", "");
    assert_eq!(status_of(&again), "weir; fwd=stale; fwd-status=304; stored");
    assert_eq!(again.text(), first.text());
    // The 304's fields replaced the stored ones; the stored body stayed.
    let second_id = again.header("x-origin-id").unwrap().to_string();
    assert_ne!(second_id, first_id);
    let hit = ask(&weir, "/b.txt", "");
    assert!(
        status_of(&hit).starts_with("weir; hit"),
        "{}",
        status_of(&hit)
    );
    assert_eq!(hit.header("x-origin-id"), Some(second_id.as_str()));
    let log = origin_log(&dir, 2);
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log[1].contains("\" 304 "),
        "a conditional request: {}",
        log[1]
    );
    // A changed file: the conditional request gets the new body, which replaces the old.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    std::fs::write(dir.join("b.txt"), "a new version of the file\n").unwrap();
    let changed = ask(&weir, "/b.txt", "");
    assert_eq!(changed.text(), "a new version of the file\n");
    assert_eq!(
        status_of(&changed),
        "weir; fwd=stale; fwd-status=200; stored"
    );
}

#[test]
fn a_chunked_answer_is_stored_whole() {
    let (_origin, weir, dir) = file_origin(
        60,
        "gzip on; gzip_min_length 1; gzip_types text/plain; gzip_vary on;",
    );
    let text = "compressible line of text\n".repeat(2000);
    std::fs::write(dir.join("c.txt"), &text).unwrap();
    let gzip = "Accept-Encoding: gzip\r\n";
    let first = ask(&weir, "/c.txt", gzip);
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    assert_eq!(
        status_of(&first),
        "weir; fwd=uri-miss; fwd-status=200; stored"
    );
    let again = ask(&weir, "/c.txt", gzip);
    assert!(
        status_of(&again).starts_with("weir; hit"),
        "{}",
        status_of(&again)
    );
    assert_eq!(again.body, first.body);
    // The plain variant is another entry (`Vary: Accept-Encoding`).
    let plain = ask(&weir, "/c.txt", "");
    assert_eq!(plain.text(), text);
    assert!(
        status_of(&plain).contains("fwd=vary-miss"),
        "{}",
        status_of(&plain)
    );
}

#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_behind() {
    let (_origin, weir) = start();
    let first = ask(&weir, "/swr", "");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let stale = ask(&weir, "/swr", "");
    assert_eq!(stale.text(), first.text());
    assert!(
        status_of(&stale).ends_with("; detail=stale-while-revalidate"),
        "{}",
        status_of(&stale)
    );
    // The background request stored a fresh answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let later = ask(&weir, "/swr", "");
        if later.text() != first.text() {
            assert!(
                status_of(&later).starts_with("weir; hit; ttl="),
                "{}",
                status_of(&later)
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never refreshed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn stale_if_error_answers_when_the_origin_is_down() {
    let (origin, weir) = start();
    let kept = ask(&weir, "/sie", "");
    let gone = ask(&weir, "/short", "");
    assert_eq!(gone.status, 200);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    drop(origin);
    let stale = ask(&weir, "/sie", "");
    assert_eq!(stale.status, 200);
    assert_eq!(stale.text(), kept.text());
    assert_eq!(
        status_of(&stale),
        "weir; fwd=stale; fwd-status=502; detail=stale-if-error"
    );
    // Without `stale-if-error`, the error is the answer.
    assert_eq!(ask(&weir, "/short", "").status, 502);
}

#[test]
fn a_stampede_on_a_cold_key_makes_one_origin_request() {
    // 200 KB at 100 KB/s: the origin takes about two seconds, while 500 clients ask.
    let (_origin, weir, dir) = file_origin(60, "limit_rate 100k;");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("cold.bin"), &body).unwrap();
    let start = std::sync::Arc::new(std::sync::Barrier::new(500));
    let clients: Vec<_> = (0..500)
        .map(|_| {
            let start = start.clone();
            let addr = weir.addr();
            std::thread::spawn(move || {
                start.wait();
                request(
                    addr,
                    "GET /cold.bin HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n",
                )
            })
        })
        .collect();
    let mut hits = 0;
    for client in clients {
        let answer = client.join().unwrap();
        assert_eq!(answer.status, 200);
        assert!(answer.body == body, "the whole body");
        hits += usize::from(status_of(&answer).starts_with("weir; hit"));
    }
    assert_eq!(origin_log(&dir, 1).len(), 1, "exactly one origin request");
    assert_eq!(hits, 499);
}

#[test]
fn purge_removes_a_url_a_prefix_or_a_tag_from_allowed_addresses() {
    let (_origin, weir, dir) = file_origin(60, "location /tagged/ { add_header cache-tag \"red, blue\"; add_header cache-control max-age=60; }");
    for path in [
        "p/one.txt",
        "p/two.txt",
        "q.txt",
        "tagged/a.txt",
        "tagged/b.txt",
        "closed.txt",
    ] {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, path).unwrap();
    }
    let stored = |target: &str| {
        ask(&weir, target, "");
        status_of(&ask(&weir, target, "")).starts_with("weir; hit")
    };
    let purge = |target: &str, extra: &str| {
        request(
            weir.addr(),
            &format!(
                "PURGE {target} HTTP/1.1\r\nHost: cache.test\r\n{extra}Connection: close\r\n\r\n"
            ),
        )
    };
    for target in [
        "/p/one.txt",
        "/p/two.txt",
        "/q.txt",
        "/tagged/a.txt",
        "/tagged/b.txt",
    ] {
        assert!(stored(target), "{target}");
    }
    let one = purge("/q.txt", "");
    assert_eq!((one.status, one.text()), (200, "{\"purged\":1}\n".into()));
    assert!(status_of(&ask(&weir, "/q.txt", "")).contains("fwd=uri-miss"));
    assert!(status_of(&ask(&weir, "/p/one.txt", "")).starts_with("weir; hit"));
    let prefix = purge("/p/*", "");
    assert_eq!(prefix.text(), "{\"purged\":2}\n");
    let tag = purge("/", "Cache-Tag: green, blue\r\n");
    assert_eq!(tag.text(), "{\"purged\":2}\n");
    for target in ["/p/one.txt", "/tagged/a.txt", "/tagged/b.txt"] {
        assert!(
            status_of(&ask(&weir, target, "")).contains("fwd=uri-miss"),
            "{target} was purged"
        );
    }
    // A cache whose `purge.allow` does not list 127.0.0.1 refuses.
    assert!(stored("/closed.txt"));
    assert_eq!(purge("/closed.txt", "").status, 403);
    assert!(status_of(&ask(&weir, "/closed.txt", "")).starts_with("weir; hit"));
}

/// Every file under the disk tier's folder but its temporary ones.
fn cache_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for folder in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if folder.file_name() == "tmp" || !folder.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(folder.path()).unwrap().flatten() {
            files.push(file.path());
        }
    }
    files
}

#[test]
fn the_disk_tier_survives_restarts_and_never_serves_a_torn_file() {
    let files = temp_dir("cache-disk-origin");
    std::fs::write(files.join("page.txt"), "kept across restarts\n").unwrap();
    let slow: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::create_dir_all(files.join("slow")).unwrap();
    std::fs::write(files.join("slow/big.bin"), &slow).unwrap();
    let headers = "add_header cache-control \"max-age=600\"; add_header x-origin-id $request_id;";
    let origin = Nginx::with_location(&format!(
        "root {}; {headers} location /slow/ {{ limit_rate 100k; {headers} }}",
        files.display()
    ));
    let store = temp_dir("cache-disk");
    let yaml = format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         caches:\n  main: {{ memory: 16MiB, disk: {{ path: \"{}\", size: 64MiB }} }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        store.display(),
        origin.addr
    );
    let id = |r: &Resp| r.header("x-origin-id").unwrap_or("").to_string();
    let first = {
        let weir = Weir::start(&yaml);
        let first = ask(&weir, "/page.txt", "");
        assert!(
            status_of(&first).ends_with("; stored"),
            "{}",
            status_of(&first)
        );
        // The file is written behind the answer; wait for it, then kill -9.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while cache_files(&store).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "no cache file written"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        first
    };
    // A new process answers from the file: the origin is not asked.
    {
        let weir = Weir::start(&yaml);
        let again = ask(&weir, "/page.txt", "");
        assert!(
            status_of(&again).starts_with("weir; hit"),
            "{}",
            status_of(&again)
        );
        assert_eq!((again.text(), id(&again)), (first.text(), id(&first)));
        // kill -9 while a 300 KB answer is still arriving from the origin (3 s at 100 KB/s).
        let addr = weir.addr();
        let pending = std::thread::spawn(move || {
            let mut conn = Conn::open(addr);
            conn.send(b"GET /slow/big.bin HTTP/1.1\r\nHost: cache.test\r\n\r\n");
            conn.read(false)
        });
        std::thread::sleep(std::time::Duration::from_millis(700));
        weir.signal("KILL");
        assert!(
            pending.join().unwrap().is_none(),
            "no answer from a killed weir"
        );
    }
    // Tear the stored file (cut it short) and leave a half-written temporary file behind, as
    // a process that is gone (its pid is over Linux's largest) would.
    let stored = cache_files(&store);
    assert_eq!(stored.len(), 1, "only the page was written: {stored:?}");
    let whole = std::fs::read(&stored[0]).unwrap();
    std::fs::write(&stored[0], &whole[..whole.len() / 2]).unwrap();
    std::fs::write(
        store.join("tmp").join("0123456789abcdef.4194305.0"),
        &whole[..10],
    )
    .unwrap();
    let weir = Weir::start(&yaml);
    let refetched = ask(&weir, "/page.txt", "");
    assert_eq!(refetched.text(), first.text());
    assert_ne!(id(&refetched), id(&first), "the torn file was not served");
    assert!(
        status_of(&refetched).contains("fwd=uri-miss"),
        "{}",
        status_of(&refetched)
    );
    assert!(!store
        .join("tmp")
        .join("0123456789abcdef.4194305.0")
        .exists());
    let big = ask(&weir, "/slow/big.bin", "");
    assert!(big.body == slow, "the whole body after the killed fill");
    assert!(
        status_of(&big).contains("fwd=uri-miss"),
        "{}",
        status_of(&big)
    );
}

#[test]
fn http2_clients_get_hits_ranges_and_304s_from_the_store() {
    let (origin, _weir, dir) = file_origin(60, "");
    std::fs::write(dir.join("h2.txt"), "served over HTTP/2 from the store\n").unwrap();
    let yaml = format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         caches:\n  main: {{ memory: 16MiB }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        origin.addr
    );
    let weir = Weir::start(&yaml);
    let url = format!("http://{}/h2.txt", weir.addr());
    let curl = |extra: &[&str]| {
        let args: Vec<&str> = ["--http2-prior-knowledge"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        String::from_utf8_lossy(&curl_bytes(&args, &url)).into_owned()
    };
    let first = curl(&[]);
    assert!(first.starts_with("HTTP/2 200"), "{first}");
    assert!(
        first.contains("cache-status: weir; fwd=uri-miss; fwd-status=200; stored"),
        "{first}"
    );
    let hit = curl(&[]);
    assert!(hit.contains("cache-status: weir; hit"), "{hit}");
    assert!(
        hit.ends_with("\r\n\r\nserved over HTTP/2 from the store\n"),
        "{hit}"
    );
    let part = curl(&["-H", "Range: bytes=0-5"]);
    assert!(
        part.starts_with("HTTP/2 206") && part.ends_with("served"),
        "{part}"
    );
    let etag = hit
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .unwrap()
        .trim()
        .to_string();
    let not_modified = curl(&["-H", &format!("If-None-Match: {etag}")]);
    assert!(not_modified.starts_with("HTTP/2 304"), "{not_modified}");
    assert_eq!(origin_log(&dir, 1).len(), 1);
}

#[test]
fn compression_runs_after_the_cache_on_hits_too() {
    let (origin, _weir, dir) = file_origin(60, "");
    let text = "a line that compresses well\n".repeat(400);
    std::fs::write(dir.join("text.txt"), &text).unwrap();
    let yaml = format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         caches:\n  main: {{ memory: 16MiB }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main, middlewares: [gz] }}\n\
         middlewares:\n  gz: {{ compress: {{ algorithms: [gzip] }} }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        origin.addr
    );
    let weir = Weir::start(&yaml);
    let gzip = "Accept-Encoding: gzip\r\n";
    let first = ask(&weir, "/text.txt", gzip);
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    assert!(
        status_of(&first).ends_with("; stored"),
        "{}",
        status_of(&first)
    );
    // The store holds what the origin sent: a client without gzip gets it plain, from the
    // store; a gzip client's hit is compressed again.
    let plain = ask(&weir, "/text.txt", "");
    assert!(
        status_of(&plain).starts_with("weir; hit"),
        "{}",
        status_of(&plain)
    );
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.text(), text);
    let again = ask(&weir, "/text.txt", gzip);
    assert!(
        status_of(&again).starts_with("weir; hit"),
        "{}",
        status_of(&again)
    );
    assert_eq!(again.header("content-encoding"), Some("gzip"));
    assert!(again.body.len() < text.len() / 4);
    assert_eq!(again.body, first.body);
    assert_eq!(origin_log(&dir, 1).len(), 1);
}

/// curl's answer (head and body, as bytes) for `url` with `args`, for the host `cache.test`.
fn curl_bytes(args: &[&str], url: &str) -> Vec<u8> {
    curl_ok(&[&["-D", "-", "-H", "Host: cache.test"], args, &[url]].concat())
}

#[test]
fn large_bodies_are_sent_from_their_memory_files_over_every_path() {
    let (origin, _weir, dir) = file_origin(60, "");
    // Over 32 KiB, a stored body is kept in its own memory file; hits on a plain socket send
    // it by sendfile, TLS, HTTP/2 and compression take the bytes of its mapping.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    let text = "a line of a large text that compresses well\n".repeat(2000);
    std::fs::write(dir.join("big.txt"), &text).unwrap();
    let tls_dir = temp_dir("cache-tls");
    let cert = make_cert(&tls_dir, "site", &["site.test"], false);
    let yaml = format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n  \
         h2: {{ address: \"127.0.0.1:0\", h2c: true }}\n  \
         websecure: {{ address: \"127.0.0.1:0\", tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }} }}\n\
         caches:\n  main: {{ memory: 16MiB, max_object_size: 1MiB }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main, middlewares: [gz] }}\n\
         middlewares:\n  gz: {{ compress: {{ algorithms: [gzip] }} }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        cert.cert.display(),
        cert.key.display(),
        origin.addr
    );
    let weir = Weir::start(&yaml);
    let web = weir.addrs["web"];
    let first = request(
        web,
        "GET /big.bin HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n",
    );
    assert!(
        status_of(&first).ends_with("; stored"),
        "{}",
        status_of(&first)
    );
    assert!(first.body == big, "the miss carries the whole body");
    // Hits on one keep-alive connection: each body whole, and the next request still parsed
    // (the file sent exactly its length).
    let mut conn = Conn::open(web);
    for _ in 0..3 {
        conn.send(b"GET /big.bin HTTP/1.1\r\nHost: cache.test\r\n\r\n");
        let hit = conn.read(false).expect("a hit");
        assert!(
            status_of(&hit).starts_with("weir; hit"),
            "{}",
            status_of(&hit)
        );
        assert_eq!(hit.header("content-length"), Some("200000"));
        assert!(hit.body == big, "a hit carries the whole body");
    }
    conn.send(b"HEAD /big.bin HTTP/1.1\r\nHost: cache.test\r\n\r\n");
    let head = conn.read(true).expect("a HEAD answer");
    assert_eq!(
        (head.header("content-length"), head.body.len()),
        (Some("200000"), 0)
    );
    let part = ask(&weir, "/big.bin", "Range: bytes=150000-150099\r\n");
    assert_eq!(part.status, 206);
    assert!(
        part.body == big[150_000..150_100],
        "one range from the file"
    );
    let parts = ask(&weir, "/big.bin", "Range: bytes=0-9,199990-199999\r\n");
    assert_eq!(parts.status, 206);
    let tail = &big[199_990..];
    assert!(
        parts.body.windows(tail.len()).any(|w| w == tail)
            && parts.body.windows(10).any(|w| w == &big[..10]),
        "both ranges in the multipart body"
    );
    // HTTP/2 and TLS hits, whole.
    let h2_url = format!("http://{}/big.bin", weir.addrs["h2"]);
    let h2 = curl_bytes(&["--http2-prior-knowledge"], &h2_url);
    let h2_head = String::from_utf8_lossy(&h2[..h2.len() - big.len()]).into_owned();
    assert!(
        h2_head.starts_with("HTTP/2 200") && h2_head.contains("cache-status: weir; hit"),
        "the HTTP/2 answer is a hit: {h2_head}"
    );
    assert!(h2.ends_with(&big), "the HTTP/2 hit carries the whole body");
    // A range over HTTP/2 is cut from the mapping.
    let h2_part = curl_bytes(
        &[
            "--http2-prior-knowledge",
            "-H",
            "Range: bytes=150000-150099",
        ],
        &h2_url,
    );
    assert!(h2_part.starts_with(b"HTTP/2 206"));
    assert!(
        h2_part.ends_with(&big[150_000..150_100]),
        "the HTTP/2 range"
    );
    let port = weir.addrs["websecure"].port();
    let resolve = format!("site.test:{port}:127.0.0.1");
    let cacert = cert.cert.display().to_string();
    let tls_url = format!("https://site.test:{port}/big.bin");
    let tls = curl_bytes(&["--cacert", &cacert, "--resolve", &resolve], &tls_url);
    let tls_head = String::from_utf8_lossy(&tls[..tls.len() - big.len()]).into_owned();
    assert!(
        tls_head.contains("cache-status: weir; hit"),
        "the TLS answer is a hit: {tls_head}"
    );
    assert!(tls.ends_with(&big), "the TLS hit carries the whole body");
    // A large text: stored as sent, compressed on the hit from the file.
    assert!(status_of(&ask(&weir, "/big.txt", "")).ends_with("; stored"));
    let gzipped = ask(&weir, "/big.txt", "Accept-Encoding: gzip\r\n");
    assert!(
        status_of(&gzipped).starts_with("weir; hit"),
        "{}",
        status_of(&gzipped)
    );
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    let mut plain = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(&gzipped.body[..]),
        &mut plain,
    )
    .unwrap();
    assert!(plain == text, "the compressed hit decompresses to the file");
    assert_eq!(
        origin_log(&dir, 2).len(),
        2,
        "the origin was asked once per file"
    );
}
