//! `headers`: header edits on the request going upstream and on the answer going back (remove,
//! then set, then add), and CORS as Traefik's `headers` middleware does it
//! (pkg/middlewares/headers/header.go): a preflight (`OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`) is answered here, and other answers get the
//! `Access-Control-*` fields for an allowed `Origin`.

use crate::http::codec::{Head, RequestHead};
use crate::http::local::LocalResponse;
use weir_config::{Cors, HeaderOps};

pub(super) fn apply(head: &mut Head, ops: &HeaderOps) {
    for name in &ops.remove {
        head.remove(name);
    }
    for (name, value) in &ops.set {
        head.set(name, value.as_bytes());
    }
    for (name, value) in &ops.add {
        head.append(name, value.as_bytes());
    }
}

/// The answer to a CORS preflight, or `None` for any other request: 200 with no body, the
/// allowed methods and headers, the origin if allowed, and the max age.
pub(super) fn preflight(cors: &Cors, req: &RequestHead) -> Option<LocalResponse> {
    if req.method() != "OPTIONS" {
        return None;
    }
    let method = text(req, "access-control-request-method")?;
    let origin = text(req, "origin")?;
    let mut fields: Vec<(String, String)> = Vec::new();
    if cors.allow_credentials {
        fields.push(("access-control-allow-credentials".into(), "true".into()));
    }
    // With credentials a wildcard cannot be sent as it is: the request's own list is echoed.
    let wildcard = |list: &[String]| list.iter().any(|v| v == "*") && cors.allow_credentials;
    if wildcard(&cors.allow_headers) {
        if let Some(asked) = text(req, "access-control-request-headers") {
            fields.push(("access-control-allow-headers".into(), asked.into()));
        }
    } else if !cors.allow_headers.is_empty() {
        fields.push((
            "access-control-allow-headers".into(),
            cors.allow_headers.join(","),
        ));
    }
    if wildcard(&cors.allow_methods) {
        fields.push(("access-control-allow-methods".into(), method.into()));
    } else if !cors.allow_methods.is_empty() {
        fields.push((
            "access-control-allow-methods".into(),
            cors.allow_methods.join(","),
        ));
    }
    if let Some(allowed) = allowed_origin(cors, origin) {
        fields.push(("access-control-allow-origin".into(), allowed.into()));
    }
    if let Some(seconds) = cors.max_age {
        fields.push(("access-control-max-age".into(), seconds.to_string()));
    }
    if let Some(exposed) = exposed_headers(cors) {
        fields.push(("access-control-expose-headers".into(), exposed));
    }
    Some(LocalResponse::new(200, fields, bytes::Bytes::new()))
}

/// The CORS fields of an answer to `req` (after the configured response edits).
pub(super) fn on_response(cors: &Cors, req: &RequestHead, head: &mut Head) {
    let origin = text(req, "origin").unwrap_or_default();
    if let Some(allowed) = allowed_origin(cors, origin) {
        head.set("access-control-allow-origin", allowed.as_bytes());
    }
    if cors.allow_credentials {
        head.set("access-control-allow-credentials", b"true");
    }
    if let Some(exposed) = exposed_headers(cors) {
        head.set("access-control-expose-headers", exposed.as_bytes());
    }
    if cors.add_vary_header {
        let vary = head
            .get("vary")
            .map(|v| String::from_utf8_lossy(v).into_owned());
        match vary.as_deref() {
            Some("Origin") => {}
            Some("") | None => head.set("vary", b"Origin"),
            Some(other) => head.set("vary", format!("{other},Origin").as_bytes()),
        }
    }
}

/// The `Access-Control-Allow-Origin` for `origin`: the listed origin it equals, `*` (the
/// origin itself with credentials, which a wildcard cannot carry), or the origin when a
/// regular expression matches it; `None` when nothing allows it.
fn allowed_origin<'a>(cors: &'a Cors, origin: &'a str) -> Option<&'a str> {
    for item in &cors.allow_origin_list {
        if item == origin {
            return Some(item);
        }
        if item == "*" {
            return Some(if cors.allow_credentials { origin } else { item });
        }
    }
    cors.allow_origin_list_regex
        .iter()
        .any(|regex| regex.is_match(origin))
        .then_some(origin)
}

/// `Access-Control-Expose-Headers`, unless it lists `*` with credentials (which browsers
/// would take literally).
fn exposed_headers(cors: &Cors) -> Option<String> {
    let list = &cors.expose_headers;
    let wildcard_with_credentials = list.iter().any(|v| v == "*") && cors.allow_credentials;
    (!list.is_empty() && !wildcard_with_credentials).then(|| list.join(","))
}

/// A request field's value as text (the first, if repeated), `None` when absent or empty.
fn text<'r>(req: &'r RequestHead, name: &str) -> Option<&'r str> {
    let value = req.head.get(name)?;
    std::str::from_utf8(value).ok().filter(|v| !v.is_empty())
}
