//! The `grpc_web` middleware on the real binary: gRPC-Web calls made by curl over HTTP/1.1
//! and HTTP/2 to the `grpcio` server (`tests/grpc_peer.py`) through weir, as Traefik's
//! `grpcWeb` middleware answers them (its fork of improbable-eng's grpc-web wrapper, whose
//! `go/grpcweb/wrapper_test.go` the cases come from, each cited), CORS
//! preflights answered as the wrapper's rs/cors 1.7 does, and plain gRPC through the same
//! route untouched.

mod common;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use common::*;

/// weir with an `h2c` entrypoint, `/weir.Test/` routed to the gRPC server and `/weir.Dead/`
/// to a closed port, both behind `grpc_web` allowing `origins`.
fn config(server: &GrpcServer, origins: &str) -> String {
    format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         middlewares:\n  web:\n    grpc_web: {{ allow_origins: [{origins}] }}\n\
         routers:\n  \
           grpc: {{ rule: \"PathPrefix(`/weir.Test/`)\", service: grpc, middlewares: [web] }}\n  \
           dead: {{ rule: \"PathPrefix(`/weir.Dead/`)\", service: dead, middlewares: [web] }}\n\
         services:\n  \
           grpc: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:{}\" }}] }}\n  \
           dead: {{ protocol: h2c, servers: [{{ url: \"http://127.0.0.1:1\" }}] }}\n",
        server.port
    )
}

/// How curl speaks to weir: HTTP/1.1, or HTTP/2 in clear with prior knowledge.
const HTTP1: &str = "--http1.1";
const HTTP2: &str = "--http2-prior-knowledge";

/// What came back: the head as curl printed it (lower-cased), and the body.
struct Answer {
    head: String,
    body: Vec<u8>,
}

impl Answer {
    /// The values of field `name` in the head, in order.
    fn values(&self, name: &str) -> Vec<&str> {
        self.head
            .lines()
            .filter_map(|line| line.split_once(": "))
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.trim())
            .collect()
    }

    fn value(&self, name: &str) -> &str {
        self.values(name).first().copied().unwrap_or("")
    }

    /// The body's frames: (flag, payload), a trailer frame's payload as text.
    fn frames(&self) -> Vec<(u8, Vec<u8>)> {
        let mut frames = Vec::new();
        let mut rest = &self.body[..];
        while !rest.is_empty() {
            assert!(rest.len() >= 5, "a frame cut short: {:?}", self.body);
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            frames.push((rest[0], rest[5..5 + len].to_vec()));
            rest = &rest[5 + len..];
        }
        frames
    }

    /// The text form's body decoded: padded base64 pieces one after the other
    /// (wrapper_test.go's `decodeMultipleBase64Chunks`).
    fn decoded(mut self) -> Answer {
        let mut decoded = Vec::new();
        let mut start = 0;
        for end in (4..=self.body.len()).step_by(4) {
            if self.body[end - 4..end].contains(&b'=') || end == self.body.len() {
                let piece = BASE64.decode(&self.body[start..end]);
                decoded.extend(piece.unwrap_or_else(|e| panic!("{e}: {:?}", self.body)));
                start = end;
            }
        }
        assert_eq!(start, self.body.len(), "base64 cut short: {:?}", self.body);
        self.body = decoded;
        self
    }

    /// The messages, then the trailer frame's lines (the last frame, flag 0x80).
    fn messages_and_trailers(&self) -> (Vec<String>, String) {
        let mut frames = self.frames();
        let (flag, trailers) = frames.pop().expect("a trailer frame");
        assert_eq!(
            flag, 0x80,
            "the last frame carries the trailers: {:?}",
            self.body
        );
        let messages = frames
            .into_iter()
            .map(|(flag, m)| {
                assert_eq!(flag, 0, "a message frame");
                String::from_utf8(m).unwrap()
            })
            .collect();
        (messages, String::from_utf8(trailers).unwrap())
    }
}

