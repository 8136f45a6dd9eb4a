//! The `grpc_web` middleware (Traefik's `grpcWeb`, which wraps the route in its fork of
//! improbable-eng's grpc-web wrapper with rs/cors 1.7): a browser's gRPC-Web call (a POST of
//! `application/grpc-web[+proto]`, or `application/grpc-web-text[+proto]` with a base64 body)
//! goes to the service as gRPC, and the answer comes back as gRPC-Web, its trailers written as
//! the body's last frame, base64 for the text form (`http/grpc_web.rs`); a CORS preflight that
//! names `x-grpc-web` is answered here. Anything else passes untouched.

use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{is_hop_by_hop, Framing, RequestHead, ResponseHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::grpc_web::{decode_text, GrpcWebBody};
use crate::http::local::LocalResponse;
use crate::middlewares::Flow;
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::ClientSide;
use crate::reply::Reply;
use crate::servers::balancer::Service;
use crate::upstream::detached::{Detached, Requester};
use crate::upstream::{self, forwarding};
use crate::worker::Worker;
use weir_config::GrpcWeb;

const GRPC: &[u8] = b"application/grpc";
const GRPC_WEB: &[u8] = b"application/grpc-web";
const GRPC_WEB_TEXT: &[u8] = b"application/grpc-web-text";

/// What a converted request's `TE` field is set to: the request asks the service for
/// trailers (the field is hop-by-hop, so weir sends `te: trailers` in its place and never
/// this), and the response phase knows the answer is owed in gRPC-Web, binary or text.
const CONVERTED: &[u8] = b"trailers, weir-grpc-web";
const CONVERTED_TEXT: &[u8] = b"trailers, weir-grpc-web-text";

/// The most of a text-form body read before it is decoded (6 MiB decoded: above gRPC's
/// usual 4 MiB message limit); a longer one is refused 413.
const MAX_TEXT_BODY: u64 = 8 << 20;

/// How long a browser may keep a preflight's answer: the wrapper's default, 10 minutes.
const PREFLIGHT_MAX_AGE: &str = "600";

/// Request phase: a gRPC-Web preflight is answered; a gRPC-Web call becomes gRPC (the text
/// form's body is decoded by the action, [`forward_text`]).
pub(crate) fn on_request(config: &GrpcWeb, req: &mut RequestHead) -> Flow<'static> {
    match req.method() {
        "OPTIONS" => {
            let names_grpc_web = req
                .head
                .get("access-control-request-headers")
                .is_some_and(|h| {
                    h.to_ascii_lowercase()
                        .windows(10)
                        .any(|w| w == b"x-grpc-web")
                });
            // Without `Access-Control-Request-Method` it is no preflight: passed on.
            let method = req.head.get("access-control-request-method").unwrap_or(b"");
            if names_grpc_web && !method.is_empty() {
                return Flow::Respond(preflight(config, req, method));
            }
        }
        "POST" => {
            let Some(content_type) = req.head.get("content-type") else {
                return Flow::Continue;
            };
            let (web, mark) = if content_type.starts_with(GRPC_WEB_TEXT) {
                (GRPC_WEB_TEXT, CONVERTED_TEXT)
            } else if content_type.starts_with(GRPC_WEB) {
                (GRPC_WEB, CONVERTED)
            } else {
                return Flow::Continue;
            };
            let grpc = [GRPC, &content_type[web.len()..]].concat();
            req.head.set("content-type", &grpc);
            req.head.set("te", mark);
            req.te_trailers = true;
        }
        _ => {}
    }
    Flow::Continue
}

/// Whether `req` is a gRPC-Web call this middleware turned into gRPC (weir answers its own
/// errors to it in gRPC form, whatever the client's protocol).
pub(crate) fn converted(req: &RequestHead) -> bool {
    matches!(req.head.get("te"), Some(CONVERTED | CONVERTED_TEXT))
}

/// Whether `req` is a text-form call turned into gRPC: its body is still base64.
pub(crate) fn is_text(req: &RequestHead) -> bool {
    req.head.get("te") == Some(CONVERTED_TEXT)
}

/// The route's action for a text-form call: its body read whole (gRPC-Web calls send their
/// one message at once) and decoded, then sent to `service` as a body in memory.
pub(crate) async fn forward_text<'r, C: ClientSide>(
    worker: &Worker,
    service: &'r Service,
    client: &mut C,
    head: &mut RequestHead,
) -> Reply<'r> {
    let text = match client.read_body(worker, head, MAX_TEXT_BODY).await {
        Ok(text) => text,
        Err(e) => return Reply::error(forwarding::body_failed(e).answer.error()),
    };
    let Some(body) = decode_text(&text) else {
        let message = "the gRPC-Web text body is not base64";
        return Reply::error(LocalError::new(400, ErrorKind::MalformedBody, message));
    };
    // The client's body is read: the upstream request declares the decoded length.
    head.framing = Framing::Length(body.len() as u64);
    let mut detached = Detached::new(worker, Requester::of(client), body.into());
    upstream::forward(worker, service, &mut detached, head, None).await
}

