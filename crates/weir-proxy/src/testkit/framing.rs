//! Framing and keep-alive decisions: the response plan every driver shares
//! (`exchange/plan.rs`: whether a body follows, its length known or not, compression, which
//! headers cross, whether the reply lets the connection stay) and how the HTTP/1 driver frames
//! it for the client's version (length, chunked, close), and when the client connection stays
//! open.

use super::{
    ok, post_after_100_continue, proxy, respond, run, Client, Harness, Response, Step, Upstream,
    GET, HELLO,
};
use crate::exchange::plan::{BodyLength, LocalPlan, ResponsePlan};
use crate::http::codec::{self, Framing, RequestHead};
use crate::http::compress::{self, WHOLE_BODY_LIMIT};
use crate::http::file_body::{FileBody, FileHandle};
use crate::http::local::LocalResponse;
use crate::reply::body_filter::BodyFilter;
use crate::reply::ReplyBody;
use bytes::{Bytes, BytesMut};
use std::rc::Rc;
use weir_config::Compress;

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

// The response plan (`exchange/plan.rs`): what every driver sends for an editable head,
// decided from the request head and the reply alone.

/// A request head as the drivers hand it to the exchange.
fn request_head(raw: &str) -> RequestHead {
    let parsed = codec::parse_request(&mut BytesMut::from(raw));
    parsed.expect("a valid request").expect("a whole head")
}

/// The plan for `answer` (an HTTP/1 response head) with `body`, the answer to `request`,
/// through `compress` (its defaults) when the route has it, for a driver that can send
/// files as they are when `sends_files`.
fn plan_for(
    request: &str,
    answer: &str,
    body: ReplyBody,
    compress: bool,
    sends_files: bool,
) -> ResponsePlan {
    let req = request_head(request);
    let parsed = codec::parse_response(&mut BytesMut::from(answer), req.is_head());
    let mut head = parsed.expect("a valid answer").expect("a whole head");
    let filter = compress
        .then(|| compress::install(&Compress::default(), &req, &mut head))
        .flatten()
        .map(BodyFilter::compress);
    let planned = ResponsePlan::new(&req, head, body, filter, sends_files);
    planned.unwrap_or_else(|_| panic!("the body could not be made ready"))
}

/// A request that accepts gzip and asks for keep-alive, over HTTP/1.`minor`.
fn gzip_get(minor: u8) -> String {
    format!(
        "GET / HTTP/1.{minor}\r\nhost: t.test\r\nconnection: keep-alive\r\n\
         accept-encoding: gzip\r\n\r\n"
    )
}

/// A 200 of `len` bytes of text, or of unknown length (chunked) without one.
fn text_answer(len: Option<u64>) -> String {
    let framing = match len {
        Some(n) => format!("content-length: {n}"),
        None => "transfer-encoding: chunked".to_string(),
    };
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n{framing}\r\n\r\n")
}

/// `len` bytes of a file (zeros), not mapped.
fn zeros(len: u64) -> ReplyBody {
    let file = std::fs::File::open("/dev/zero").expect("/dev/zero opens");
    ReplyBody::File(FileBody {
        file: FileHandle::Worker(Rc::new(file)),
        offset: 0,
        len,
        mapped: None,
    })
}

fn empty() -> ReplyBody {
    ReplyBody::Bytes(Bytes::new())
}

#[test]
fn plan_an_answer_to_head_has_no_body_describes_its_length_and_is_not_compressed() {
    let head = "HEAD / HTTP/1.1\r\nhost: t.test\r\naccept-encoding: gzip\r\n\r\n";
    let plan = plan_for(head, &text_answer(Some(5000)), empty(), true, true);
    assert_eq!(plan.length, BodyLength::None);
    assert_eq!(plan.read, Framing::None);
    assert_eq!(plan.described_length(), Some(&b"5000"[..]));
    assert!(plan.filter.is_none());
    assert!(plan.keeps_connection());
}

#[test]
fn plan_204_and_304_have_no_body_and_a_304_describes_its_length() {
    let no_content = "HTTP/1.1 204 No Content\r\n\r\n";
    let plan = plan_for(GET, no_content, empty(), false, true);
    assert_eq!(plan.length, BodyLength::None);
    assert_eq!(plan.described_length(), None);
    let not_modified = "HTTP/1.1 304 Not Modified\r\ncontent-length: 1000\r\n\r\n";
    let plan = plan_for(GET, not_modified, empty(), true, true);
    assert_eq!(plan.length, BodyLength::None);
    assert_eq!(plan.described_length(), Some(&b"1000"[..]));
    assert!(plan.filter.is_none());
}

