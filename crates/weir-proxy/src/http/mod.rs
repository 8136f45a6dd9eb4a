//! HTTP without a connection: the HTTP/1 codec (heads, framing, chunked bodies), header-value
//! helpers, the request scheme, local answers and weir's own errors, conditional requests, file
//! bodies, content coding (compression), the router's rule matching, gRPC's request headers and W3C trace context.
//! Imports nothing else of the crate: every other folder may use it.

pub mod ascii;
pub mod codec;
pub mod compress;
pub mod conditional;
pub mod error;
pub mod file_body;
pub mod grpc;
pub mod grpc_web;
pub mod local;
pub mod router;
pub mod trace_context;

/// The scheme the client used, for `X-Forwarded-Proto`, `redirect_scheme` and routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}