/// A length-prefixed message, as gRPC and gRPC-Web frame one.
fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// A POST of `body` to `path` with curl's `protocol` and extra `args`.
fn post(
    weir: &Weir,
    protocol: &str,
    path: &str,
    content_type: &str,
    args: &[&str],
    body: &[u8],
) -> Answer {
    let dir = temp_dir("grpc-web");
    let (sent, got) = (dir.join("request"), dir.join("answer"));
    std::fs::write(&sent, body).unwrap();
    let url = format!("http://{}{path}", weir.addr());
    let content_type = format!("content-type: {content_type}");
    let data = format!("@{}", sent.display());
    let mut all = vec![
        protocol,
        "-D",
        "-",
        "-o",
        got.to_str().unwrap(),
        "-X",
        "POST",
    ];
    all.extend(["-H", &content_type, "--data-binary", &data]);
    all.extend(args);
    all.push(&url);
    let head = String::from_utf8_lossy(&curl_ok(&all)).to_lowercase();
    let body = std::fs::read(&got).unwrap_or_default();
    Answer { head, body }
}

/// A gRPC-Web call of `/weir.Test/METHOD` with one message.
fn call(weir: &Weir, protocol: &str, method: &str, message: &[u8], args: &[&str]) -> Answer {
    let path = format!("/weir.Test/{method}");
    let body = frame(message);
    post(
        weir,
        protocol,
        &path,
        "application/grpc-web+proto",
        args,
        &body,
    )
}

/// The same in the text form: the body in base64, the answer's decoded.
fn call_text(weir: &Weir, protocol: &str, method: &str, message: &[u8]) -> Answer {
    let path = format!("/weir.Test/{method}");
    let body = BASE64.encode(frame(message));
    let content_type = "application/grpc-web-text+proto";
    post(weir, protocol, &path, content_type, &[], body.as_bytes())
}

/// An OPTIONS request to `/weir.Test/Unary` with `args`, over HTTP/1.1.
fn options(weir: &Weir, args: &[&str]) -> Answer {
    let url = format!("http://{}/weir.Test/Unary", weir.addr());
    let mut all = vec![HTTP1, "-D", "-", "-o", "/dev/null", "-X", "OPTIONS"];
    all.extend(args);
    all.push(&url);
    let head = String::from_utf8_lossy(&curl_ok(&all)).to_lowercase();
    Answer {
        head,
        body: Vec::new(),
    }
}

/// The headers a browser's preflight for a gRPC-Web call carries (wrapper_test.go's).
const PREFLIGHT: &[&str] = &[
    "-H",
    "access-control-request-method: POST",
    "-H",
    "access-control-request-headers: origin, x-something-custom, x-grpc-web, accept",
];

/// wrapper_test.go `TestPing` (binary form) and `TestPingEmpty`: one message answered, the
/// status in the trailer frame, content type `application/grpc-web`, the head's names
/// exposed (`assertHeadersContainCorsExpectedHeaders`), over HTTP/1.1 and HTTP/2 alike
/// (`TestHttp1GrpcWebWrapperTestSuite`, `TestHttp2GrpcWebWrapperTestSuite`).
#[test]
fn a_unary_call_is_answered_in_grpc_web_over_both_protocols() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"https://foo.client.com\""));
    let origin = ["-H", "origin: https://foo.client.com"];
    for protocol in [HTTP1, HTTP2] {
        let answer = call(&weir, protocol, "Unary", b"hello", &origin);
        assert!(answer.head.contains(" 200"), "{protocol}: {}", answer.head);
        // The service's `application/grpc`, as gRPC-Web (grpcio answers without `+proto`).
        assert_eq!(answer.value("content-type"), "application/grpc-web");
        let (messages, trailers) = answer.messages_and_trailers();
        // The call reached the server as gRPC, with weir's forwarding headers.
        assert_eq!(messages, ["echo:hello|127.0.0.1"], "{protocol}");
        // Lower-case names, as wrapper_test.go reads them (trailer_test.go's `Trailer`); the status is in the body, not in the head nor
        // in HTTP trailers.
        assert!(trailers.contains("grpc-status: 0\r\n"), "{trailers:?}");
        assert!(trailers.ends_with("\r\n"), "{trailers:?}");
        assert_eq!(trailers, trailers.to_lowercase());
        assert!(answer.values("grpc-status").is_empty(), "{}", answer.head);
        let exposed = answer.value("access-control-expose-headers");
        assert!(
            exposed.contains("content-type") && exposed.ends_with("grpc-status, grpc-message"),
            "{exposed}"
        );
        // rs/cors on the call itself: the allowed origin echoed, credentials allowed.
        assert_eq!(
            answer.value("access-control-allow-origin"),
            "https://foo.client.com"
        );
        assert_eq!(answer.value("access-control-allow-credentials"), "true");
        assert_eq!(answer.value("vary"), "origin");
        assert!(
            answer.values("content-length").is_empty(),
            "{}",
            answer.head
        );
    }
}

