//! End-to-end `buffering`: request bodies over `max_request_body_bytes` answered 413 (by
//! their declared length before anything is read, or once a chunked body passes the limit),
//! bodies sent upstream with their length, answers over `max_response_body_bytes` replaced by
//! a 500, over HTTP/1.1 and HTTP/2, and `retry_expression` sending a request again. Cases
//! ported from Traefik's `pkg/middlewares/buffering/buffering_test.go` and vulcand/oxy's
//! `buffer/buffer_test.go` and `buffer/retry_test.go` say which test they come from.

mod common;
use common::*;

/// A config whose routes `/open` (no middleware) and everything else (behind `buffering`
/// with `settings`) go to `servers` (`{ url: ... }` items) with `service_extra` keys.
fn buffering_config(servers: &[String], settings: &str, service_extra: &str) -> String {
    let servers: Vec<String> = servers
        .iter()
        .map(|url| format!("{{ url: \"{url}\" }}"))
        .collect();
    format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         routers:\n\
         \x20 open: {{ rule: \"PathPrefix(`/open`)\", service: app }}\n\
         \x20 buffered: {{ rule: \"PathPrefix(`/`)\", priority: 1, middlewares: [buffer], service: app }}\n\
         services:\n  app: {{ servers: [{}]{service_extra} }}\n\
         middlewares:\n  buffer:\n    buffering: {settings}\n",
        servers.join(", ")
    )
}

fn start(up: &Upstream, settings: &str) -> Weir {
    Weir::start(&buffering_config(&[up.url()], settings, ""))
}

fn post(weir: &Weir, target: &str, body: &str, extra: &str) -> Resp {
    request(
        weir.addr(),
        &format!(
            "POST {target} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// TestBuffering, each case: a 127-byte body through unlimited buffering (200), through
/// `max_request_body_bytes: 1` (413, oxy's status text as the body, the server never asked),
/// and an answer through `max_response_body_bytes: 1` (500).
#[test]
fn traefik_buffering_cases() {
    let payload: String = (0..127)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let up = Upstream::start("app");
    let weir = start(&up, "{}");
    let resp = post(&weir, "/x", &payload, "");
    assert_eq!(resp.status, 200, "Unlimited response and request body size");
    assert_eq!(resp.json()["body"], payload.as_str());

    let up = Upstream::start("app");
    let weir = start(&up, "{ max_request_body_bytes: 1 }");
    let resp = post(&weir, "/x", &payload, "");
    assert_eq!(resp.status, 413, "Limited request body size");
    assert_eq!(resp.text(), "Request Entity Too Large");
    assert_eq!(up.request_count(), 0);

    let weir = start(&up, "{ max_response_body_bytes: 1 }");
    let resp = post(&weir, "/x", &payload, "");
    assert_eq!(resp.status, 500, "Limited response body size");
    assert_eq!(resp.text(), "Internal Server Error");
    // A route without the middleware is not limited.
    assert_eq!(post(&weir, "/open", &payload, "").status, 200);
}

/// oxy's TestBuffer_requestLimitReached, by the declared length: answered before the body is
/// read, without `100 Continue` to a client that waits for it; the server is never asked.
/// A body of exactly the limit goes through.
#[test]
fn a_declared_length_over_the_limit_is_refused_before_reading() {
    let up = Upstream::start("app");
    let weir = start(&up, "{ max_request_body_bytes: 4 }");
    let mut conn = Conn::open(weir.addr());
    conn.send(
        b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n",
    );
    let resp = conn.read(false).expect("an answer without the body");
    assert_eq!(resp.status, 413);
    assert!(conn.is_closed(), "the unread body ends the connection");
    assert_eq!(up.request_count(), 0);
    let resp = post(&weir, "/x", "this request is too long", "");
    assert_eq!(resp.status, 413);
    let resp = post(&weir, "/x", "four", "");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["body"], "four");
}

/// oxy's TestBuffer_chunkedEncodingSuccess and TestBuffer_chunkedEncodingLimitReached: a
/// chunked body goes upstream whole with its length (no `Transfer-Encoding`); over the limit
/// it is refused as it streams in.
#[test]
fn a_chunked_body_is_sent_with_its_length_or_refused_while_streaming() {
    let up = Upstream::start("app");
    let chunked = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\ntest\r\n5\r\ntest1\r\n5\r\ntest2\r\n0\r\n\r\n";
    let weir = start(&up, "{ max_request_body_bytes: 1MiB }");
    let j = request(weir.addr(), chunked).json();
    assert_eq!(j["body"], "testtest1test2");
    assert_eq!(echoed_header(&j, "content-length").as_deref(), Some("14"));
    assert_eq!(echoed_header(&j, "transfer-encoding"), None, "{j}");

    let weir = start(
        &up,
        "{ mem_request_body_bytes: 4, max_request_body_bytes: 8 }",
    );
    let before = up.request_count();
    let resp = request(weir.addr(), chunked);
    assert_eq!(resp.status, 413);
    assert_eq!(up.request_count(), before);
    // A chunked body that stops arriving past the limit is refused without waiting for it.
    let mut conn = Conn::open(weir.addr());
    conn.send(
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n",
    );
    assert_eq!(conn.read(false).expect("an answer").status, 413);
}

/// oxy's TestBuffer_responseLimitReached (answers over the limit, of a declared length and
/// chunked, around hyper's 32 KiB and 64 KiB writes: 500) and TestBuffer_fileStreamingResponse
/// (an answer within the limit comes whole, with its length).
#[test]
fn answers_over_the_limit_are_replaced_by_a_500() {
    let up = Upstream::start("app");
    let weir = start(&up, "{ max_response_body_bytes: 2000 }");
    for n in [
        32769,
        32769 + 1999,
        32769 + 2000,
        65537 + 1999,
        65537 + 2000,
        2001,
    ] {
        let resp = get(weir.addr(), "t", &format!("/big/{n}"));
        assert_eq!(resp.status, 500, "{n} bytes");
    }
    let resp = get(weir.addr(), "t", "/big/2000");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), 2000);
    assert_eq!(resp.header("content-length"), Some("2000"));
    // Chunked from the server: held whole, sent with its length.
    let resp = get(weir.addr(), "t", "/chunked/3");
    assert_eq!(resp.text(), "part0;part1;part2;");
    assert_eq!(resp.header("content-length"), Some("18"));
    assert_eq!(resp.header("transfer-encoding"), None);
    assert_eq!(get(weir.addr(), "t", "/chunked/400").status, 500);
    // HEAD has no body to hold.
    let resp = request(
        weir.addr(),
        "HEAD /big/5000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-length"), Some("5000"));
    let weir = start(&up, "{ max_response_body_bytes: 1 }");
    let small = start(&up, "{ max_response_body_bytes: 100 }");
    // The same over the route without the middleware: not limited.
    assert_eq!(get(weir.addr(), "t", "/open/x").status, 200);
    assert_eq!(get(small.addr(), "t", "/big/100").status, 200);
}

