//! Deadline decisions, on the worker's clock moved by the test: which wait each timeout
//! bounds, what the client is told when it passes (408, 504, a close), that every wait gets
//! its limit afresh, and how a stop ends idle connections. A deadline fires once its limit
//! and one sweep tick (0.1 s) have passed.

use super::{
    a_silent_upstream_gets_504, proxy, respond, run, secs, H2Upstream, Harness, Setup, Step,
    Upstream, GET, HELLO,
};
use crate::io::watch::Waiting;

#[test]
fn client_idle_timeout_closes_a_silent_connection_without_an_answer() {
    run(async {
        let h = respond(HELLO).server("client_idle_timeout: 5s").harness();
        let mut c = h.connect();
        h.wait_out(Waiting::KeepAlive, secs(5.0)).await;
        assert!(c.is_quiet().await, "closed before its limit and a tick");
        h.advance(secs(0.2)).await;
        assert_eq!(c.closed().await, Ok(()));
    });
}

#[test]
fn client_idle_timeout_starts_again_after_each_answer() {
    run(async {
        let h = respond(HELLO).server("client_idle_timeout: 5s").harness();
        let mut c = h.connect();
        h.advance(secs(4.0)).await;
        assert_eq!(c.get("/").await.status(), 200);
        h.advance(secs(4.0)).await;
        assert_eq!(c.get("/").await.status(), 200);
        h.advance(secs(5.2)).await;
        assert_eq!(c.closed().await, Ok(()));
    });
}

#[test]
fn a_head_cut_short_past_client_idle_timeout_gets_408() {
    run(async {
        let h = respond(HELLO).server("client_idle_timeout: 5s").harness();
        let mut c = h.connect();
        c.send("GET / HTTP/1.1\r\nhost: t.te").await;
        h.wait_out(Waiting::RequestHead, secs(5.2)).await;
        let r = c.response().await;
        assert_eq!(r.status(), 408);
        assert!(r.closes());
        assert_eq!(c.closed().await, Ok(()));
    });
}

/// Sends a POST whose body stalls after 3 of its 10 bytes, and waits out a
/// `client_body_timeout` of 5 s: the answer must be 408, and the connection must close.
async fn a_stalled_body_gets_408(setup: Setup) {
    let h = setup.server("client_body_timeout: 5s").harness();
    let mut c = h.connect();
    c.send("POST / HTTP/1.1\r\nhost: t.test\r\ncontent-length: 10\r\n\r\nabc")
        .await;
    h.wait_out(Waiting::RequestBody, secs(5.2)).await;
    let r = c.response().await;
    assert_eq!((r.status(), r.closes()), (408, true));
    assert_eq!(c.closed().await, Ok(()));
}

#[test]
fn client_body_timeout_answers_408_to_a_stalled_body_of_a_local_answer() {
    run(a_stalled_body_gets_408(respond(HELLO)));
}

#[test]
fn client_body_timeout_answers_408_to_a_stalled_body_on_its_way_upstream() {
    run(async {
        let up = Upstream::start([]).await;
        a_stalled_body_gets_408(proxy(&[up.url()])).await;
    });
}

#[test]
fn client_body_timeout_answers_408_to_a_stalled_body_on_its_way_to_an_h2_upstream() {
    run(async {
        let up = H2Upstream::start().await;
        a_stalled_body_gets_408(proxy(&[up.url()]).service("protocol: h2c")).await;
        assert!(up.seen().is_empty());
    });
}

#[test]
fn client_body_timeout_bounds_each_read_not_the_whole_body() {
    run(async {
        let h = respond(HELLO).server("client_body_timeout: 5s").harness();
        let mut c = h.connect();
        c.send("POST / HTTP/1.1\r\nhost: t.test\r\ncontent-length: 3\r\n\r\na")
            .await;
        for byte in ["b", "c"] {
            h.wait_out(Waiting::RequestBody, secs(4.0)).await;
            c.send(byte).await;
        }
        assert_eq!(c.response().await.status(), 200);
    });
}

#[test]
fn response_header_timeout_answers_504() {
    run(a_silent_upstream_gets_504(
        "timeouts: { response_header: 3s }",
        3.0,
    ));
}

#[test]
fn a_stalled_upstream_body_past_timeouts_read_closes_the_client_connection() {
    run(async {
        let stalled = "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
        let up = Upstream::start([Step::Stall(stalled.into())]).await;
        let h = proxy(&[up.url()])
            .service("timeouts: { read: 3s }")
            .harness();
        let mut c = h.connect();
        c.send(GET).await;
        h.wait_out(Waiting::ResponseBody, secs(3.2)).await;
        let r = c.response().await;
        assert_eq!((r.status(), r.text()), (200, "abc"));
        assert_eq!(c.closed().await, Ok(()));
    });
}

/// Sends a GET on a connection that holds only 4 KiB and reads nothing, then moves the clock
/// past a `client_send_timeout` of 5 s: the connection must close with the answer (of
/// `len` bytes, head included) cut short.
async fn cut_off_when_not_read(h: &Harness, len: usize) {
    let mut c = h.connect_small(4096);
    c.send(GET).await;
    h.wait_out(Waiting::ClientWrite, secs(5.2)).await;
    let got = c.rest().await;
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "{}",
        &got[..40.min(got.len())]
    );
    assert!(got.len() < len, "the whole answer went out");
}

#[test]
fn client_send_timeout_disconnects_a_client_that_stops_reading() {
    run(async {
        let body = "x".repeat(200_000);
        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 200000\r\n\r\n{body}");
        let up = Upstream::start([Step::answer(&answer)]).await;
        let h = proxy(&[up.url()])
            .server("client_send_timeout: 5s")
            .harness();
        cut_off_when_not_read(&h, answer.len()).await;
    });
}

#[test]
fn client_send_timeout_disconnects_a_client_that_stops_reading_a_local_answer() {
    run(async {
        let body = "x".repeat(200_000);
        let h = respond(&format!("{{ body: {body} }}"))
            .server("client_send_timeout: 5s")
            .harness();
        cut_off_when_not_read(&h, body.len()).await;
    });
}

#[test]
fn a_stop_closes_an_idle_connection_after_a_grace() {
    run(async {
        let h = respond(HELLO).harness();
        let mut c = h.connect();
        h.waiting_for(Waiting::KeepAlive).await;
        h.stop().await;
        // A second (`DRAIN_GRACE`) for a request already on its way.
        h.waiting_for(Waiting::RequestHead).await;
        assert!(c.is_quiet().await);
        h.advance(secs(1.2)).await;
        assert_eq!(c.closed().await, Ok(()));
    });
}

#[test]
fn a_request_in_the_stop_grace_is_answered_with_connection_close() {
    run(async {
        let h = respond(HELLO).harness();
        let mut c = h.connect();
        assert!(!c.get("/").await.closes());
        h.waiting_for(Waiting::KeepAlive).await;
        h.stop().await;
        let r = c.get("/").await;
        assert_eq!((r.text(), r.closes()), ("hello", true));
        assert_eq!(c.closed().await, Ok(()));
    });
}
