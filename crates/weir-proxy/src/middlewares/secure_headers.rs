//! The security part of the `headers` middleware, as Traefik runs it (unrolled/secure inside
//! pkg/middlewares/headers/secure.go): a request naming a host outside `allowed_hosts` is
//! answered 500 "Bad Host"; answers get the security fields (`Strict-Transport-Security` only
//! over HTTPS, unless forced).

use crate::http::codec::{Head, RequestHead};
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use weir_config::SecureHeaders;

/// The refusal of a request whose host is not allowed (unrolled/secure's default bad-host
/// handler: Go's `http.Error`, 500), or `None` to let it through.
pub(super) fn check_host(secure: &SecureHeaders, req: &RequestHead) -> Option<LocalResponse> {
    if secure.allowed_hosts.is_empty() || secure.is_development {
        return None;
    }
    let proxied = secure.hosts_proxy_headers.iter().find_map(|name| {
        let value = req.head.get(name)?;
        std::str::from_utf8(value).ok().filter(|v| !v.is_empty())
    });
    let host = proxied.unwrap_or_else(|| req.host());
    if secure
        .allowed_hosts
        .iter()
        .any(|allowed| allowed.eq_ignore_ascii_case(host))
    {
        return None;
    }
    let fields = vec![
        ("content-type".into(), "text/plain; charset=utf-8".into()),
        ("x-content-type-options".into(), "nosniff".into()),
    ];
    Some(LocalResponse::new(500, fields, "Bad Host\n"))
}

/// The security fields of an answer to `req`, which came over `scheme`.
pub(super) fn on_response(
    secure: &SecureHeaders,
    req: &RequestHead,
    scheme: Scheme,
    head: &mut Head,
) {
    let https = scheme == Scheme::Https
        || secure
            .ssl_proxy_headers
            .iter()
            .any(|(name, value)| req.head.get(name) == Some(value.as_bytes()));
    if secure.sts_seconds != 0 && (https || secure.force_sts_header) && !secure.is_development {
        let mut sts = format!("max-age={}", secure.sts_seconds);
        if secure.sts_include_subdomains {
            sts.push_str("; includeSubDomains");
        }
        if secure.sts_preload {
            sts.push_str("; preload");
        }
        head.set("strict-transport-security", sts.as_bytes());
    }
    if !secure.custom_frame_options_value.is_empty() {
        head.set(
            "x-frame-options",
            secure.custom_frame_options_value.as_bytes(),
        );
    } else if secure.frame_deny {
        head.set("x-frame-options", b"DENY");
    }
    if secure.content_type_nosniff {
        head.set("x-content-type-options", b"nosniff");
    }
    if !secure.custom_browser_xss_value.is_empty() {
        head.set(
            "x-xss-protection",
            secure.custom_browser_xss_value.as_bytes(),
        );
    } else if secure.browser_xss_filter {
        head.set("x-xss-protection", b"1; mode=block");
    }
    let fields = [
        ("content-security-policy", &secure.content_security_policy),
        (
            "content-security-policy-report-only",
            &secure.content_security_policy_report_only,
        ),
        ("referrer-policy", &secure.referrer_policy),
        ("permissions-policy", &secure.permissions_policy),
    ];
    for (name, value) in fields {
        if !value.is_empty() {
            head.set(name, value.as_bytes());
        }
    }
}
