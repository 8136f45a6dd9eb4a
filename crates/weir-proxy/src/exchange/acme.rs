//! HTTP-01 answers (RFC 8555 §8.3) on the `http_entrypoint` of a `tls.acme` block, ahead of
//! its routers: the key authorization for a token the ACME thread is being validated on.
//! The exchange looks here only on entrypoints flagged at load, and again when no route was
//! taken (so nothing is held across the exchange for it).

use crate::http::codec::RequestHead;
use crate::http::local::LocalResponse;
use crate::listen::acme::http01_answer;
use crate::reply::Reply;
use crate::state::runtime::EntrypointRuntime;
use std::borrow::Cow;

/// Whether the request asks for a token under validation (the caller checked the flag).
pub(super) fn is_http01_answer(head: &RequestHead) -> bool {
    http01_answer(head.path()).is_some()
}

/// The answer when `ep` answers HTTP-01 and the path is a token under validation: the key
/// authorization as the body, as RFC 8555 §8.3 asks.
pub(super) fn http01_reply(
    ep: Option<&EntrypointRuntime>,
    head: &RequestHead,
) -> Option<Reply<'static>> {
    if !ep?.answers_acme_http01 {
        return None;
    }
    let key_authorization = http01_answer(head.path())?;
    let kind = (
        "content-type".to_string(),
        "application/octet-stream".to_string(),
    );
    let response = LocalResponse::new(200, vec![kind], key_authorization);
    Some(Reply::local(Cow::Owned(response)))
}