/// The same limits over HTTP/2 (h2c): a body within the limit goes upstream with its length,
/// an answer over the limit is a 500.
#[test]
fn limits_hold_over_http2() {
    let up = Upstream::start("app");
    let weir = start(
        &up,
        "{ max_request_body_bytes: 64, max_response_body_bytes: 2000 }",
    );
    let base = format!("http://{}", weir.addr());
    let out = curl_ok(&[
        "--http2-prior-knowledge",
        "--data-binary",
        "hello over h2",
        &format!("{base}/x"),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["body"], "hello over h2");
    assert_eq!(echoed_header(&j, "content-length").as_deref(), Some("13"));
    let status = |url: String| {
        let out = curl_ok(&[
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ]);
        String::from_utf8_lossy(&out).into_owned()
    };
    assert_eq!(status(format!("{base}/big/2001")), "500");
    assert_eq!(status(format!("{base}/big/2000")), "200");
    assert_eq!(status(format!("{base}/chunked/400")), "500");
}

/// oxy's TestBuffer_retryOnError and TestBuffer_retryExceedAttempts, with servers that
/// answer 502 (what oxy's `IsNetworkError()` means): a POST with its body is sent again to the
/// next server while the expression holds, and the last answer stands once it does not.
#[test]
fn retry_expression_sends_the_request_again() {
    let bad: Vec<Upstream> = (0..3).map(|_| Upstream::start("status-502")).collect();
    let good = Upstream::start("good");
    let one_try = ", retry: { attempts: 1 }, passive_health: { max_failures: 1000 }";
    let expression = "IsNetworkError() && Attempts() <= 2";
    let settings =
        format!("{{ max_request_body_bytes: 1KiB, retry_expression: \"{expression}\" }}");
    // One bad server, then the good one: every request ends at the good one.
    let weir = Weir::start(&buffering_config(
        &[bad[0].url(), good.url()],
        &settings,
        one_try,
    ));
    for _ in 0..4 {
        let resp = post(&weir, "/x", "some request parameters", "");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.json()["body"], "some request parameters");
    }
    assert!(bad[0].request_count() >= 2);
    // Three bad servers before the good one: three tries at most, all bad.
    let servers: Vec<String> = bad.iter().map(Upstream::url).chain([good.url()]).collect();
    let weir = Weir::start(&buffering_config(&servers, &settings, one_try));
    let resp = post(&weir, "/x", "body", "");
    assert_eq!(resp.status, 502);
    // Without the expression, no retry: the bad server's answer stands.
    let weir = Weir::start(&buffering_config(
        &[bad[0].url(), good.url()],
        "{ max_request_body_bytes: 1KiB }",
        one_try,
    ));
    let statuses: Vec<u16> = (0..2).map(|_| post(&weir, "/x", "b", "").status).collect();
    assert!(statuses.contains(&502), "{statuses:?}");
}