/// wrapper_test.go `TestPingList`: a server stream's messages, in order, then the trailers.
#[test]
fn a_server_stream_ends_with_its_trailer_frame() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"*\""));
    for protocol in [HTTP1, HTTP2] {
        let answer = call(&weir, protocol, "ServerStream", b"300,100", &[]);
        let (messages, trailers) = answer.messages_and_trailers();
        assert_eq!(messages.len(), 300, "{protocol}");
        assert!(messages
            .iter()
            .enumerate()
            .all(|(i, m)| m.starts_with(&format!("{i:06}"))));
        assert!(trailers.contains("grpc-status: 0\r\n"), "{trailers:?}");
        // No origin sent: no CORS permission, `Vary: Origin` still.
        assert!(answer.values("access-control-allow-origin").is_empty());
        assert_eq!(answer.value("vary"), "origin");
    }
}

/// wrapper_test.go `TestPingError_WithTrailersInHeaders`: an error without a message comes
/// trailers-only, its status, message and metadata in the head (and exposed), and the body is
/// the empty trailer frame, as the wrapper's `finishRequest` writes it.
#[test]
fn an_error_comes_trailers_only_with_an_empty_trailer_frame() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"*\""));
    for protocol in [HTTP1, HTTP2] {
        let answer = call(&weir, protocol, "Unary", b"fail", &[]);
        assert!(answer.head.contains(" 200"), "{}", answer.head);
        assert_eq!(answer.value("content-type"), "application/grpc-web");
        assert_eq!(answer.value("grpc-status"), "3", "{}", answer.head);
        assert_eq!(answer.value("grpc-message"), "bad request: fail");
        assert_eq!(answer.value("x-detail"), "on purpose");
        let exposed = answer.value("access-control-expose-headers");
        assert!(
            exposed.contains("grpc-status, ") && exposed.contains("x-detail"),
            "{exposed}"
        );
        assert_eq!(answer.body, [0x80, 0, 0, 0, 0], "{protocol}");
    }
}

/// weir's own failure for a gRPC-Web call (no server answers) is in gRPC form over HTTP/1.1
/// too, as it is for gRPC (weir's difference from the wrapper, which sends Traefik's plain
/// 502 text followed by a trailer frame).
#[test]
fn weir_answers_its_own_failures_in_grpc_web_form() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, ""));
    for protocol in [HTTP1, HTTP2] {
        let body = frame(b"x");
        let answer = post(
            &weir,
            protocol,
            "/weir.Dead/Unary",
            "application/grpc-web",
            &[],
            &body,
        );
        assert!(answer.head.contains(" 200"), "{}", answer.head);
        assert_eq!(answer.value("content-type"), "application/grpc-web");
        assert_eq!(answer.value("grpc-status"), "14", "{}", answer.head);
        assert_eq!(answer.value("grpc-message"), "upstream connection failed");
        assert_eq!(answer.body, [0x80, 0, 0, 0, 0], "{protocol}");
    }
}