#[test]
fn plan_an_unknown_length_is_chunked_to_http11_and_ends_an_http10_connection() {
    for answer in [text_answer(None), "HTTP/1.1 200 OK\r\n\r\n".to_string()] {
        let plan = plan_for(GET, &answer, empty(), false, true);
        assert_eq!(plan.length, BodyLength::Unknown);
        assert!(plan.chunked() && plan.keeps_connection());
        let plan = plan_for(GET_10_KEEP_ALIVE, &answer, empty(), false, true);
        assert_eq!(plan.length, BodyLength::Unknown);
        assert!(!plan.chunked() && !plan.keeps_connection());
    }
}

#[test]
fn plan_a_known_length_is_declared_and_keeps_an_http10_connection() {
    let plan = plan_for(GET_10_KEEP_ALIVE, &ok("hello"), empty(), false, true);
    assert_eq!(plan.length, BodyLength::Known(5));
    assert_eq!(plan.read, Framing::Length(5));
    assert!(!plan.chunked() && plan.keeps_connection());
}

#[test]
fn plan_a_compressed_body_in_memory_is_compressed_whole_and_keeps_a_length() {
    let text = Bytes::from(vec![b'a'; 4000]);
    let body = ReplyBody::Bytes(text);
    let plan = plan_for(&gzip_get(0), &text_answer(Some(4000)), body, true, true);
    let ReplyBody::Bytes(compressed) = &plan.body else {
        panic!("not compressed whole");
    };
    assert!(compressed.len() < 4000);
    assert_eq!(plan.length, BodyLength::Known(compressed.len() as u64));
    assert!(plan.filter.is_none(), "the filter is spent");
    assert_eq!(plan.head.head.get("content-encoding"), Some(&b"gzip"[..]));
    // Its length is known: even an HTTP/1.0 connection stays.
    assert!(plan.keeps_connection());
}

#[test]
fn plan_a_small_compressed_file_is_read_and_compressed_whole() {
    let plan = plan_for(
        &gzip_get(1),
        &text_answer(Some(8192)),
        zeros(8192),
        true,
        true,
    );
    assert!(matches!(plan.body, ReplyBody::Bytes(_)));
    assert!(matches!(plan.length, BodyLength::Known(n) if n < 8192));
}

#[test]
fn plan_a_compressed_stream_has_an_unknown_length() {
    let large = WHOLE_BODY_LIMIT + 1;
    let answer = text_answer(Some(large));
    let plan = plan_for(&gzip_get(1), &answer, zeros(large), true, true);
    assert!(matches!(plan.body, ReplyBody::File(_)), "read whole");
    assert!(plan.filter.is_some());
    assert_eq!(plan.length, BodyLength::Unknown);
    assert_eq!(plan.read, Framing::Length(large));
    assert!(plan.chunked());
    let plan = plan_for(&gzip_get(0), &answer, zeros(large), true, true);
    assert!(!plan.keeps_connection());
}

#[test]
fn plan_without_compression_an_answer_keeps_its_length_and_encoding() {
    let plan = plan_for(GET, &text_answer(Some(4000)), zeros(4000), false, true);
    assert!(matches!(plan.body, ReplyBody::File(_)));
    assert_eq!(plan.length, BodyLength::Known(4000));
    assert_eq!(plan.head.head.get("content-encoding"), None);
    // Asked for, compression does not apply to a body shorter than `min_length`.
    let plan = plan_for(&gzip_get(1), &ok("hello"), empty(), true, true);
    assert!(plan.filter.is_none());
    assert_eq!(plan.length, BodyLength::Known(5));
}

#[test]
fn plan_a_driver_without_sendfile_takes_a_mapped_file_s_bytes() {
    let mapped = || {
        let ReplyBody::File(mut file) = zeros(5) else {
            unreachable!()
        };
        file.mapped = Some(Bytes::from_static(b"hello"));
        ReplyBody::File(file)
    };
    let plan = plan_for(GET, &ok("hello"), mapped(), false, false);
    assert!(matches!(&plan.body, ReplyBody::Bytes(b) if b == "hello"));
    let plan = plan_for(GET, &ok("hello"), mapped(), false, true);
    assert!(matches!(plan.body, ReplyBody::File(_)));
}

