//! `errors` (Traefik's `errors`): an answer whose status is one the middleware catches, the
//! proxied service's or one of weir's own errors alike, is replaced by the page its `service`
//! answers to `GET query`: the page's body and fields, with the caught status (or the one
//! `status_rewrites` gives it). The original answer's body and fields are dropped.

use crate::actions::subrequest;
use crate::actions::whole_body::Reader;
use crate::http::ascii::percent_encode;
use crate::http::codec::{reason, RequestHead};
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use crate::io::watch::ConnWatch;
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use bytes::Bytes;
use std::sync::Arc;
use weir_config::ErrorPages as Config;

/// The largest page read; a larger one is a failure of the page service.
const MAX_PAGE: u64 = 1 << 20;

/// The most of a replaced answer's body read (and dropped) so its connection can be reused, as
/// Traefik reads it to its end; a larger one's connection is closed.
const MAX_DROPPED: u64 = 64 << 10;

/// An `errors` middleware with the service its pages come from.
#[derive(Debug)]
pub(super) struct ErrorPages {
    pub(super) service: Arc<Service>,
}

/// Whether `status` is one `config` catches (interim answers never are, as in Traefik).
pub(super) fn catches(config: &Config, status: u16) -> bool {
    status >= 200
        && config
            .status
            .iter()
            .any(|&(low, high)| (low..=high).contains(&status))
}

impl ErrorPages {
    /// The answer to `req` in place of one with `status`: the page, or when the page service
    /// fails, the failure weir would answer for it, with the status the page would have had.
    pub(super) async fn page(
        &self,
        config: &Config,
        worker: &Worker,
        req: &RequestHead,
        from: Requester,
        scheme: Scheme,
        status: u16,
    ) -> LocalResponse {
        let answered = config
            .status_rewrites
            .iter()
            .find(|((low, high), _)| (*low..=*high).contains(&status))
            .map_or(status, |(_, to)| *to);
        let target = page_target(&config.query, req, scheme, answered, status);
        // The client's own fields go with the page request, and its Host, as Traefik sends them.
        let head = subrequest::request_head("GET", &target, req.host(), req.head.iter(), None);
        let Some(head) = head else {
            // The query made a target no request line can carry.
            let plain = vec![("content-type".into(), "text/plain; charset=utf-8".into())];
            return LocalResponse::new(answered, plain, reason(answered).to_string());
        };
        let page_request = (&head, Bytes::new());
        let sent = subrequest::send(worker, &self.service, from, page_request, None, MAX_PAGE);
        match sent.await {
            Ok(page) => {
                LocalResponse::new(answered, subrequest::answer_fields(&page.head), page.body)
            }
            Err(failed) => {
                let (service, why) = (&config.service, &failed.message);
                crate::log_error!("errors: page service `{service}`: {why}");
                let plain = failed.plain();
                LocalResponse::new(answered, plain.headers, plain.body)
            }
        }
    }
}

/// `query` with `{status}` (the status answered), `{originalStatus}` (the one caught) and
/// `{url}` (the request's URL, escaped as a query value) replaced.
fn page_target(
    query: &str,
    req: &RequestHead,
    scheme: Scheme,
    answered: u16,
    original: u16,
) -> String {
    let mut target = query
        .replace("{status}", &answered.to_string())
        .replace("{originalStatus}", &original.to_string());
    if target.contains("{url}") {
        let mut url = format!("{}://{}{}", scheme.as_str(), req.host(), req.path());
        if !req.query().is_empty() {
            url.push('?');
            url.push_str(req.query());
        }
        target = target.replace("{url}", &query_escape(&url));
    }
    target
}

/// Escapes `text` as Go's `url.QueryEscape` does: unreserved bytes kept, a space as `+`.
fn query_escape(text: &str) -> String {
    let kept = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b' ');
    percent_encode(text, kept).replace(' ', "+")
}

/// Reads the body of `reply` (an upstream's answer being replaced) to its end, at most
/// [`MAX_DROPPED`] bytes, so its connection goes back to the pool; the body is dropped.
pub(super) async fn drop_body(worker: &Worker, watch: &ConnWatch, reply: &mut Reply<'_>) {
    let body = std::mem::replace(&mut reply.body, ReplyBody::Local);
    let (ReplyHead::Response(response), Some(used)) = (&reply.head, &reply.upstream) else {
        return;
    };
    let reader = Reader {
        worker,
        watch,
        read_timeout: used.service.read_timeout,
        max: MAX_DROPPED,
    };
    // Whatever it ends with, the body is dropped: only the connection's fate depends on it.
    let _ = reader.reply_body(response, body, &reply.upstream).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Traefik's customerrors TestHandler, "full query replacement": the URL as a query value.
    #[test]
    fn the_url_is_escaped_as_a_query_value() {
        assert_eq!(
            query_escape("http://localhost/test?foo=bar&baz=buz"),
            "http%3A%2F%2Flocalhost%2Ftest%3Ffoo%3Dbar%26baz%3Dbuz"
        );
        assert_eq!(query_escape("a b+c~"), "a+b%2Bc~");
    }

    #[test]
    fn interim_answers_are_never_caught() {
        let config = Config {
            status: vec![(100, 599)],
            service: "pages".into(),
            service_pos: Default::default(),
            query: "/".into(),
            status_rewrites: Vec::new(),
        };
        assert!(!catches(&config, 101));
        assert!(catches(&config, 200) && catches(&config, 599));
    }
}
