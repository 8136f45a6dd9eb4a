//! Framing and keep-alive decisions of the HTTP/1 driver: how an answer's body is delimited
//! for the client's version (length, chunked, close), HEAD and bodiless statuses, which
//! headers cross, and when the client connection stays open.

use super::{
    ok, post_after_100_continue, proxy, respond, run, Response, Step, Upstream, GET, HELLO,
};

const CLOSE_DELIMITED: &str = "HTTP/1.1 200 OK\r\n\r\nhello";
const CHUNKED: &str =
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
const GET_10_KEEP_ALIVE: &str = "GET / HTTP/1.0\r\nhost: t.test\r\nconnection: keep-alive\r\n\r\n";

/// The answer to `request` when the upstream answers `answer`, once the same client
/// connection has carried a GET after it on the same upstream connection: nothing of the
/// first exchange was left unread on either.
async fn both_connections_go_on(answer: &str, request: &str) -> Response {
    let up = Upstream::start([Step::answer(answer)]).await;
    let h = proxy(&[up.url()]).harness();
    let mut c = h.connect();
    let r = c.request(request).await;
    assert!(!r.closes());
    assert_eq!(c.get("/").await.text(), "ok");
    assert_eq!(
        up.connections(),
        1,
        "the upstream connection was not reused"
    );
    r
}

/// The answer to `request` when the upstream answers `answer` and closes, once the client
/// connection has closed after it.
async fn ends_with_the_connection(answer: &str, request: &str) -> Response {
    let up = Upstream::start([Step::AnswerAndClose(answer.into())]).await;
    let h = proxy(&[up.url()]).harness();
    let mut c = h.connect();
    let r = c.request(request).await;
    assert!(r.closes());
    assert_eq!(c.closed().await, Ok(()));
    r
}

#[test]
fn a_length_delimited_answer_keeps_its_length_and_the_connection() {
    run(async {
        let r = both_connections_go_on(&ok("hello"), GET).await;
        assert_eq!((r.status(), r.text()), (200, "hello"));
        assert_eq!(r.header("content-length"), Some("5"));
        assert_eq!(r.header("transfer-encoding"), None);
    });
}

#[test]
fn a_close_delimited_answer_is_chunked_to_an_http11_client_that_stays() {
    run(async {
        let up = Upstream::start([Step::AnswerAndClose(CLOSE_DELIMITED.into())]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        let r = c.get("/").await;
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.text(), "hello");
        assert!(!r.closes());
        // The client keeps its connection; the upstream's closed one is not reused.
        assert_eq!(c.get("/").await.text(), "ok");
        assert_eq!(up.connections(), 2);
    });
}

#[test]
fn a_close_delimited_answer_to_an_http10_client_ends_with_the_connection() {
    run(async {
        // Asked for keep-alive, but an HTTP/1.0 client can only see the end as a close.
        let r = ends_with_the_connection(CLOSE_DELIMITED, GET_10_KEEP_ALIVE).await;
        assert_eq!(r.header("transfer-encoding"), None);
        assert_eq!(r.text(), "hello");
    });
}

#[test]
fn a_chunked_answer_to_an_http10_client_is_decoded_and_ends_with_the_connection() {
    run(async {
        let r = ends_with_the_connection(CHUNKED, GET_10_KEEP_ALIVE).await;
        assert_eq!(r.header("transfer-encoding"), None);
        assert_eq!(r.text(), "hello world");
    });
}

#[test]
fn a_chunked_answer_stays_chunked_to_an_http11_client_and_both_connections_stay() {
    run(async {
        let r = both_connections_go_on(CHUNKED, GET).await;
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.text(), "hello world");
    });
}

#[test]
fn a_head_answer_keeps_its_declared_length_and_sends_no_body() {
    run(async {
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n";
        let r = both_connections_go_on(head, "HEAD / HTTP/1.1\r\nhost: t.test\r\n\r\n").await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.header("content-length"), Some("1000"));
        assert!(r.body.is_empty());
    });
}

#[test]
fn a_304_passes_its_length_on_without_a_body() {
    run(async {
        let head = "HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\ncontent-length: 1000\r\n\r\n";
        let r = both_connections_go_on(head, GET).await;
        assert_eq!(r.status(), 304);
        assert_eq!(r.header("content-length"), Some("1000"));
        assert_eq!(r.header("etag"), Some("\"x\""));
        assert!(r.body.is_empty());
    });
}

#[test]
fn a_204_gets_neither_length_nor_chunking() {
    run(async {
        let r = both_connections_go_on("HTTP/1.1 204 No Content\r\n\r\n", GET).await;
        assert_eq!(r.status(), 204);
        assert_eq!(r.header("content-length"), None);
        assert_eq!(r.header("transfer-encoding"), None);
    });
}

