//! Middlewares: the filter chain a route applies. Request phase edits the request head or
//! answers on its own (`Flow::Respond`); response phase edits response headers. A new
//! middleware is a new variant here plus its config in weir-config.

use crate::h1::{Head, RequestHead};
use crate::response::LocalResponse;
use regex::Regex;
use weir_config::{HeaderOps, MiddlewareKind};

#[derive(Debug)]
pub enum Middleware {
    StripPrefix(Vec<String>),
    AddPrefix(String),
    ReplacePathRegex {
        regex: Regex,
        replacement: String,
    },
    Headers {
        request: HeaderOps,
        response: HeaderOps,
    },
    RedirectScheme {
        scheme: String,
        permanent: bool,
    },
}

pub enum Flow {
    Continue,
    Respond(LocalResponse),
}

impl Middleware {
    pub fn new(kind: &MiddlewareKind) -> Middleware {
        match kind {
            MiddlewareKind::StripPrefix(p) => Middleware::StripPrefix(p.clone()),
            MiddlewareKind::AddPrefix(p) => Middleware::AddPrefix(p.clone()),
            MiddlewareKind::ReplacePathRegex { regex, replacement } => {
                Middleware::ReplacePathRegex {
                    regex: regex.clone(),
                    replacement: replacement.clone(),
                }
            }
            MiddlewareKind::Headers { request, response } => Middleware::Headers {
                request: request.clone(),
                response: response.clone(),
            },
            MiddlewareKind::RedirectScheme { scheme, permanent } => Middleware::RedirectScheme {
                scheme: scheme.clone(),
                permanent: *permanent,
            },
        }
    }

    pub fn has_response_phase(&self) -> bool {
        matches!(self, Middleware::Headers { response, .. } if !response.is_empty())
    }

    /// Request phase. `scheme` is the scheme the client used.
    pub fn on_request(&self, req: &mut RequestHead, scheme: &str) -> Flow {
        match self {
            Middleware::StripPrefix(prefixes) => {
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
            Middleware::AddPrefix(prefix) => {
                let new_path = format!("{}{}", prefix.trim_end_matches('/'), req.path());
                req.set_path(&new_path);
            }
            Middleware::ReplacePathRegex { regex, replacement } => {
                let path = req.path().to_string();
                if regex.is_match(&path) {
                    let new_path = regex.replace(&path, replacement.as_str()).into_owned();
                    req.set_path(&new_path);
                    req.head.set("x-replaced-path", path.as_bytes());
                }
            }
            Middleware::Headers { request, .. } => apply_ops(&mut req.head, request),
            Middleware::RedirectScheme {
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

    /// Response phase on the response headers.
    pub fn on_response(&self, head: &mut Head) {
        if let Middleware::Headers { response, .. } = self {
            apply_ops(head, response);
        }
    }

    /// Response phase for responses weir writes itself: the headers to append, serialized.
    pub fn local_response_headers(&self, out: &mut Vec<u8>) {
        if let Middleware::Headers { response, .. } = self {
            for (name, value) in response.set.iter().chain(&response.add) {
                crate::response::header(out, name.as_bytes(), value.as_bytes());
            }
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
