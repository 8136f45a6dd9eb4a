//! Retry decisions of the `service` action (`upstream/mod.rs::forward`): what is tried again
//! on which server, what a request's method and body allow, the budget, and the time limits
//! of a try. Round robin's first pick is the first server, and a retry goes to the next.

use super::{
    a_silent_upstream_gets_504, proxy, refused_url, run, secs, Harness, Step, Upstream, GET,
};
use crate::io::watch::Waiting;

/// Tries sent to another server so far, from the service's counters.
fn retries(h: &Harness) -> u64 {
    h.service("app").cells[0].retries.get()
}

/// A POST with a one-byte body: never sent twice.
const POST: &str = "POST / HTTP/1.1\r\nhost: t.test\r\ncontent-length: 1\r\n\r\nx";

/// Two upstreams acting on `a` and `b`, and a worker proxying to them in that order through a
/// service with `service` lines (`retry: ...`).
async fn two_servers(
    a: Vec<Step>,
    b: Vec<Step>,
    service: &[&str],
) -> (Upstream, Upstream, Harness) {
    let (a, b) = (Upstream::start(a).await, Upstream::start(b).await);
    let setup = service
        .iter()
        .fold(proxy(&[a.url(), b.url()]), |s, l| s.service(l));
    let h = setup.harness();
    (a, b, h)
}

/// A server that refuses connections, then an upstream, through a service with `service`
/// lines.
async fn refused_then_up(service: &[&str]) -> (Upstream, Harness) {
    let up = Upstream::start([]).await;
    let setup = service
        .iter()
        .fold(proxy(&[refused_url(), up.url()]), |s, l| s.service(l));
    (up, setup.harness())
}

/// A server that never answers, then one that answers `from b`, through a service with
/// `service` lines: the answer to a GET once the clock has moved `by` past the first try's
/// wait for a response head, and the second server.
async fn after_a_silent_server(service: &[&str], by: f64) -> (super::Response, Upstream) {
    let stalled = vec![Step::Stall(Vec::new())];
    let (_a, b, h) = two_servers(stalled, vec![Step::ok("from b")], service).await;
    let mut c = h.connect();
    c.send(GET).await;
    h.wait_out(Waiting::ResponseHead, secs(by)).await;
    (c.response().await, b)
}

#[test]
fn a_refused_connection_is_retried_on_the_next_server() {
    run(async {
        let (_up, h) = refused_then_up(&["retry: { attempts: 2 }"]).await;
        let r = h.connect().get("/").await;
        assert_eq!((r.status(), r.text()), (200, "ok"));
        assert_eq!(retries(&h), 1);
        assert_eq!(h.service("app").cells[0].connect_errors.get(), 1);
    });
}

#[test]
fn a_refused_connection_is_answered_when_retry_on_leaves_out_connect_failure() {
    run(async {
        let (up, h) = refused_then_up(&["retry: { attempts: 2, on: [502] }"]).await;
        let r = h.connect().get("/").await;
        assert_eq!(
            (r.status(), r.text()),
            (502, "upstream connection failed\n")
        );
        assert_eq!(up.requests(), 0);
    });
}

#[test]
fn a_post_is_retried_after_a_refused_connection_since_nothing_was_sent() {
    run(async {
        let (up, h) = refused_then_up(&["retry: { attempts: 2 }"]).await;
        assert_eq!(h.connect().request(POST).await.status(), 200);
        assert_eq!(up.seen()[0].body, b"x");
    });
}

#[test]
fn without_retry_a_service_tries_once() {
    run(async {
        let (up, h) = refused_then_up(&[]).await;
        assert_eq!(h.connect().get("/").await.status(), 502);
        assert_eq!((retries(&h), up.requests()), (0, 0));
    });
}

#[test]
fn attempts_bound_the_tries_and_the_last_failure_is_the_answer() {
    run(async {
        let a = Upstream::start([Step::status(503)]).await;
        let b = Upstream::start([Step::status(502)]).await;
        let c = Upstream::start([]).await;
        let h = proxy(&[a.url(), b.url(), c.url()])
            .service("retry: { attempts: 2 }")
            .harness();
        let r = h.connect().get("/").await;
        assert_eq!((r.status(), r.text()), (502, "status 502"));
        assert_eq!((a.requests(), b.requests(), c.requests()), (1, 1, 0));
    });
}

