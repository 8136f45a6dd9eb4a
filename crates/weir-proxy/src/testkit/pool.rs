//! Upstream keep-alive decisions (`servers/pool.rs`, `exchange/mod.rs::finish`): which
//! answers leave their connection fit for the next request, and how many idle connections a
//! server keeps.

use super::{eventually, proxy, run, Response, Step, Upstream, OK};

/// The connection each request the upstream saw came on.
fn conns(up: &Upstream) -> Vec<usize> {
    up.seen().iter().map(|s| s.conn).collect()
}

#[test]
fn a_kept_alive_connection_carries_the_next_requests() {
    run(async {
        let up = Upstream::start([]).await;
        let h = proxy(&[up.url()]).harness();
        // From different clients, too: the pool is the worker's.
        for _ in 0..3 {
            assert_eq!(h.connect().get("/").await.status(), 200);
        }
        assert_eq!(conns(&up), [0, 0, 0]);
    });
}

/// Two GETs on one client connection to an upstream that acts on `first` for the first and
/// answers the second with [`OK`], through a service with `service` lines: the first answer,
/// and the upstream connection each request came on.
async fn two_gets(first: Step, service: &[&str]) -> (Response, Vec<usize>) {
    let up = Upstream::start([first]).await;
    let setup = service
        .iter()
        .fold(proxy(&[up.url()]), |s, line| s.service(line));
    let h = setup.harness();
    let mut c = h.connect();
    let r = c.get("/").await;
    assert_eq!(c.get("/").await.text(), "ok");
    (r, conns(&up))
}

#[test]
fn an_answer_with_connection_close_is_not_reused() {
    run(async {
        // The upstream says it closes but leaves the connection open: only the header decides.
        let answer = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let (r, conns) = two_gets(Step::answer(answer), &[]).await;
        assert!(!r.closes(), "the client's connection is not the upstream's");
        assert_eq!(conns, [0, 1]);
    });
}

#[test]
fn an_http10_answer_without_keep_alive_is_not_reused() {
    run(async {
        let answer = "HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok";
        assert_eq!(two_gets(Step::answer(answer), &[]).await.1, [0, 1]);
    });
}

#[test]
fn an_answer_followed_by_unasked_bytes_is_not_reused() {
    run(async {
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA";
        let (r, conns) = two_gets(Step::answer(answer), &[]).await;
        assert_eq!(r.text(), "ok");
        assert_eq!(conns, [0, 1]);
    });
}

#[test]
fn an_answer_cut_short_closes_the_client_connection_and_is_not_reused() {
    run(async {
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
        let up = Upstream::start([Step::AnswerAndClose(answer.into())]).await;
        let h = proxy(&[up.url()]).harness();
        let mut c = h.connect();
        let r = c.get("/").await;
        // The head promised ten bytes; closing is the only way to say they will not come.
        assert_eq!((r.header("content-length"), r.text()), (Some("10"), "abc"));
        assert_eq!(c.closed().await, Ok(()));
        assert_eq!(h.connect().get("/").await.status(), 200);
        assert_eq!(up.connections(), 2);
    });
}

#[test]
fn a_connection_the_upstream_closed_while_idle_is_not_used() {
    run(async {
        assert_eq!(
            two_gets(Step::AnswerAndClose(OK.into()), &[]).await.1,
            [0, 1]
        );
    });
}

#[test]
fn max_idle_per_server_zero_turns_reuse_off() {
    run(async {
        let keepalive = "keepalive: { max_idle_per_server: 0 }";
        assert_eq!(two_gets(Step::answer(OK), &[keepalive]).await.1, [0, 1]);
    });
}

#[test]
fn max_idle_per_server_bounds_the_connections_kept() {
    // Two requests in flight at once open two connections; the pool keeps `max` of them.
    for (max, connections) in [(1, 3), (2, 2)] {
        run(async {
            let held = (0..4).map(|_| Step::Held(OK.into()));
            let up = Upstream::start(held).await;
            let keepalive = format!("keepalive: {{ max_idle_per_server: {max} }}");
            let h = proxy(&[up.url()]).service(&keepalive).harness();
            let (mut a, mut b) = (h.connect(), h.connect());
            for round in 1..=2 {
                let get = "GET / HTTP/1.1\r\nhost: t.test\r\n\r\n";
                a.send(get).await;
                b.send(get).await;
                eventually("both requests upstream", || up.requests() == 2 * round).await;
                up.release();
                assert_eq!(a.response().await.status(), 200);
                assert_eq!(b.response().await.status(), 200);
            }
            assert_eq!(up.connections(), connections, "max_idle_per_server {max}");
        });
    }
}

#[test]
fn each_server_has_its_own_idle_connections() {
    run(async {
        let a = Upstream::start([]).await;
        let b = Upstream::start([]).await;
        let h = proxy(&[a.url(), b.url()]).harness();
        let mut c = h.connect();
        for _ in 0..4 {
            c.get("/").await;
        }
        assert_eq!((a.requests(), b.requests()), (2, 2));
        assert_eq!((a.connections(), b.connections()), (1, 1));
    });
}
