//! `forward_auth` (Traefik's `forwardAuth`, pkg/middlewares/auth/forward.go): a copy of the
//! request's head (and with `forward_body`, its body) goes to the authentication server as a
//! `GET` of its address, with the `X-Forwarded-*` fields Traefik sets; a 2xx answer lets the
//! request through with the named fields of the answer copied onto it, any other answer goes
//! back to the client as the server sent it (its `Location` made absolute unless
//! `preserve_location_header`).

use super::{Flow, LetThrough};
use crate::actions::subrequest;
use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{lists_token, Framing, Head, RequestHead, ResponseHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use crate::reply::client::ClientSide;
use crate::reply::relay::BodyError;
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use bytes::Bytes;
use std::sync::Arc;
use weir_config::ForwardAuth as Config;

/// The largest answer read from the server; a larger one counts as the server failing.
const MAX_ANSWER: u64 = 1 << 20;

/// A `forward_auth` middleware with its server as a service.
#[derive(Debug)]
pub(super) struct ForwardAuth {
    pub(super) service: Arc<Service>,
}

/// What a let-through request's answer gets on its way back: the server's cookies named in
/// `add_auth_cookies_to_response`, in place of the answer's own of those names.
#[derive(Debug)]
pub struct AuthCookies {
    /// The cookie names taken from the server.
    names: Vec<String>,
    /// The server's `Set-Cookie` values.
    cookies: Vec<Bytes>,
}

impl ForwardAuth {
    /// Asks the server about `req` and lets it through (with the answer's fields copied onto
    /// it), or answers with the server's refusal.
    pub(super) async fn on_request(
        &self,
        config: &Config,
        worker: &Worker,
        req: &mut RequestHead,
        client: &mut impl ClientSide,
    ) -> Flow<'static> {
        let body = match config.forward_body {
            true => match read_body(config, worker, req, client).await {
                Ok(body) => body,
                Err(refused) => return refused,
            },
            false => None,
        };
        let length = body.as_ref().map(Bytes::len);
        let Some(head) = auth_request(config, req, client.scheme(), length) else {
            return server_failed();
        };
        let from = Requester::of(client);
        let asked = (&head, body.clone().unwrap_or_default());
        let sent = subrequest::send(worker, &self.service, from, asked, None, MAX_ANSWER);
        let answer = match sent.await {
            Ok(answer) => answer,
            Err(failed) => {
                // As Traefik logs it: the client only sees a 500.
                let (address, why) = (&config.address, &failed.message);
                crate::log_error!("forward_auth: {address}: {why}");
                return server_failed();
            }
        };
        let status = answer.head.status;
        if !(200..300).contains(&status) {
            let mut fields = subrequest::answer_fields(&answer.head);
            if !config.preserve_location_header {
                let base = (
                    config.service.servers[0].url.as_str(),
                    config.target.as_str(),
                );
                absolute_location(&mut fields, base);
            }
            return Flow::Respond(LocalResponse::new(status, fields, answer.body));
        }
        copy_answer_fields(config, &answer.head, &mut req.head);
        let cookies: Vec<Bytes> = answer
            .head
            .head
            .get_all("set-cookie")
            .map(Bytes::copy_from_slice)
            .collect();
        let cookies = match cookies.is_empty() || config.add_auth_cookies_to_response.is_empty() {
            true => None,
            false => {
                let names = config.add_auth_cookies_to_response.clone();
                Some(Box::new(AuthCookies { names, cookies }))
            }
        };
        if cookies.is_none() && body.is_none() {
            return Flow::Continue;
        }
        Flow::ContinueWith(Box::new(LetThrough { cookies, body }))
    }
}

/// With `forward_body`: the request's body, read whole (`None` without one, and for a
/// `CONNECT` of unknown length, whose bytes are the tunnel's), its framing now its length. A
/// body over `max_body_size` is refused with 401, a failure to read it is a 500, as Traefik
/// answers.
async fn read_body(
    config: &Config,
    worker: &Worker,
    req: &mut RequestHead,
    client: &mut impl ClientSide,
) -> Result<Option<Bytes>, Flow<'static>> {
    let tunnel = req.method() == "CONNECT" && !matches!(req.framing, Framing::Length(_));
    if req.framing == Framing::None || tunnel {
        return Ok(None);
    }
    let max = config.max_body_size.unwrap_or(u64::MAX);
    match client.read_body(worker, req, max).await {
        // Read by an earlier `forward_body` filter, which gave the body its length (the
        // action sends what that one read).
        Ok(body) if body.is_empty() && matches!(req.framing, Framing::Length(1..)) => Ok(None),
        Ok(body) => {
            req.framing = match body.len() {
                0 => Framing::None,
                n => Framing::Length(n as u64),
            };
            Ok(Some(body))
        }
        Err(BodyError::TooLarge) => {
            let refusal = LocalError::new(401, ErrorKind::PolicyRefused, "Unauthorized");
            Err(Flow::Refuse(refusal))
        }
        Err(_) => Err(server_failed()),
    }
}