#[test]
fn an_http10_client_asking_for_keep_alive_is_told_so_and_kept() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        let r = c.request(GET_10_KEEP_ALIVE).await;
        assert_eq!(r.header("connection"), Some("keep-alive"));
        assert!(c.is_quiet().await);
        assert_eq!(c.request(GET_10_KEEP_ALIVE).await.text(), "ok");
    });
}

#[test]
fn an_http10_client_without_keep_alive_is_closed_after_its_answer() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        let r = c.request("GET / HTTP/1.0\r\nhost: t.test\r\n\r\n").await;
        assert_eq!((r.status(), r.text()), (200, "ok"));
        assert!(r.closes());
        assert_eq!(c.closed().await, Ok(()));
    });
}

#[test]
fn connection_close_from_the_client_closes_after_the_answer() {
    run(async {
        let h = respond(HELLO).harness();
        let mut c = h.connect();
        let r = c
            .request("GET / HTTP/1.1\r\nhost: t.test\r\nconnection: close\r\n\r\n")
            .await;
        assert_eq!(r.text(), "hello");
        assert!(r.closes());
        assert_eq!(c.closed().await, Ok(()));
    });
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    run(async {
        let up = Upstream::start([Step::ok("one"), Step::ok("two")]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        let get = "GET / HTTP/1.1\r\nhost: t.test\r\n\r\n";
        c.send(format!("{get}{get}")).await;
        assert_eq!(c.response().await.text(), "one");
        assert_eq!(c.response().await.text(), "two");
    });
}

#[test]
fn hop_by_hop_headers_are_dropped_both_ways() {
    run(async {
        let answer = "HTTP/1.1 200 OK\r\nconnection: x-secret\r\nx-secret: 1\r\n\
                      keep-alive: timeout=5\r\nx-public: 1\r\ncontent-length: 2\r\n\r\nok";
        let up = Upstream::start([Step::answer(answer)]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        let r = c
            .request(
                "GET / HTTP/1.1\r\nhost: t.test\r\nconnection: x-private\r\nx-private: 1\r\n\
                 keep-alive: timeout=5\r\nx-kept: 1\r\n\r\n",
            )
            .await;
        assert_eq!(r.header("x-public"), Some("1"));
        assert_eq!(r.header("x-secret"), None);
        assert_eq!(r.header("keep-alive"), None);
        let seen = &up.seen()[0];
        assert_eq!(seen.header("x-kept"), Some("1"));
        assert_eq!(seen.header("x-private"), None);
        assert_eq!(seen.header("keep-alive"), None);
    });
}

#[test]
fn a_101_to_a_request_that_did_not_ask_to_upgrade_is_a_502_and_not_reused() {
    run(async {
        let switching = "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\
                         connection: upgrade\r\n\r\n";
        let up = Upstream::start([Step::answer(switching)]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        assert_eq!(c.get("/").await.status(), 502);
        assert_eq!(c.get("/").await.status(), 200);
        assert_eq!(up.connections(), 2);
    });
}

#[test]
fn expect_100_continue_is_answered_by_weir_before_the_body_goes_upstream() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        post_after_100_continue(&mut h.connect()).await;
        let seen = &up.seen()[0];
        assert_eq!(seen.body, b"hello");
        assert_eq!(seen.header("expect"), None);
    });
}

#[test]
fn a_local_answer_drains_the_request_body_and_keeps_the_connection() {
    run(async {
        let h = respond(HELLO).harness();
        let mut c = h.connect();
        let post = "POST / HTTP/1.1\r\nhost: t.test\r\ncontent-length: 9\r\n\r\nGET /x HT";
        let r = c.request(post).await;
        assert_eq!((r.status(), r.text()), (200, "hello"));
        assert!(!r.closes());
        // Had the body been taken for the next request, this would be a 400.
        assert_eq!(c.get("/").await.status(), 200);
    });
}

#[test]
fn a_local_answer_to_head_has_its_length_and_no_body() {
    run(async {
        let h = respond(HELLO).harness();
        let mut c = h.connect();
        let r = c.request("HEAD / HTTP/1.1\r\nhost: t.test\r\n\r\n").await;
        assert_eq!(r.header("content-length"), Some("5"));
        assert!(r.body.is_empty());
        assert_eq!(c.get("/").await.text(), "hello");
    });
}

#[test]
fn a_malformed_head_is_refused_with_400_and_the_connection_closed() {
    run(async {
        let h = respond(HELLO).harness();
        let mut c = h.connect();
        let r = c
            .request("GET / HTTP/1.1\r\nhost: t.test\r\nno colon here\r\n\r\n")
            .await;
        assert_eq!(r.status(), 400);
        assert!(r.closes());
        assert_eq!(c.closed().await, Ok(()));
    });
}