/// Response-head phase, for a converted call: the head as the wrapper rewrites it, and the
/// body filter that writes the trailers into the body.
pub(crate) fn on_response_head(
    config: &GrpcWeb,
    req: &RequestHead,
    resp: &mut ResponseHead,
) -> Option<BodyFilter> {
    let text = match req.head.get("te") {
        Some(CONVERTED) => false,
        Some(CONVERTED_TEXT) => true,
        _ => return None,
    };
    resp.head.remove("trailer");
    resp.head.remove("content-length");
    if let Some(content_type) = resp.head.get("content-type") {
        if let Some(at) = find(content_type, GRPC) {
            let web = if text { GRPC_WEB_TEXT } else { GRPC_WEB };
            let web = [&content_type[..at], web, &content_type[at + GRPC.len()..]].concat();
            resp.head.set("content-type", &web);
        }
    }
    // rs/cors sets these before the service's fields are copied, which win.
    if resp.head.get("vary").is_none() {
        resp.head.append("vary", b"Origin");
    }
    if let Some(origin) = allowed_origin(config, req) {
        if resp.head.get("access-control-allow-origin").is_none() {
            resp.head.append("access-control-allow-origin", &origin);
        }
        if resp.head.get("access-control-allow-credentials").is_none() {
            resp.head
                .append("access-control-allow-credentials", b"true");
        }
    }
    // Every field the head carries, and the two that trailers-in-the-body carry, readable
    // by the page's script.
    let mut head_names: Vec<u8> = Vec::new();
    let mut exposed: Vec<u8> = Vec::new();
    for (name, _) in resp.head.iter() {
        let seen = head_names
            .split(|&b| b == b'\n')
            .any(|n| eq_ignore_case(n, name));
        if is_hop_by_hop(name) || seen {
            continue;
        }
        head_names.extend(name.iter().map(u8::to_ascii_lowercase));
        head_names.push(b'\n');
        push_canonical(&mut exposed, name);
        exposed.extend_from_slice(b", ");
    }
    exposed.extend_from_slice(b"grpc-status, grpc-message");
    resp.head.set("access-control-expose-headers", &exposed);
    head_names.extend_from_slice(b"access-control-expose-headers\n");
    Some(BodyFilter::grpc_web(GrpcWebBody::new(head_names, text)))
}

/// The request's `Origin` when `allow_origins` lists it (or `*`).
fn allowed_origin(config: &GrpcWeb, req: &RequestHead) -> Option<Vec<u8>> {
    let origin = req.head.get("origin").filter(|o| !o.is_empty())?;
    config
        .allow_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed.as_bytes() == origin)
        .then(|| origin.to_vec())
}

/// rs/cors's answer to a preflight: `Vary` always; with an allowed origin and a simple
/// method, the origin echoed, the method, the asked headers (any are allowed), credentials
/// and the max age. Status 200 either way.
fn preflight(config: &GrpcWeb, req: &RequestHead, method: &[u8]) -> LocalResponse {
    let vary = [
        "Origin",
        "Access-Control-Request-Method",
        "Access-Control-Request-Headers",
    ];
    let mut headers: Vec<(String, String)> = vary
        .into_iter()
        .map(|value| ("vary".to_string(), value.to_string()))
        .collect();
    let method = String::from_utf8_lossy(method).to_ascii_uppercase();
    let simple = matches!(method.as_str(), "GET" | "POST" | "HEAD" | "OPTIONS");
    if let Some(origin) = allowed_origin(config, req).filter(|_| simple) {
        let origin = String::from_utf8_lossy(&origin).into_owned();
        headers.push(("access-control-allow-origin".into(), origin));
        headers.push(("access-control-allow-methods".into(), method));
        let asked = req
            .head
            .get("access-control-request-headers")
            .unwrap_or_default();
        let asked = header_list(asked);
        if !asked.is_empty() {
            headers.push(("access-control-allow-headers".into(), asked.join(", ")));
        }
        headers.push(("access-control-allow-credentials".into(), "true".into()));
        headers.push((
            "access-control-max-age".into(),
            PREFLIGHT_MAX_AGE.to_string(),
        ));
    }
    LocalResponse::new(200, headers, bytes::Bytes::new())
}

/// rs/cors's reading of `Access-Control-Request-Headers`: names split at spaces and commas,
/// each in canonical case (`X-Grpc-Web`), other bytes than letters, digits, `-` and `_`
/// dropped.
fn header_list(list: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut name = String::new();
    let mut upper = true;
    for (i, &b) in list.iter().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' => name.push(if upper {
                b.to_ascii_uppercase() as char
            } else {
                b.to_ascii_lowercase() as char
            }),
            b'-' | b'_' | b'0'..=b'9' => name.push(b as char),
            _ => {}
        }
        if b == b' ' || b == b',' || i == list.len() - 1 {
            if !name.is_empty() {
                names.push(std::mem::take(&mut name));
            }
            upper = true;
        } else {
            upper = b == b'-' || b == b'_';
        }
    }
    names
}

/// A field name as Go's `CanonicalHeaderKey` writes it: `Grpc-Accept-Encoding`.
fn push_canonical(out: &mut Vec<u8>, name: &[u8]) {
    let mut upper = true;
    for &b in name {
        out.push(if upper {
            b.to_ascii_uppercase()
        } else {
            b.to_ascii_lowercase()
        });
        upper = b == b'-';
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rs/cors 1.7's `parseHeaderList`, as wrapper_test.go's
    /// `TestCORSPreflight_AllowedByOriginFunc` sees it.
    #[test]
    fn asked_headers_in_canonical_case() {
        assert_eq!(
            header_list(b"origin, x-something-custom, x-grpc-web, accept"),
            ["Origin", "X-Something-Custom", "X-Grpc-Web", "Accept"]
        );
        assert_eq!(header_list(b"X-USER_agent,,  a.b"), ["X-User_Agent", "Ab"]);
        assert!(header_list(b"").is_empty());
    }

    #[test]
    fn canonical_names() {
        let mut out = Vec::new();
        push_canonical(&mut out, b"grpc-accept-encoding");
        assert_eq!(out, b"Grpc-Accept-Encoding");
    }
}
