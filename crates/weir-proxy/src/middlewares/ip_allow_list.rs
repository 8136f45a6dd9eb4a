//! `ip_allow_list`: refuses a request whose client address (as the `ip_strategy` picks it)
//! is in none of the `source_range` networks, with `reject_status_code` and its status text,
//! as Traefik's ipAllowList does.

use super::source;
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use std::net::IpAddr;
use weir_config::IpAllowList;

/// The refusal, or `None` when the client is allowed.
pub(super) fn on_request(
    list: &IpAllowList,
    req: &RequestHead,
    peer: IpAddr,
) -> Option<LocalError> {
    let client = source::pick(&list.ip_strategy, req, peer).addr();
    if client.is_some_and(|ip| list.source_range.contains(ip)) {
        return None;
    }
    let status = list.reject_status_code;
    // The config admits only statuses Go names.
    let text = weir_config::status_text(status).unwrap_or_default();
    Some(LocalError::new(status, ErrorKind::PolicyRefused, text))
}
