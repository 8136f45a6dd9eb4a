//! Filters (configured as `middlewares`): what a route applies around its action, in three
//! phases. Request phase (async): edits the request head or answers it (`Flow::Respond`), or
//! refuses it with one of weir's own errors (`Flow::Refuse`).
//! Response-head phase: edits the reply's head, local and proxied answers
//! alike, and may install a [`BodyFilter`]. Response-body phase: the installed body filter
//! transforms the body as the driver sends it (compression); without one, replies take the
//! fused relay. One file per middleware; a new one is a variant of the config's
//! `MiddlewareKind`, its file here, and its arm in [`Filter::on_request`] or
//! [`Filter::on_response_head`]; one that keeps state between requests (`basic_auth`'s verified
//! pairs) builds it in [`Filter::new`], as a variant of `Kept`.

mod add_prefix;
mod basic_auth;
mod headers;
mod redirect_scheme;
mod replace_path_regex;
mod strip_prefix;

use crate::http::codec::{RequestHead, ResponseHead};
use crate::http::compress;
use crate::http::error::LocalError;
use crate::http::local::LocalResponse;
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::ClientSide;
use weir_config::MiddlewareKind;

/// A configured middleware; its shape is the config's `MiddlewareKind`, its behaviour is here,
/// with what it keeps between requests.
#[derive(Debug)]
pub struct Filter(pub MiddlewareKind, Kept);

/// What a middleware keeps between requests, built once per configuration.
#[derive(Debug)]
enum Kept {
    Nothing,
    BasicAuth(Box<basic_auth::BasicAuth>),
}

/// What the request phase lets happen next.
pub enum Flow {
    Continue,
    /// Answer with this instead of running the action (a redirect).
    Respond(LocalResponse),
    /// Answer with this error, in the flavour the request needs (a 401 as gRPC for gRPC).
    Refuse(LocalError),
}

impl Filter {
    pub fn new(kind: MiddlewareKind) -> Filter {
        let kept = match &kind {
            MiddlewareKind::BasicAuth(config) => {
                Kept::BasicAuth(Box::new(basic_auth::BasicAuth::new(config)))
            }
            _ => Kept::Nothing,
        };
        Filter(kind, kept)
    }

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

    /// Request phase, for a request from `client`.
    pub(crate) async fn on_request(&self, req: &mut RequestHead, client: &impl ClientSide) -> Flow {
        match &self.0 {
            MiddlewareKind::StripPrefix(prefixes) => strip_prefix::on_request(prefixes, req),
            MiddlewareKind::AddPrefix(prefix) => add_prefix::on_request(prefix, req),
            MiddlewareKind::ReplacePathRegex { regex, replacement } => {
                replace_path_regex::on_request(regex, replacement, req)
            }
            MiddlewareKind::Headers { request, .. } => headers::apply(&mut req.head, request),
            MiddlewareKind::RedirectScheme { scheme, permanent } => {
                let redirect =
                    redirect_scheme::on_request(scheme, *permanent, req, client.scheme());
                if let Some(answer) = redirect {
                    return Flow::Respond(answer);
                }
            }
            MiddlewareKind::BasicAuth(_) => {
                if let Kept::BasicAuth(auth) = &self.1 {
                    if let Err(refusal) = auth.on_request(req).await {
                        return Flow::Refuse(refusal);
                    }
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
                headers::apply(&mut resp.head, response);
                None
            }
            MiddlewareKind::Compress(config) => {
                compress::install(config, req, resp).map(|c| BodyFilter::Compress(Box::new(c)))
            }
            _ => None,
        }
    }
}
