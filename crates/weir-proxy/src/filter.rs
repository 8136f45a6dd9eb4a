//! Filters (configured as `middlewares`): what a route applies around its action, in three
//! phases. Request phase (async): edits the request head or answers it (`Flow::Respond`).
//! Response-head phase: edits the reply's head, local and proxied answers alike. Response-body
//! phase: filters that transform the body are installed by the response-head phase; none exists
//! yet, so replies take the fused relay (compression, issue 9, brings the first). A new
//! middleware is a new variant of the config's `MiddlewareKind` plus its phases here.

use crate::codec::{Head, RequestHead};
use crate::reply::LocalResponse;
use weir_config::{HeaderOps, MiddlewareKind};

/// A configured middleware; its shape is the config's `MiddlewareKind`, its behaviour is here.
#[derive(Debug)]
pub struct Filter(pub MiddlewareKind);

pub enum Flow {
    Continue,
    Respond(LocalResponse),
}

impl Filter {
    pub fn has_response_phase(&self) -> bool {
        matches!(&self.0, MiddlewareKind::Headers { response, .. } if !response.is_empty())
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
                    let location = format!("{target}://{host}{}", req.target());
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
        }
        Flow::Continue
    }

    /// Response-head phase.
    pub fn on_response_head(&self, head: &mut Head) {
        if let MiddlewareKind::Headers { response, .. } = &self.0 {
            apply_ops(head, response);
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