/// Traefik answers `500` when the server cannot be asked or its answer cannot be read.
fn server_failed() -> Flow<'static> {
    let message = "Internal Server Error";
    Flow::Refuse(LocalError::new(500, ErrorKind::PolicyRefused, message))
}

/// The fields Traefik manages as forwarding fields (`forwardedheaders.XHeadersSet`), also
/// spelled with `_` for `-`.
fn is_forwarding_field(name: &[u8]) -> bool {
    const MANAGED: [&[u8]; 12] = [
        b"x-forwarded-proto",
        b"x-forwarded-for",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-forwarded-scheme",
        b"x-forwarded-server",
        b"x-forwarded-uri",
        b"x-forwarded-method",
        b"x-forwarded-prefix",
        b"x-forwarded-tls-client-cert",
        b"x-forwarded-tls-client-cert-info",
        b"x-real-ip",
    ];
    let dashed: Vec<u8> = name
        .iter()
        .map(|&b| if b == b'_' { b'-' } else { b })
        .collect();
    MANAGED.iter().any(|m| eq_ignore_case(m, &dashed))
}

/// The head sent to the server: `GET` of its target with the client's fields (hop-by-hop ones
/// dropped by the upstream side), less its forwarding fields unless trusted, only
/// `auth_request_headers` (and trusted forwarding fields) when those are named, then
/// `X-Forwarded-Method`, `-Port` and `-Uri` where absent. `X-Forwarded-For`, `-Proto` and
/// `-Host` are written by the upstream side as for any request; the Host given here (the
/// client's, or its trusted `X-Forwarded-Host`) is what `X-Forwarded-Host` says.
fn auth_request(
    config: &Config,
    req: &RequestHead,
    scheme: Scheme,
    body_length: Option<usize>,
) -> Option<RequestHead> {
    let trusted = config.trust_forward_header;
    let connection = req.head.get("connection");
    let named = &config.auth_request_headers;
    let kept = |name: &[u8]| {
        let forwarding = is_forwarding_field(name);
        let listed = named.is_empty() || named.iter().any(|n| eq_ignore_case(n.as_bytes(), name));
        // `Trailers` is on Traefik's hop-by-hop list; the upstream side drops the others.
        (if forwarding { trusted } else { listed })
            && !connection.is_some_and(|c| lists_token(c, name))
            && !eq_ignore_case(name, b"trailers")
    };
    let fields: Vec<(&[u8], &[u8])> = req.head.iter().filter(|(n, _)| kept(n)).collect();
    let present = |name: &str| {
        fields
            .iter()
            .any(|(n, _)| eq_ignore_case(n, name.as_bytes()))
    };
    let mut added: Vec<(&[u8], Vec<u8>)> = Vec::new();
    if !present("x-forwarded-method") {
        added.push((b"x-forwarded-method", req.method().as_bytes().to_vec()));
    }
    if !present("x-forwarded-port") {
        let proto = fields
            .iter()
            .find(|(n, _)| eq_ignore_case(n, b"x-forwarded-proto"))
            .map(|(_, v)| *v);
        added.push((
            b"x-forwarded-port",
            forwarded_port(req.host(), proto, scheme),
        ));
    }
    if !present("x-forwarded-uri") {
        added.push((b"x-forwarded-uri", request_uri(req).into_bytes()));
    }
    let host = fields
        .iter()
        .find(|(n, _)| trusted && eq_ignore_case(n, b"x-forwarded-host"))
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .unwrap_or(req.host());
    let all = fields
        .iter()
        .copied()
        .chain(added.iter().map(|(n, v)| (*n, v.as_slice())));
    subrequest::request_head("GET", &config.target, host, all, body_length)
}

/// The port the client asked for: the Host's, else 443 for an https (or wss) request (as a
/// trusted `X-Forwarded-Proto` says, else as it came), else 80.
fn forwarded_port(host: &str, proto: Option<&[u8]>, scheme: Scheme) -> Vec<u8> {
    let port = match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && !name.ends_with(':') => port,
        _ => "",
    };
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        return port.as_bytes().to_vec();
    }
    let secure = proto.is_some_and(|p| eq_ignore_case(p, b"https") || eq_ignore_case(p, b"wss"));
    match secure || scheme == Scheme::Https {
        true => b"443".to_vec(),
        false => b"80".to_vec(),
    }
}

/// The request's path and query, as Go's `URL.RequestURI`.
fn request_uri(req: &RequestHead) -> String {
    match req.query() {
        "" => req.path().to_string(),
        query => format!("{}?{query}", req.path()),
    }
}

