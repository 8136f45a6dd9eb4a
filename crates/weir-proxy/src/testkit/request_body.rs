//! Request bodies on their way upstream (`reply/request_body.rs`): each source (a client's
//! HTTP/1 connection, a body weir holds in memory) framed for each upstream protocol, the
//! answers a body that breaks the limits gets, and which bodies may be sent twice.

use super::{post_after_100_continue, proxy, run, H2Upstream, Harness, Step, Upstream, GET};

/// A chunked POST of `hello world` in two chunks, with a trailer.
const CHUNKED: &str = "POST / HTTP/1.1\r\nhost: t.test\r\ntransfer-encoding: chunked\r\n\r\n\
                       5\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 1\r\n\r\n";

/// A POST of `len` bytes declared by `Content-Length`.
fn post_of(len: usize) -> String {
    let body = "x".repeat(len);
    format!("POST / HTTP/1.1\r\nhost: t.test\r\ncontent-length: {len}\r\n\r\n{body}")
}

/// An Elasticsearch service on `node` (no discovery), whose `_bulk` bodies may be at most
/// `max_body` bytes.
fn elasticsearch(node: &str, max_body: u64) -> Harness {
    Harness::new(&format!(
        "server:\n  workers: 1\n\
         entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: es\n\
         services:\n  es:\n    elasticsearch:\n      hosts: [\"{node}\"]\n      \
         discovery: {{ enabled: false }}\n      bulk: {{ max_body: {max_body} }}\n"
    ))
}

#[test]
fn a_length_delimited_body_goes_to_an_h1_upstream_whole_with_its_length() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        // Larger than one flush of the relay, so it goes in several writes.
        let r = h.connect().request(&post_of(200_000)).await;
        assert_eq!(r.status(), 200);
        let seen = &up.seen()[0];
        assert_eq!(seen.header("content-length"), Some("200000"));
        assert_eq!(seen.header("transfer-encoding"), None);
        assert_eq!(seen.body, "x".repeat(200_000).as_bytes());
    });
}

#[test]
fn a_chunked_body_stays_chunked_to_an_h1_upstream() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        assert_eq!(c.request(CHUNKED).await.status(), 200);
        let seen = &up.seen()[0];
        assert_eq!(seen.header("transfer-encoding"), Some("chunked"));
        assert_eq!(seen.header("content-length"), None);
        assert_eq!(seen.body, b"hello world");
        // The body ended where the client's did: the connection carries the next request.
        assert_eq!(c.request(GET).await.status(), 200);
    });
}

#[test]
fn a_chunked_body_goes_to_an_h2_upstream_as_data_frames_without_a_length() {
    run(async {
        let up = H2Upstream::start().await;
        let h = proxy(&[up.url()]).service("protocol: h2c").harness();
        let mut c = h.connect();
        let r = c.request(CHUNKED).await;
        assert_eq!((r.status(), r.text()), (200, "ok"));
        let seen = &up.seen()[0];
        assert_eq!(seen.body, b"hello world");
        assert_eq!(seen.header("content-length"), None);
        assert_eq!(seen.header("transfer-encoding"), None);
        assert_eq!(c.request(GET).await.status(), 200);
    });
}

#[test]
fn a_length_delimited_body_goes_to_an_h2_upstream_with_its_length() {
    run(async {
        let up = H2Upstream::start().await;
        let h = proxy(&[up.url()]).service("protocol: h2c").harness();
        let r = h.connect().request(&post_of(100_000)).await;
        assert_eq!(r.status(), 200);
        let seen = &up.seen()[0];
        assert_eq!(seen.header("content-length"), Some("100000"));
        assert_eq!(seen.body.len(), 100_000);
        assert!(seen.trailers.is_none());
    });
}

#[test]
fn a_connection_the_upstream_sent_goaway_on_takes_no_new_stream() {
    run(async {
        let up = H2Upstream::start_one_per_connection().await;
        let h = proxy(&[up.url()]).service("protocol: h2c").harness();
        let mut c = h.connect();
        for _ in 0..3 {
            let r = c.request(GET).await;
            assert_eq!((r.status(), r.text()), (200, "ok"));
        }
        assert_eq!(up.seen().len(), 3);
        assert_eq!(
            up.connections(),
            3,
            "each request after a GOAWAY on a new connection"
        );
    });
}

#[test]
fn expect_100_continue_is_answered_before_the_body_goes_to_an_h2_upstream() {
    run(async {
        let up = H2Upstream::start().await;
        let h = proxy(&[up.url()]).service("protocol: h2c").harness();
        post_after_100_continue(&mut h.connect()).await;
        assert_eq!(up.seen()[0].body, b"hello");
    });
}

#[test]
fn a_bulk_body_over_max_body_gets_413_and_nothing_goes_upstream() {
    run(async {
        let up = Upstream::start([]).await;
        let h = elasticsearch(&up.url(), 10);
        let mut c = h.connect();
        let bulk = "POST /_bulk HTTP/1.1\r\nhost: t.test\r\ncontent-type: application/x-ndjson\r\n\
                    content-length: 20\r\n\r\n{\"index\":{}}\n{}\n{}\n\n";
        let r = c.request(bulk).await;
        assert_eq!(r.status(), 413);
        assert!(r.text().contains("bulk.max_body"), "{}", r.text());
        // Read only part-way: the connection cannot carry another request.
        assert!(r.closes());
        assert_eq!(up.requests(), 0);
    });
}

#[test]
fn a_search_body_held_in_memory_is_sent_again_when_a_reused_connection_is_found_dead() {
    run(async {
        let up = Upstream::start([Step::ok("first"), Step::Close, Step::ok("again")]).await;
        let h = elasticsearch(&up.url(), 1000);
        let mut c = h.connect();
        assert_eq!(c.get("/").await.text(), "first");
        let search = "POST /books/_search HTTP/1.1\r\nhost: t.test\r\n\
                      content-length: 2\r\n\r\n{}";
        assert_eq!(c.request(search).await.text(), "again");
        let seen = up.seen();
        let conns: Vec<usize> = seen.iter().map(|s| s.conn).collect();
        assert_eq!(conns, [0, 0, 1]);
        assert_eq!(
            (&seen[1].body[..], &seen[2].body[..]),
            (&b"{}"[..], &b"{}"[..])
        );
        assert_eq!(seen[2].header("content-length"), Some("2"));
    });
}

#[test]
fn a_chunked_post_answered_with_a_retried_status_is_not_sent_again() {
    run(async {
        let (a, b) = (
            Upstream::start([Step::status(503)]).await,
            Upstream::start([]).await,
        );
        let h = proxy(&[a.url(), b.url()])
            .service("retry: { attempts: 2, on: [503] }")
            .harness();
        assert_eq!(h.connect().request(CHUNKED).await.status(), 503);
        assert_eq!((a.requests(), b.requests()), (1, 0));
    });
}