#[test]
fn a_retried_status_goes_to_the_next_server() {
    run(async {
        let retry = ["retry: { attempts: 2, on: [503] }"];
        let (_a, _b, h) =
            two_servers(vec![Step::status(503)], vec![Step::ok("from b")], &retry).await;
        assert_eq!(h.connect().get("/").await.text(), "from b");
        assert_eq!(retries(&h), 1);
    });
}

#[test]
fn a_status_retry_on_leaves_out_is_passed_to_the_client() {
    run(async {
        let retry = ["retry: { attempts: 2 }"];
        let (_a, b, h) = two_servers(vec![Step::status(500)], vec![], &retry).await;
        let r = h.connect().get("/").await;
        assert_eq!((r.status(), r.text()), (500, "status 500"));
        assert_eq!(b.requests(), 0);
    });
}

#[test]
fn a_post_answered_with_a_retried_status_is_not_sent_again() {
    run(async {
        let retry = ["retry: { attempts: 2 }"];
        let (_a, b, h) = two_servers(vec![Step::status(503)], vec![], &retry).await;
        assert_eq!(h.connect().request(POST).await.status(), 503);
        assert_eq!(b.requests(), 0);
    });
}

#[test]
fn a_get_whose_fresh_connection_closes_unanswered_is_retried_elsewhere() {
    run(async {
        let retry = ["retry: { attempts: 2 }"];
        let (a, _b, h) = two_servers(vec![Step::Close], vec![Step::ok("from b")], &retry).await;
        assert_eq!(h.connect().get("/").await.text(), "from b");
        assert_eq!(a.requests(), 1);
    });
}

#[test]
fn a_reset_is_answered_502_when_retry_on_leaves_it_out() {
    run(async {
        let retry = ["retry: { attempts: 2, on: [connect_failure] }"];
        let (_a, b, h) = two_servers(vec![Step::Close], vec![], &retry).await;
        assert_eq!(h.connect().get("/").await.status(), 502);
        assert_eq!(b.requests(), 0);
    });
}

#[test]
fn a_reused_connection_found_dead_sends_a_get_again_on_a_new_one() {
    run(async {
        let up = Upstream::start([Step::ok("first"), Step::Close, Step::ok("again")]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        assert_eq!(c.get("/").await.text(), "first");
        // No `retry`: sending again after a dead pooled connection is not a retry.
        assert_eq!(c.get("/").await.text(), "again");
        let conns: Vec<usize> = up.seen().iter().map(|s| s.conn).collect();
        assert_eq!(conns, [0, 0, 1]);
        assert_eq!(retries(&h), 0);
    });
}

#[test]
fn a_reused_connection_found_dead_does_not_send_a_post_again() {
    run(async {
        let up = Upstream::start([Step::ok("first"), Step::Close]).await;
        let h = proxy(&[up.url()])
            .service("retry: { attempts: 2 }")
            .harness();
        let mut c = h.connect();
        assert_eq!(c.get("/").await.text(), "first");
        assert_eq!(c.request(POST).await.status(), 502);
        assert_eq!((up.requests(), up.connections()), (2, 1));
    });
}

#[test]
fn the_retry_budget_stops_retrying_once_its_bucket_is_empty() {
    run(async {
        let failing = || (0..12).map(|_| Step::status(503)).collect();
        let retry = ["retry: { attempts: 2, on: [503], budget: 1% }"];
        let (a, b, h) = two_servers(failing(), failing(), &retry).await;
        let mut c = h.connect();
        for _ in 0..12 {
            assert_eq!(c.get("/").await.status(), 503);
        }
        // A full bucket holds ten retries; a hundredth of one per request refills too
        // little for an eleventh.
        assert_eq!(retries(&h), 10);
        assert_eq!(a.requests() + b.requests(), 22);
    });
}

#[test]
fn per_try_timeout_fails_a_try_as_a_504() {
    run(a_silent_upstream_gets_504(
        "retry: { attempts: 1, per_try_timeout: 2s }",
        2.0,
    ));
}

#[test]
fn per_try_timeout_sends_a_get_to_the_next_server() {
    run(async {
        let retry = ["retry: { attempts: 2, per_try_timeout: 2s }"];
        let (r, _b) = after_a_silent_server(&retry, 2.2).await;
        assert_eq!(r.text(), "from b");
    });
}

#[test]
fn the_request_timeout_ends_the_action_without_a_retry() {
    run(async {
        let service = ["retry: { attempts: 2 }", "timeouts: { request: 3s }"];
        let (r, b) = after_a_silent_server(&service, 3.2).await;
        assert_eq!(r.status(), 504);
        assert_eq!(b.requests(), 0);
    });
}