/// wrapper_test.go `TestCORSPreflight_AllowedByOriginFunc`: an allowed origin's preflight
/// gets the origin, the method, the asked headers in canonical case, credentials and a max
/// age of 600; `*` allows any origin and still echoes it.
#[test]
fn a_preflight_from_an_allowed_origin_is_answered() {
    let server = GrpcServer::start();
    for origins in ["\"https://foo.client.com\"", "\"https://other.com\", \"*\""] {
        let weir = Weir::start(&config(&server, origins));
        let mut args = PREFLIGHT.to_vec();
        args.extend(["-H", "origin: https://foo.client.com"]);
        let answer = options(&weir, &args);
        assert!(answer.head.starts_with("http/1.1 200"), "{}", answer.head);
        assert_eq!(
            answer.value("access-control-allow-origin"),
            "https://foo.client.com"
        );
        assert_eq!(answer.value("access-control-allow-methods"), "post");
        assert_eq!(answer.value("access-control-max-age"), "600");
        assert_eq!(
            answer.value("access-control-allow-headers"),
            "origin, x-something-custom, x-grpc-web, accept"
        );
        assert_eq!(answer.value("access-control-allow-credentials"), "true");
        assert_eq!(
            answer.values("vary"),
            [
                "origin",
                "access-control-request-method",
                "access-control-request-headers"
            ]
        );
        // The preflight did not reach the gRPC server: weir answered it, empty.
        assert_eq!(answer.value("content-length"), "0");
    }
}

/// wrapper_test.go `TestCORSPreflight_DeniedByDefault` (an origin not allowed) and
/// `TestNonRootResource` (no origin): 200, but no permission.
#[test]
fn a_preflight_from_an_origin_not_allowed_gets_no_permission() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"https://foo.client.com\""));
    let mut args = PREFLIGHT.to_vec();
    args.extend(["-H", "origin: https://evil.example"]);
    for asked in [&args[..], PREFLIGHT] {
        let answer = options(&weir, asked);
        assert!(answer.head.starts_with("http/1.1 200"), "{}", answer.head);
        for name in [
            "access-control-allow-origin",
            "access-control-allow-methods",
            "access-control-max-age",
            "access-control-allow-headers",
        ] {
            assert!(answer.values(name).is_empty(), "{name}: {}", answer.head);
        }
        assert_eq!(answer.values("vary").len(), 3);
    }
    // A default `grpc_web: {}` allows no origin (the wrapper's default origin function).
    let weir = Weir::start(&config(&server, ""));
    let mut args = PREFLIGHT.to_vec();
    args.extend(["-H", "origin: https://foo.client.com"]);
    let answer = options(&weir, &args);
    assert!(answer.values("access-control-allow-origin").is_empty());
}

/// rs/cors's `handleActualRequest`: a call from an origin not allowed is still converted and
/// answered, only without the CORS permission (the browser then keeps the answer from the
/// page).
#[test]
fn a_call_from_an_origin_not_allowed_gets_no_permission() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"https://foo.client.com\""));
    let origin = ["-H", "origin: https://evil.example"];
    let answer = call(&weir, HTTP1, "Unary", b"hello", &origin);
    let (messages, _) = answer.messages_and_trailers();
    assert_eq!(messages, ["echo:hello|127.0.0.1"]);
    assert!(answer.values("access-control-allow-origin").is_empty());
    assert!(answer.values("access-control-allow-credentials").is_empty());
    assert_eq!(answer.value("vary"), "origin");
}

/// wrapper_test.go `TestPingList_NormalGrpcWorks`: plain gRPC through the same route is
/// untouched, its status and metadata in HTTP/2 trailers; so is an OPTIONS that is no
/// gRPC-Web preflight.
#[test]
fn plain_grpc_and_other_requests_pass_untouched() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"*\""));
    let out = calls(weir.addr(), "unary,fail");
    assert_eq!(out["unary"]["code"], "OK", "{out}");
    assert_eq!(out["unary"]["reply"], "echo:hello|127.0.0.1", "{out}");
    assert_eq!(out["fail"]["code"], "INVALID_ARGUMENT", "{out}");
    assert_eq!(out["fail"]["details"], "bad request: fail", "{out}");
    assert_eq!(out["fail"]["trailers"]["x-detail"], "on purpose", "{out}");
    // A plain gRPC call by curl: `application/grpc` back, no CORS fields, nothing exposed.
    let head = curl_grpc_head(&[HTTP2], &format!("http://{}/weir.Test/Unary", weir.addr()));
    assert!(
        head.contains("content-type: application/grpc\r\n"),
        "{head}"
    );
    assert!(!head.contains("access-control-"), "{head}");
    // An OPTIONS without `Access-Control-Request-Method` is no preflight: the service
    // answers it (grpcio refuses a method other than POST).
    let args = ["-H", "access-control-request-headers: x-grpc-web"];
    let answer = options(&weir, &args);
    assert!(!answer.head.contains("access-control-"), "{}", answer.head);
    assert!(answer.values("vary").is_empty(), "{}", answer.head);
}