/// `weir check` names a bad setting at its place.
#[test]
fn weir_check_refuses_bad_settings() {
    let up = Upstream::start("app");
    let config = buffering_config(
        &[up.url()],
        "{ max_response_body_bytes: lots, retry_expression: \"Attempts() <\" }",
        "",
    );
    let err = weir_check_refuses("buffering-check", &config);
    assert!(
        err.contains("weir.yaml:11:43: `max_response_body_bytes` must be a size"),
        "{err}"
    );
    assert!(
        err.contains("weir.yaml:11:80: invalid `retry_expression`: ends too soon"),
        "{err}"
    );
}

/// Where the middleware stands: its own answers are edited by the middlewares before it, not
/// by those after it (in Traefik, the buffer writes them outside the handlers it wraps); an
/// answer it lets through is edited by both.
#[test]
fn its_answers_are_wrapped_by_the_middlewares_before_it() {
    let up = Upstream::start("app");
    let config = format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n\
         \x20 all: {{ rule: \"PathPrefix(`/`)\", middlewares: [outer, buffer, inner], service: app }}\n\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n\
         \x20 outer: {{ headers: {{ response: {{ set: {{ X-Outer: yes }} }} }} }}\n\
         \x20 inner: {{ headers: {{ response: {{ set: {{ X-Inner: yes }} }} }} }}\n\
         \x20 buffer: {{ buffering: {{ max_request_body_bytes: 8, max_response_body_bytes: 100 }} }}\n",
        up.url()
    );
    let weir = Weir::start(&config);
    let through = get(weir.addr(), "t", "/big/100");
    assert_eq!(through.status, 200);
    assert_eq!(through.header("x-outer"), Some("yes"));
    assert_eq!(through.header("x-inner"), Some("yes"));
    for resp in [
        get(weir.addr(), "t", "/big/101"),
        post(&weir, "/x", "nine byte", ""),
    ] {
        assert!(matches!(resp.status, 413 | 500), "{}", resp.status);
        assert_eq!(resp.header("x-outer"), Some("yes"));
        assert_eq!(resp.header("x-inner"), None);
    }
}

/// oxy's TestBuffer_fileStreamingResponse, and the same for requests: bodies past
/// `mem_*_body_bytes` are held in a temporary file and arrive whole, with their length, over
/// HTTP/1.1 and HTTP/2 on either side (an HTTP/2 server: nginx over h2c, passing the request
/// on to the echoing server).
#[test]
fn bodies_past_the_memory_size_are_held_in_a_file() {
    let up = Upstream::start("app");
    let nginx_h2 = Nginx::start_h2(None, &format!("proxy_pass {};", up.url()));
    let settings = "{ mem_request_body_bytes: 4KiB, mem_response_body_bytes: 4 }";
    let body: String = (0..300_000)
        .map(|i| char::from(b'a' + (i % 23) as u8))
        .collect();
    let body_file = temp_dir("buffering-body").join("body");
    std::fs::write(&body_file, &body).unwrap();
    for (server, extra) in [
        (up.url(), ""),
        (format!("http://{}", nginx_h2.addr), ", protocol: h2c"),
    ] {
        let weir = Weir::start(&buffering_config(&[server], settings, extra));
        let j = post(&weir, "/x", &body, "").json();
        assert_eq!(
            j["body"].as_str().map(str::len),
            Some(body.len()),
            "{extra}"
        );
        assert!(
            j["body"] == body.as_str(),
            "{extra}: the body arrived changed"
        );
        assert_eq!(
            echoed_header(&j, "content-length").as_deref(),
            Some("300000")
        );
        // Chunked from the client, sent with its length.
        let chunked = format!(
            "POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        let j = request(weir.addr(), &chunked).json();
        assert!(
            j["body"] == body.as_str(),
            "{extra}: the chunked body arrived changed"
        );
        assert_eq!(echoed_header(&j, "transfer-encoding"), None);
        // Answers: from a file, with their length, to HTTP/1.1 and HTTP/2 clients.
        let resp = get(weir.addr(), "t", "/big/300000");
        assert_eq!(resp.status, 200);
        assert_eq!(resp.header("content-length"), Some("300000"));
        let expected: Vec<u8> = (0..300_000).map(|i| b'a' + (i % 26) as u8).collect();
        assert!(resp.body == expected, "{extra}: the answer arrived changed");
        let h2 = curl_ok(&[
            "--http2-prior-knowledge",
            &format!("http://{}/big/300000", weir.addr()),
        ]);
        assert!(
            h2 == expected,
            "{extra}: the answer over HTTP/2 arrived changed"
        );
        let h2_post = curl_ok(&[
            "--http2-prior-knowledge",
            "--data-binary",
            &format!("@{}", body_file.display()),
            &format!("http://{}/x", weir.addr()),
        ]);
        let j: serde_json::Value = serde_json::from_slice(&h2_post).unwrap();
        assert!(
            j["body"] == body.as_str(),
            "{extra}: the HTTP/2 body arrived changed"
        );
    }
}