/// The answer's `auth_response_headers` and the fields `auth_response_headers_regex` matches
/// replace the request's of those names.
fn copy_answer_fields(config: &Config, answer: &ResponseHead, head: &mut Head) {
    for name in &config.auth_response_headers {
        head.remove(name);
        for value in answer.head.get_all(name) {
            head.append(name, value);
        }
    }
    if let Some(regex) = &config.auth_response_headers_regex {
        let matches = |name: &[u8]| regex.is_match(&canonical_name(name));
        if head.iter().any(|(n, _)| matches(n)) {
            *head = head.without(matches);
        }
        for (name, value) in answer.head.iter().filter(|(n, _)| matches(n)) {
            head.append_field(canonical_name(name).as_bytes(), value);
        }
    }
}

/// A field name in Go's canonical form (`x-auth-user` is `X-Auth-User`), which Traefik's
/// expression is matched against.
fn canonical_name(name: &[u8]) -> String {
    let mut upper = true;
    name.iter()
        .map(|&b| {
            let c = if upper {
                b.to_ascii_uppercase()
            } else {
                b.to_ascii_lowercase()
            };
            upper = b == b'-';
            c as char
        })
        .collect()
}

/// `Location` resolved against the server's address (`server` URL and `target`), as Go's
/// `Response.Location` does: absolute and scheme-relative ones as they are, a path from the
/// server's root, a query or relative path from the target's.
fn absolute_location(fields: &mut [(String, String)], (server, target): (&str, &str)) {
    let Some((_, location)) = fields
        .iter_mut()
        .find(|(n, v)| n.eq_ignore_ascii_case("location") && !v.is_empty())
    else {
        return;
    };
    let has_scheme = location.split_once(':').is_some_and(|(scheme, _)| {
        let mut bytes = scheme.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
            && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    });
    let path = target.split('?').next().unwrap_or(target);
    *location = if has_scheme {
        return;
    } else if location.starts_with("//") {
        let scheme = server.split("://").next().unwrap_or("http");
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{server}{location}")
    } else if location.starts_with('?') {
        format!("{server}{path}{location}")
    } else {
        let folder = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{server}{folder}{location}")
    };
}

impl AuthCookies {
    /// The answer's own cookies of the server's names are dropped, then the server's are set.
    pub fn apply(&self, answer: &mut ResponseHead) {
        let named = |cookie: &[u8]| {
            let name = cookie
                .split(|&b| b == b'=')
                .next()
                .unwrap_or(cookie)
                .trim_ascii();
            self.names.iter().any(|n| n.as_bytes() == name)
        };
        let own: Vec<Bytes> = answer
            .head
            .get_all("set-cookie")
            .filter(|c| !named(c))
            .map(Bytes::copy_from_slice)
            .collect();
        answer.head.remove("set-cookie");
        let server_s = self.cookies.iter().filter(|c| named(c));
        for cookie in own.iter().chain(server_s) {
            answer.head.append("set-cookie", cookie);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_put_in_go_s_canonical_form() {
        assert_eq!(canonical_name(b"x-auth-USER"), "X-Auth-User");
        assert_eq!(canonical_name(b"foo-bar"), "Foo-Bar");
    }

    #[test]
    fn the_port_is_the_host_s_else_the_scheme_s() {
        assert_eq!(forwarded_port("foo.bar", None, Scheme::Http), b"80");
        assert_eq!(forwarded_port("foo.bar:8080", None, Scheme::Http), b"8080");
        assert_eq!(forwarded_port("[::1]:81", None, Scheme::Http), b"81");
        assert_eq!(forwarded_port("[::1]", None, Scheme::Https), b"443");
        assert_eq!(
            forwarded_port("foo.bar", Some(b"wss"), Scheme::Http),
            b"443"
        );
    }

    #[test]
    fn forwarding_fields_include_their_underscore_spellings() {
        assert!(is_forwarding_field(b"X_forwarded_for") && is_forwarding_field(b"x-real-ip"));
        assert!(!is_forwarding_field(b"x-forwarded") && !is_forwarding_field(b"accept"));
    }

    #[test]
    fn a_location_is_resolved_against_the_address() {
        let resolved = |location: &str| {
            let mut fields = vec![("location".to_string(), location.to_string())];
            absolute_location(&mut fields, ("http://auth:9000", "/check/user?x=1"));
            fields.remove(0).1
        };
        assert_eq!(
            resolved("http://example.com/redirect-test"),
            "http://example.com/redirect-test"
        );
        assert_eq!(resolved("/index.html"), "http://auth:9000/index.html");
        assert_eq!(resolved("//other/x"), "http://other/x");
        assert_eq!(resolved("?y=2"), "http://auth:9000/check/user?y=2");
        assert_eq!(resolved("login"), "http://auth:9000/check/login");
    }
}
