//! HTTP-01 answers (RFC 8555 §8.3) on the `http_entrypoint` of a `tls.acme` block, ahead of
//! its routers: the key authorization for a token the ACME thread is being validated on.

use crate::http::codec::RequestHead;
use crate::http::local::LocalResponse;
use crate::reply::Reply;
use crate::state::runtime::EntrypointRuntime;
use std::borrow::Cow;

/// The key authorization for this request, when `ep` answers HTTP-01 (a flag set at load)
/// and the path is a token under validation.
#[inline]
pub(super) fn http01_answer(ep: &EntrypointRuntime, head: &RequestHead) -> Option<String> {
    if !ep.answers_acme_http01 {
        return None;
    }
    crate::listen::acme::http01_answer(head.path())
}

/// The answer's reply: the key authorization as the body (RFC 8555 §8.3 asks for no more).
pub(super) fn http01_reply(key_authorization: String) -> Reply<'static> {
    let kind = (
        "content-type".to_string(),
        "application/octet-stream".to_string(),
    );
    let response = LocalResponse::new(200, vec![kind], key_authorization);
    Reply::local(Cow::Owned(response))
}
