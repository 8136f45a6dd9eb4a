//! `middlewares.NAME.forward_auth`: the authentication server's `address` (made a service of
//! one server, with `tls`), which request fields (and whether the body) go to it, which of its
//! answer's fields and cookies come back, and how a refusal's `Location` is passed.

use super::{Fields, Loader};
use crate::model::*;
use crate::yaml::Node;
use std::time::Duration;

/// Traefik's forward-auth client gives up after this long.
const AUTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `address` split into its server's URL (`scheme://host[:port]`) and the target asked of it
/// (`/` when it has no path; a fragment dropped); `None` when it is not an http(s) URL.
fn split_address(address: &str) -> Option<(&str, String)> {
    let address = address.split('#').next().unwrap_or(address);
    let after = address
        .strip_prefix("http://")
        .or_else(|| address.strip_prefix("https://"))?;
    let authority_end = address.len() - after.len() + after.find(['/', '?']).unwrap_or(after.len());
    let (server, rest) = address.split_at(authority_end);
    let target = match rest.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{rest}"),
        Some(_) => rest.to_string(),
    };
    Some((server, target))
}

impl Loader<'_> {
    /// `forward_auth: { address, tls, trust_forward_header, auth_response_headers,
    /// auth_response_headers_regex, auth_request_headers, add_auth_cookies_to_response,
    /// forward_body, max_body_size, preserve_location_header }`; `address` needed.
    pub(super) fn forward_auth(&mut self, name: &str, node: &Node) -> Option<ForwardAuth> {
        const KEYS: &[&str] = &[
            "address",
            "tls",
            "trust_forward_header",
            "auth_response_headers",
            "auth_response_headers_regex",
            "auth_request_headers",
            "add_auth_cookies_to_response",
            "forward_body",
            "max_body_size",
            "preserve_location_header",
        ];
        let f = self.fields(node, "`forward_auth`", KEYS)?;
        let Some(address_node) = f.get("address") else {
            self.error(f.pos, "`forward_auth` needs `address`");
            return None;
        };
        let example = "http://127.0.0.1:9000/auth";
        let (address, service, target) =
            self.url_service(&f, ("address", address_node), example, name, "forward_auth")?;
        let service = Service {
            timeouts: Timeouts {
                request: Some(AUTH_REQUEST_TIMEOUT),
                ..service.timeouts
            },
            ..service
        };
        let auth_response_headers = self.header_names_key(&f, "auth_response_headers");
        let auth_request_headers = self.header_names_key(&f, "auth_request_headers");
        let auth_response_headers_regex = match f.get("auth_response_headers_regex") {
            Some(node) => {
                let source = self.string(node, "`auth_response_headers_regex`")?;
                match regex::Regex::new(&source) {
                    Ok(regex) => Some(regex),
                    Err(e) => {
                        self.error(
                            node.pos,
                            format!(
                                "invalid regular expression: {}",
                                crate::regex_error::one_line(&e)
                            ),
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let forward_body = self.flag_key(&f, "forward_body");
        let max_body_size = match f.get("max_body_size") {
            Some(node) if !forward_body => {
                self.error(
                    node.pos,
                    "`max_body_size` applies with `forward_body: true`",
                );
                None
            }
            Some(node) => self.size(node, "`max_body_size`"),
            None => None,
        };
        Some(ForwardAuth {
            address,
            service,
            target,
            trust_forward_header: self.flag_key(&f, "trust_forward_header"),
            auth_response_headers,
            auth_response_headers_regex,
            auth_request_headers,
            add_auth_cookies_to_response: self.names_key(&f, "add_auth_cookies_to_response"),
            forward_body,
            max_body_size,
            preserve_location_header: self.flag_key(&f, "preserve_location_header"),
        })
    }

    /// A middleware's own server given as a URL in `key` at `node` (`example`: one to show when
    /// it is not one), with the `tls` of `f`: the URL as written, a service of that one server
    /// named for middleware `name` of `kind` (the server gets its own name as Host, as
    /// Traefik's clients send it), and the URL's path and query.
    pub(super) fn url_service(
        &mut self,
        f: &Fields<'_>,
        (key, node): (&str, &Node),
        example: &str,
        name: &str,
        kind: &str,
    ) -> Option<(String, Service, String)> {
        let address = self.string(node, &format!("`{key}`"))?;
        let server = split_address(&address).and_then(|(server, target)| {
            let valid_target = !target.bytes().any(|b| b <= b' ' || b == 0x7f);
            Some((UpstreamServer::from_url(server, 1)?, target)).filter(|_| valid_target)
        });
        let Some((server, target)) = server else {
            let expected = format!("an http:// or https:// URL with a host, e.g. \"{example}\"");
            self.error(
                node.pos,
                format!("`{key}` must be {expected}, found `{address}`"),
            );
            return None;
        };
        let servers = vec![server];
        let tls = self.upstream_tls(f, &servers);
        let service = Service {
            name: format!("{name} ({kind})"),
            protocol: UpstreamProtocol::Http1,
            http2: Http2Settings::default(),
            servers,
            load_balancer: Balancer::RoundRobin,
            hash_key: HashKey::ClientIp,
            keepalive: self.keepalive(None),
            timeouts: self.upstream_timeouts(None),
            pass_host_header: false,
            tls,
            health_check: None,
            passive_health: None,
            retry: None,
            elasticsearch: None,
        };
        Some((address, service, target))
    }

    /// An optional list of header names: each must be one.
    fn header_names_key(&mut self, f: &Fields<'_>, key: &str) -> Vec<String> {
        let what = format!("`{key}`");
        let names = f.get(key).map(|node| self.header_names(node, &what));
        names.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    fn config(body: &str) -> String {
        format!("{BASE}middlewares:\n  auth:\n    forward_auth: {body}\n")
    }

    fn auth(body: &str) -> ForwardAuth {
        let cfg = load_str(&config(body), "t.yaml").unwrap();
        match &cfg.middlewares[0].kind {
            MiddlewareKind::ForwardAuth(auth) => (**auth).clone(),
            other => panic!("not forward_auth: {other:?}"),
        }
    }

    #[test]
    fn the_address_is_a_server_and_a_target() {
        for (address, server, target) in [
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000", "/"),
            (
                "http://auth:9000/verify?x=1#top",
                "http://auth:9000",
                "/verify?x=1",
            ),
            ("https://auth.example?x=1", "https://auth.example", "/?x=1"),
        ] {
            let a = auth(&format!("{{ address: \"{address}\" }}"));
            assert_eq!(a.service.servers[0].url, server);
            assert_eq!(a.target, target);
            assert!(!a.service.pass_host_header);
            assert_eq!(a.service.timeouts.request, Some(AUTH_REQUEST_TIMEOUT));
        }
        let a = auth(
            "{ address: \"https://auth/\", tls: { insecure_skip_verify: true }, trust_forward_header: true, auth_response_headers: [X-Auth-User], auth_response_headers_regex: \"^Foo-\", auth_request_headers: [Cookie], add_auth_cookies_to_response: [session], preserve_location_header: true, forward_body: true, max_body_size: 1KiB }",
        );
        assert!(a.service.tls.insecure_skip_verify && a.service.servers[0].tls);
        assert!(a.trust_forward_header && a.preserve_location_header && a.forward_body);
        assert_eq!(a.max_body_size, Some(1024));
        assert_eq!(a.auth_response_headers, ["X-Auth-User"]);
        assert!(a.auth_response_headers_regex.unwrap().is_match("Foo-Bar"));
        assert_eq!(
            (a.auth_request_headers, a.add_auth_cookies_to_response),
            (vec!["Cookie".to_string()], vec!["session".to_string()])
        );
        let a = auth("{ address: \"http://auth\" }");
        assert!(!a.trust_forward_header && a.auth_response_headers_regex.is_none());
        assert!(!a.forward_body && a.max_body_size.is_none());
    }

    #[test]
    fn bad_settings_are_told_where_they_are() {
        assert_eq!(
            errors(&config("{ trust_forward_header: true }")),
            vec!["t.yaml:5:19: `forward_auth` needs `address`"]
        );
        assert_eq!(
            errors(&config("{ address: \"ftp://auth\" }")),
            vec!["t.yaml:5:30: `address` must be an http:// or https:// URL with a host, e.g. \"http://127.0.0.1:9000/auth\", found `ftp://auth`"]
        );
        assert_eq!(
            errors(&config("{ address: \"http://auth/a b\" }")),
            vec!["t.yaml:5:30: `address` must be an http:// or https:// URL with a host, e.g. \"http://127.0.0.1:9000/auth\", found `http://auth/a b`"]
        );
        assert_eq!(
            errors(&config(
                "{ address: \"http://auth\", auth_response_headers: [\"a b\"], auth_response_headers_regex: \"(\", tls: {} }"
            )),
            vec![
                "t.yaml:5:69: `a b` is not a valid header name",
                "t.yaml:5:106: invalid regular expression: unclosed group (at character 1)",
                "t.yaml:5:116: `tls` applies to https:// servers; this service has none",
            ]
        );
        assert_eq!(
            errors(&config(
                "{ address: \"http://auth\", forward_body: false, max_body_size: 1KiB }"
            )),
            vec!["t.yaml:5:81: `max_body_size` applies with `forward_body: true`"]
        );
        assert_eq!(
            errors(&config(
                "{ address: \"http://auth\", forward_body: true, max_body_size: lots }"
            )),
            vec!["t.yaml:5:80: `max_body_size` must be a size like `1024`, `64KiB` or `256MiB`, found `lots`"]
        );
    }
}
