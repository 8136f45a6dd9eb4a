//! `weir route explain`: runs the real router on a synthesized request and reports the match.

use bytes::BytesMut;
use std::fmt::Write;
use std::net::IpAddr;
use weir_config::Config;
use weir_proxy::Runtime;

pub struct Report {
    pub text: String,
    pub matched: bool,
}

pub fn explain(
    config: &Config,
    method: &str,
    url: &str,
    headers: &[String],
    client_ip: IpAddr,
    only: Option<&str>,
) -> Result<Report, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("`{url}` is not a URL; expected http://HOST/PATH"))?;
    let (authority, target) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    let mut raw = format!("{method} {target} HTTP/1.1\r\n");
    let has_host = headers.iter().any(|h| {
        h.split(':')
            .next()
            .is_some_and(|n| n.trim().eq_ignore_ascii_case("host"))
    });
    if !has_host {
        raw.push_str(&format!("Host: {authority}\r\n"));
    }
    for h in headers {
        if !h.contains(':') {
            return Err(format!("header `{h}` must look like `Name: value`"));
        }
        raw.push_str(h);
        raw.push_str("\r\n");
    }
    raw.push_str("\r\n");
    let head = weir_proxy::codec::parse_request(&mut BytesMut::from(raw.as_str()))
        .map_err(|e| format!("invalid request: {e:?}"))?
        .ok_or("invalid request")?;
    let runtime = Runtime::compile(config, 1, None)?;

    let mut text = String::new();
    let mut matched = false;
    for ep in runtime
        .entrypoints
        .iter()
        .flatten()
        .filter(|ep| only.is_none_or(|name| ep.name == name))
    {
        match ep.router.route_request(&head, client_ip) {
            Some(route) => {
                matched = true;
                let _ = writeln!(
                    text,
                    "entrypoint {}: router `{}` (priority {})",
                    ep.name, route.name, route.priority
                );
                let _ = writeln!(text, "  rule:        {}", route.rule_text);
                let names: Vec<&str> = config
                    .routers
                    .iter()
                    .find(|r| r.name == route.name)
                    .map(|r| r.middlewares.iter().map(String::as_str).collect())
                    .unwrap_or_default();
                if !names.is_empty() {
                    let _ = writeln!(text, "  middlewares: {}", names.join(" -> "));
                }
                let _ = writeln!(text, "  action:      {}", route.action.describe());
            }
            None => {
                let _ = writeln!(
                    text,
                    "entrypoint {}: no router matches ({} routers); the request gets 404",
                    ep.name,
                    ep.router.len()
                );
            }
        }
    }
    if text.is_empty() {
        return Err(format!("no entrypoint named `{}`", only.unwrap_or("")));
    }
    Ok(Report { text, matched })
}
