//! `redirect_scheme`: answers a request that came over another scheme with a redirect to the
//! same host and path over `scheme` (301/302 for GET and HEAD, 308/307 for the rest).

use crate::http::codec::RequestHead;
use crate::http::local::LocalResponse;
use crate::http::Scheme;

pub(super) fn on_request(
    target: &str,
    permanent: bool,
    req: &RequestHead,
    came_over: Scheme,
) -> Option<LocalResponse> {
    if came_over.as_str() == target {
        return None;
    }
    let host = weir_config::rule::strip_port(req.host());
    // The path and query, not the target: an absolute-form target is the whole URL, which
    // the Location would then repeat after the host.
    let location = match req.query() {
        "" => format!("{target}://{host}{}", req.path()),
        query => format!("{target}://{host}{}?{query}", req.path()),
    };
    let safe = matches!(req.method(), "GET" | "HEAD");
    let status = super::redirect_status(permanent, safe);
    Some(LocalResponse::redirect(status, &location))
}
