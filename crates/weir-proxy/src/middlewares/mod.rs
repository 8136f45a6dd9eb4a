//! Filters (configured as `middlewares`): what a route applies around its action, in three
//! phases. Request phase (async): edits the request head or answers it (`Flow::Respond`).
//! Response-head phase: edits the reply's head, local and proxied answers alike, and may
//! install a [`BodyFilter`]. Response-body phase: the installed body filter transforms the body
//! as the driver sends it (compression); without one, replies take the fused relay. A new
//! middleware is a new variant of the config's `MiddlewareKind` plus its phases here.

use crate::http::codec::{Head, RequestHead, ResponseHead};
use crate::http::compress;
use crate::http::local::LocalResponse;
use crate::reply::body_filter::BodyFilter;
use weir_config::{HeaderOps, MiddlewareKind};

/// A configured middleware; its shape is the config's `MiddlewareKind`, its behaviour is here.
#[derive(Debug)]
pub struct Filter(pub MiddlewareKind);

pub enum Flow {
    Continue,
    Respond(LocalResponse),
}

impl Filter {
    /// A `strip_prefix` filter (it records what it strips in `X-Forwarded-Prefix`).
    pub fn strips_prefix(&self) -> bool {
        matches!(self.0, MiddlewareKind::StripPrefix(_))
    }

    pub fn has_response_phase(&self) -> bool {
        match &self.0 {
            MiddlewareKind::Headers { response, .. } => !response.is_empty(),
            MiddlewareKind::Compress(_) => true,
            _ => false,
        }
    }

    /// Request phase. `scheme` is the scheme the client used.
    pub async fn on_request(&self, req: &mut RequestHead, scheme: &str) -> Flow {
        match &self.0 {
            MiddlewareKind::StripPrefix(prefixes) => {
                let path = req.path();
                if let Some(prefix) = prefixes.iter().find(|p| path.starts_with(p.as_str())) {
                    let rest = &path[prefix.len()..];
                    let new_path = if rest.starts_with('/') {
                        rest.to_string()
                    } else {
                        format!("/{rest}")
                    };
                    let prefix = prefix.trim_end_matches('/').to_string();
                    req.set_path(&new_path);
                    req.head.set("x-forwarded-prefix", prefix.as_bytes());
                }
            }
            MiddlewareKind::AddPrefix(prefix) => {
                let new_path = format!("{}{}", prefix.trim_end_matches('/'), req.path());
                req.set_path(&new_path);
            }
            MiddlewareKind::ReplacePathRegex { regex, replacement } => {
                let path = req.path().to_string();
                if regex.is_match(&path) {
                    let new_path = regex.replace(&path, replacement.as_str()).into_owned();
                    req.set_path(&new_path);
                    req.head.set("x-replaced-path", path.as_bytes());
                }
            }
            MiddlewareKind::Headers { request, .. } => apply_ops(&mut req.head, request),
            MiddlewareKind::RedirectScheme {
                scheme: target,
                permanent,
            } => {
                if scheme != target {
                    let host = weir_config::rule::strip_port(req.host());
                    // The path and query, not the target: an absolute-form target is the
                    // whole URL, which the Location would then repeat after the host.
                    let location = match req.query() {
                        "" => format!("{target}://{host}{}", req.path()),
                        query => format!("{target}://{host}{}?{query}", req.path()),
                    };
                    let safe = matches!(req.method(), "GET" | "HEAD");
                    let status = match (permanent, safe) {
                        (true, true) => 301,
                        (false, true) => 302,
                        (true, false) => 308,
                        (false, false) => 307,
                    };
                    return Flow::Respond(LocalResponse::redirect(status, &location));
                }
            }
            MiddlewareKind::Compress(_) => {}
        }
        Flow::Continue
    }

    /// Response-head phase: edits the head; may return a filter for the body.
    pub fn on_response_head(
        &self,
        req: &RequestHead,
        resp: &mut ResponseHead,
    ) -> Option<BodyFilter> {
        match &self.0 {
            MiddlewareKind::Headers { response, .. } => {
                apply_ops(&mut resp.head, response);
                None
            }
            MiddlewareKind::Compress(config) => {
                compress::install(config, req, resp).map(|c| BodyFilter::Compress(Box::new(c)))
            }
            _ => None,
        }
    }
}

fn apply_ops(head: &mut Head, ops: &HeaderOps) {
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
