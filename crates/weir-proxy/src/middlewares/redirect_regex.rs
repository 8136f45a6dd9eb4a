//! `redirect_regex`: when `regex` matches the request's URL, as Traefik spells it, and the
//! replacement changes it, answers with a redirect to the replaced URL (Traefik's
//! `redirect_regex.go` and `redirect.go`).

use super::Flow;
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use crate::http::local::LocalResponse;
use crate::http::Scheme;

pub(super) fn on_request(
    regex: &regex::Regex,
    replacement: &str,
    permanent: bool,
    req: &RequestHead,
    came_over: Scheme,
) -> Flow<'static> {
    let url = request_url(req, came_over);
    if !regex.is_match(&url) {
        return Flow::Continue;
    }
    let location = regex.replace_all(&url, replacement);
    // A replacement that changes nothing lets the request through, as in Traefik.
    if location == url {
        return Flow::Continue;
    }
    if let Err(why) = check_url(&location) {
        let message = format!("redirect_regex made no URL of `{url}`: {why}");
        return Flow::Refuse(LocalError::new(502, ErrorKind::MiddlewareRefused, message));
    }
    // Only GET keeps 301/302 here: Traefik sends HEAD and every other method 307/308.
    let status = super::redirect_status(permanent, req.method() == "GET");
    Flow::Respond(LocalResponse::redirect(status, &location))
}

/// The URL the expression is matched against: scheme, host, port and request target as the
/// client sent them. An absolute-form target gives its own scheme, host and port (an empty
/// host falls back to `Host`); an origin-form one is put after `http://` and the `Host`
/// header. A TLS connection makes the scheme `https` either way; `X-Forwarded-Proto` counts
/// for nothing.
fn request_url(req: &RequestHead, came_over: Scheme) -> String {
    let target = req.target();
    let (scheme, host, port, uri) = match absolute_form(target) {
        Some((scheme, "", port, uri)) => (scheme, req.host(), port, uri),
        Some(parts) => parts,
        None => ("http", req.host(), "", target),
    };
    let scheme = match came_over {
        Scheme::Https => "https",
        Scheme::Http => scheme,
    };
    format!("{scheme}://{host}{port}{uri}")
}

/// An absolute-form target's scheme, host (a bracketed IPv6 address or word characters, dots,
/// dashes), `:port` and the rest, split as Traefik's `uriRegexp` splits it.
fn absolute_form(target: &str) -> Option<(&str, &str, &str, &str)> {
    let (scheme, after) = match target.strip_prefix("https://") {
        Some(after) => ("https", after),
        None => ("http", target.strip_prefix("http://")?),
    };
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = after.as_bytes();
    let host_len = if bytes.first() == Some(&b'[') {
        let inside = bytes[1..]
            .iter()
            .take_while(|&&b| is_word(b) || b == b':' || b == b'.')
            .count();
        match bytes.get(1 + inside) {
            Some(b']') if inside > 0 => inside + 2,
            _ => 0,
        }
    } else {
        bytes
            .iter()
            .take_while(|&&b| is_word(b) || b == b'.' || b == b'-')
            .count()
    };
    let (host, after) = after.split_at(host_len);
    let digits = after.bytes().skip(1).take_while(u8::is_ascii_digit).count();
    let port_len = match after.starts_with(':') && digits > 0 {
        true => digits + 1,
        false => 0,
    };
    let (port, uri) = after.split_at(port_len);
    Some((scheme, host, port, uri))
}

/// Why `url` would not parse as a URL (Go's `url.Parse`, which Traefik answers 502 for): a
/// control character, a `%` without two hex digits, or an escaped ASCII byte in the host.
fn check_url(url: &str) -> Result<(), &'static str> {
    let bytes = url.as_bytes();
    if bytes.iter().any(|&b| b < b' ' || b == 0x7f) {
        return Err("a control character");
    }
    let host = match url.find("://") {
        Some(at) => {
            let start = at + 3;
            let len = url[start..]
                .find(['/', '?', '#'])
                .unwrap_or(url.len() - start);
            start..start + len
        }
        None => 0..0,
    };
    for (i, _) in url.match_indices('%') {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
            return Err("a `%` not followed by two hex digits");
        };
        if host.contains(&i) && byte < 0x80 && byte != b'%' {
            return Err("an escaped character in the host");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_targets_split_as_traefik_splits_them() {
        assert_eq!(
            absolute_form("http://foo.com:80"),
            Some(("http", "foo.com", ":80", ""))
        );
        assert_eq!(
            absolute_form("https://[::1]:8443/a?b"),
            Some(("https", "[::1]", ":8443", "/a?b"))
        );
        // A colon without digits is part of the rest; an odd host is no host.
        assert_eq!(
            absolute_form("http://foo:/x"),
            Some(("http", "foo", "", ":/x"))
        );
        assert_eq!(
            absolute_form("http://@evil/x"),
            Some(("http", "", "", "@evil/x"))
        );
        assert_eq!(absolute_form("/path"), None);
        assert_eq!(absolute_form("HTTP://foo/"), None);
    }

    #[test]
    fn a_url_that_go_would_not_parse_is_refused() {
        assert!(check_url("https://example.com/a%2Fb?q=%41").is_ok());
        assert!(check_url("http://caf%C3%A9.example/").is_ok());
        assert!(check_url("http://192.168.0.%31/").is_err());
        assert!(check_url("http://h/%zz").is_err());
        assert!(check_url("http://h/a\r\nx: y").is_err());
    }
}