#[test]
fn plan_hop_by_hop_fields_those_connection_names_and_the_length_stay_behind() {
    let answer =
        "HTTP/1.1 200 OK\r\nconnection: x-secret\r\nx-secret: 1\r\nkeep-alive: timeout=5\r\n\
                  x-public: 1\r\ntrailer: x-sum\r\ncontent-length: 2\r\n\r\n";
    let plan = plan_for(GET, answer, empty(), false, true);
    let mut names: Vec<Vec<u8>> = Vec::new();
    plan.each_field(|name, _| names.push(name.to_vec()));
    assert_eq!(names, [&b"x-public"[..], b"trailer"]);
}

/// What a client asking over HTTP/1.`minor`, with keep-alive, gets through a proxy with
/// `compress` (its defaults) from an upstream answering 4000 bytes of text with their length:
/// the answer, checked to be compressed, and the connection, kept with what serves it.
async fn compressed_upstream_answer(minor: u8) -> (Response, Client, Harness, Upstream) {
    let text = "a".repeat(4000);
    let answer = format!("{}{text}", text_answer(Some(4000)));
    let up = Upstream::start([Step::answer(&answer)]).await;
    let h = proxy(&[up.url()])
        .middleware("gz", "{ compress: {} }")
        .harness();
    let mut c = h.connect();
    let r = c.request(&gzip_get(minor)).await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.body.len() < 4000);
    (r, c, h, up)
}

#[test]
fn a_compressed_answer_of_unknown_length_is_chunked_and_keeps_an_http11_connection() {
    run(async {
        let (r, mut c, _h, _up) = compressed_upstream_answer(1).await;
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.header("content-length"), None);
        assert!(!r.closes());
        assert_eq!(c.get("/").await.text(), "ok");
    });
}

#[test]
fn a_compressed_answer_to_an_http10_client_ends_with_the_connection() {
    run(async {
        // Asked for keep-alive, but the compressed length is known only at the end.
        let (r, mut c, _h, _up) = compressed_upstream_answer(0).await;
        assert_eq!(r.header("transfer-encoding"), None);
        assert!(r.closes());
        assert_eq!(c.closed().await, Ok(()));
    });
}

#[test]
fn a_compressed_local_answer_keeps_a_length_and_the_connection() {
    run(async {
        let text = "a".repeat(4000);
        let local = format!("{{ body: \"{text}\", headers: {{ content-type: text/plain }} }}");
        let h = respond(&local)
            .middleware("gz", "{ compress: {} }")
            .harness();
        let mut c = h.connect();
        let r = c.request(&gzip_get(0)).await;
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        let length = r.header("content-length").map(|n| n.parse::<usize>());
        assert_eq!(length, Some(Ok(r.body.len())));
        assert_eq!(r.header("connection"), Some("keep-alive"));
        assert!(c.is_quiet().await);
    });
}

#[test]
fn plan_a_local_answer_s_body_follows_unless_the_request_is_head_or_the_body_empty() {
    let hello = LocalResponse::new(200, Vec::new(), "hello");
    assert!(LocalPlan::new(false, &hello, 5).body_follows);
    let head = LocalPlan::new(true, &hello, 5);
    assert!(!head.body_follows);
    assert_eq!(head.declared_length(), Some(5), "HEAD describes the length");
    let empty = LocalResponse::new(200, Vec::new(), "");
    let plan = LocalPlan::new(false, &empty, 0);
    assert!(!plan.body_follows);
    assert_eq!(plan.declared_length(), Some(0));
}

#[test]
fn plan_a_local_204_declares_no_length_and_its_connection_fields_stay_behind() {
    let headers = [
        ("x-kept", "1"),
        ("connection", "close"),
        ("content-length", "9"),
    ];
    let headers = headers
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .to_vec();
    let no_content = LocalResponse::new(204, headers, "");
    let plan = LocalPlan::new(false, &no_content, 0);
    assert_eq!(plan.declared_length(), None);
    let mut names: Vec<Vec<u8>> = Vec::new();
    plan.each_field(|name, _| names.push(name.to_vec()));
    assert_eq!(names, [&b"x-kept"[..]]);
}