/// wrapper_test.go `TestPing`, text form: the base64 body decoded on its way to the server,
/// the answer in base64 with content type `application/grpc-web-text`, its trailers last.
#[test]
fn a_text_form_call_is_decoded_and_answered_in_base64() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"*\""));
    for protocol in [HTTP1, HTTP2] {
        let answer = call_text(&weir, protocol, "Unary", b"hello");
        assert!(answer.head.contains(" 200"), "{protocol}: {}", answer.head);
        assert_eq!(answer.value("content-type"), "application/grpc-web-text");
        assert!(answer
            .body
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b)));
        let (messages, trailers) = answer.decoded().messages_and_trailers();
        assert_eq!(messages, ["echo:hello|127.0.0.1"], "{protocol}");
        assert!(trailers.contains("grpc-status: 0\r\n"), "{trailers:?}");
    }
}

/// `TestPingList` and `TestPingError_WithTrailersInHeaders` in the text form: a stream's
/// messages in padded pieces, and an error's empty trailer frame as `gAAAAAA=`.
#[test]
fn text_form_streams_and_errors() {
    let server = GrpcServer::start();
    let weir = Weir::start(&config(&server, "\"*\""));
    for protocol in [HTTP1, HTTP2] {
        let answer = call_text(&weir, protocol, "ServerStream", b"200,50");
        let (messages, trailers) = answer.decoded().messages_and_trailers();
        assert_eq!(messages.len(), 200, "{protocol}");
        assert!(messages
            .iter()
            .enumerate()
            .all(|(i, m)| m.starts_with(&format!("{i:06}"))));
        assert!(trailers.contains("grpc-status: 0\r\n"), "{trailers:?}");
        let answer = call_text(&weir, protocol, "Unary", b"fail");
        assert_eq!(answer.value("grpc-status"), "3", "{}", answer.head);
        assert_eq!(answer.value("content-type"), "application/grpc-web-text");
        assert_eq!(answer.body, b"gAAAAAA=", "{protocol}");
    }
    // A body that is not base64 is refused before anything goes to the server, in gRPC form.
    let path = "/weir.Test/Unary";
    let answer = post(
        &weir,
        HTTP1,
        path,
        "application/grpc-web-text",
        &[],
        b"*not*",
    );
    assert_eq!(answer.value("grpc-status"), "13", "{}", answer.head);
    assert_eq!(
        answer.value("grpc-message"),
        "the grpc-web text body is not base64"
    );
    assert_eq!(answer.body, b"gAAAAAA=");
}

/// The wrapper takes whatever trailers the route's handler sends: an HTTP/1.1 service's
/// chunked trailers end in the trailer frame too, and the `Trailer` field that announced them
/// is dropped.
#[test]
fn an_http1_service_s_chunked_trailers_go_into_the_trailer_frame() {
    let upstream = Upstream::start("h1");
    let yaml = format!(
        "server: {{ workers: 1 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n\
         middlewares:\n  web:\n    grpc_web: {{}}\n\
         routers:\n  \
           h1: {{ rule: \"Path(`/trailers`)\", service: h1, middlewares: [web] }}\n\
         services:\n  h1: {{ servers: [{{ url: \"{}\" }}] }}\n",
        upstream.url()
    );
    let weir = Weir::start(&yaml);
    for protocol in [HTTP1, HTTP2] {
        let body = frame(b"x");
        let answer = post(
            &weir,
            protocol,
            "/trailers",
            "application/grpc-web",
            &[],
            &body,
        );
        assert!(answer.values("trailer").is_empty(), "{}", answer.head);
        // The service answers `payload`, not a framed message: the bytes pass as they are.
        let lines = "grpc-message: all-good\r\ngrpc-status: 0\r\n";
        assert_eq!(
            answer.body,
            [
                &b"payload"[..],
                &[0x80, 0, 0, 0, lines.len() as u8],
                lines.as_bytes()
            ]
            .concat(),
            "{protocol}: {:?}",
            String::from_utf8_lossy(&answer.body)
        );
    }
}
