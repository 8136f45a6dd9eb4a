//! Rule matching. Routes are ranked (priority, then declaration order); literal `Host`,
//! `Path` and `PathPrefix` constraints are compiled into hash tables so a request only
//! evaluates the few routes that could match, whatever the total count.

use crate::http::codec::{Head, RequestHead};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use weir_config::rule::{canonical_host, HostPattern, Matcher, Rule};

/// What the router looks at in a request.
pub struct RequestView<'a> {
    pub method: &'a str,
    /// Lower-cased, without port.
    pub host: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a Head,
    pub client_ip: IpAddr,
}

/// The path rules see, as in Traefik: percent-escapes decoded, except those of reserved
/// characters (RFC 3986 gen-delims and sub-delims) and `%25`, which keep their meaning (`%2F`
/// stays distinct from `/`). A path whose decoding is not UTF-8 is matched as received.
pub fn routing_path(path: &str) -> Cow<'_, str> {
    if !path.contains('%') {
        return Cow::Borrowed(path);
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| !b":/?#[]@!$&'()*+,;=%".contains(b));
        match decoded {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    match String::from_utf8(out) {
        Ok(decoded) => Cow::Owned(decoded),
        Err(_) => Cow::Borrowed(path),
    }
}

/// FNV-1a for the router's tables. They are built from the config and never take inserts from
/// requests, so a keyed hash buys no flooding resistance here; SipHash cost 3% of a request.
/// (The Lua phases' carried state uses it too, keyed by weir's own addresses.)
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf29ce484222325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        self.0 = h;
    }
}

type Table<V> = HashMap<Box<str>, V, BuildHasherDefault<Fnv>>;

/// Route ranks (indexes into `Router::routes`), ascending, so the first match is the best.
#[derive(Default, Debug)]
struct Bucket {
    exact: Table<Vec<u32>>,
    prefix: Table<Vec<u32>>,
    /// Distinct prefix lengths, longest first.
    prefix_lens: Vec<usize>,
    unindexed: Vec<u32>,
}

impl Bucket {
    fn insert(&mut self, keys: &PathKeys, rank: u32) {
        match keys {
            PathKeys::Any => self.unindexed.push(rank),
            PathKeys::Some { exact, prefix } => {
                for p in exact {
                    push_unique(self.exact.entry(p.as_str().into()).or_default(), rank);
                }
                for p in prefix {
                    push_unique(self.prefix.entry(p.as_str().into()).or_default(), rank);
                    if !self.prefix_lens.contains(&p.len()) {
                        self.prefix_lens.push(p.len());
                    }
                }
            }
        }
    }

    fn finish(&mut self) {
        self.prefix_lens.sort_unstable_by(|a, b| b.cmp(a));
    }

    /// Narrows `best` to the lowest-ranked matching route among this bucket's candidates.
    fn search<T>(&self, router: &Router<T>, req: &RequestView, best: &mut u32) {
        if let Some(ranks) = self.exact.get(req.path) {
            router.first_match(ranks, req, best);
        }
        for &len in &self.prefix_lens {
            if len <= req.path.len() && req.path.is_char_boundary(len) {
                if let Some(ranks) = self.prefix.get(&req.path[..len]) {
                    router.first_match(ranks, req, best);
                }
            }
        }
        router.first_match(&self.unindexed, req, best);
    }
}

fn push_unique(ranks: &mut Vec<u32>, rank: u32) {
    if ranks.last() != Some(&rank) {
        ranks.push(rank);
    }
}

pub struct Router<T> {
    routes: Vec<(Rule, T)>,
    by_host: Table<Bucket>,
    any_host: Bucket,
}

impl<T> Router<T> {
    /// Builds a router from `(rule, priority, value)` in declaration order.
    pub fn new(mut routes: Vec<(Rule, i64, T)>) -> Router<T> {
        // Stable sort: equal priorities keep declaration order.
        routes.sort_by_key(|r| std::cmp::Reverse(r.1));
        let mut router = Router {
            routes: Vec::with_capacity(routes.len()),
            by_host: Table::default(),
            any_host: Bucket::default(),
        };
        for (rank, (rule, _, value)) in routes.into_iter().enumerate() {
            let rank = rank as u32;
            let paths = path_keys(&rule);
            match host_keys(&rule) {
                None => router.any_host.insert(&paths, rank),
                Some(hosts) => {
                    for host in hosts {
                        router
                            .by_host
                            .entry(host.into())
                            .or_default()
                            .insert(&paths, rank);
                    }
                }
            }
            router.routes.push((rule, value));
        }
        router.any_host.finish();
        for bucket in router.by_host.values_mut() {
            bucket.finish();
        }
        router
    }

    /// Routes a parsed request that came from `client_ip`.
    pub fn route_request(&self, head: &RequestHead, client_ip: IpAddr) -> Option<&T> {
        let host = canonical_host(head.host());
        let path = routing_path(head.path());
        self.route(&RequestView {
            method: head.method(),
            host: &host,
            path: &path,
            query: head.query(),
            headers: &head.head,
            client_ip,
        })
    }

    pub fn route(&self, req: &RequestView) -> Option<&T> {
        let mut best = u32::MAX;
        if let Some(bucket) = self.by_host.get(req.host) {
            bucket.search(self, req, &mut best);
        }
        self.any_host.search(self, req, &mut best);
        self.routes.get(best as usize).map(|(_, v)| v)
    }

    fn first_match(&self, ranks: &[u32], req: &RequestView, best: &mut u32) {
        for &rank in ranks {
            if rank >= *best {
                return;
            }
            if matches(&self.routes[rank as usize].0, req) {
                *best = rank;
                return;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// The literal hosts a request must have for `rule` to match, or `None` if any host might.
fn host_keys(rule: &Rule) -> Option<Vec<String>> {
    match rule {
        Rule::Match(Matcher::Host(HostPattern::Exact(h))) => Some(vec![h.clone()]),
        Rule::And(a, b) => host_keys(a).or_else(|| host_keys(b)),
        Rule::Or(a, b) => {
            let mut left = host_keys(a)?;
            left.extend(host_keys(b)?);
            Some(left)
        }
        _ => None,
    }
}

enum PathKeys {
    Any,
    Some {
        exact: Vec<String>,
        prefix: Vec<String>,
    },
}

/// The literal paths or prefixes a request must have for `rule` to match.
fn path_keys(rule: &Rule) -> PathKeys {
    match rule {
        Rule::Match(Matcher::Path(p)) => PathKeys::Some {
            exact: vec![p.clone()],
            prefix: vec![],
        },
        Rule::Match(Matcher::PathPrefix(p)) => PathKeys::Some {
            exact: vec![],
            prefix: vec![p.clone()],
        },
        Rule::And(a, b) => match (path_keys(a), path_keys(b)) {
            // Prefer the side with exact paths: the narrower lookup.
            (PathKeys::Any, other) | (other, PathKeys::Any) => other,
            (left @ PathKeys::Some { .. }, right) => {
                if matches!(&right, PathKeys::Some { prefix, .. } if prefix.is_empty()) {
                    right
                } else {
                    left
                }
            }
        },
        Rule::Or(a, b) => match (path_keys(a), path_keys(b)) {
            (
                PathKeys::Some {
                    mut exact,
                    mut prefix,
                },
                PathKeys::Some {
                    exact: e2,
                    prefix: p2,
                },
            ) => {
                exact.extend(e2);
                prefix.extend(p2);
                PathKeys::Some { exact, prefix }
            }
            _ => PathKeys::Any,
        },
        _ => PathKeys::Any,
    }
}

/// Evaluates a rule against a request.
pub fn matches(rule: &Rule, req: &RequestView) -> bool {
    match rule {
        Rule::And(a, b) => matches(a, req) && matches(b, req),
        Rule::Or(a, b) => matches(a, req) || matches(b, req),
        Rule::Not(a) => !matches(a, req),
        Rule::Match(m) => match m {
            Matcher::Host(pattern) => pattern.matches(req.host),
            Matcher::HostRegexp(re) => re.is_match(req.host),
            Matcher::Path(p) => req.path == p,
            Matcher::PathPrefix(p) => req.path.starts_with(p.as_str()),
            Matcher::PathRegexp(re) => re.is_match(req.path),
            Matcher::Method(m) => req.method == m,
            Matcher::Header(name, value) => {
                req.headers.get_all(name).any(|v| v == value.as_bytes())
            }
            Matcher::HeaderRegexp(name, re) => req
                .headers
                .get_all(name)
                .any(|v| std::str::from_utf8(v).is_ok_and(|v| re.is_match(v))),
            Matcher::Query(key, value) => query_values(req.query, key).any(|v| v == value.as_str()),
            Matcher::QueryRegexp(key, re) => query_values(req.query, key).any(|v| re.is_match(&v)),
            Matcher::ClientIp(net) => net.contains(req.client_ip),
        },
    }
}

/// Decoded values of `key` in a query string.
pub(crate) fn query_values<'a>(
    query: &'a str,
    key: &'a str,
) -> impl Iterator<Item = Cow<'a, str>> + 'a {
    query.split('&').filter_map(move |pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == key).then(|| percent_decode(v))
    })
}

/// A path's `%XX` escapes decoded (`+` is itself in a path); `None` for a malformed escape.
pub fn path_unescape(raw: &str) -> Option<Cow<'_, [u8]>> {
    let bytes = raw.as_bytes();
    if !bytes.contains(&b'%') {
        return Some(Cow::Borrowed(bytes));
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(Cow::Owned(out))
}

/// Decodes `%XX` escapes and `+` as space; leaves malformed escapes as written.
pub fn percent_decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_paths_decode_all_but_reserved_escapes() {
        assert_eq!(routing_path("/plain"), "/plain");
        assert_eq!(routing_path("/foo%20bar%7e"), "/foo bar~");
        assert_eq!(routing_path("/a%2Fb%2fc%3F%25"), "/a%2Fb%2fc%3F%25");
        assert_eq!(routing_path("/bad%zz%"), "/bad%zz%");
        assert_eq!(routing_path("/%FF"), "/%FF");
        assert_eq!(routing_path("/caf%C3%A9"), "/café");
    }
    use bytes::BytesMut;

    fn router(rules: &[(&str, Option<i64>)]) -> Router<usize> {
        Router::new(
            rules
                .iter()
                .enumerate()
                .map(|(i, (text, prio))| {
                    let rule = weir_config::rule::parse(text).unwrap();
                    (rule, prio.unwrap_or(text.len() as i64), i)
                })
                .collect(),
        )
    }

    fn route(
        r: &Router<usize>,
        method: &str,
        host: &str,
        target: &str,
        headers: &str,
    ) -> Option<usize> {
        let mut buf = BytesMut::from(
            format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n").as_str(),
        );
        let head = crate::http::codec::parse_request(&mut buf)
            .unwrap()
            .unwrap();
        r.route_request(&head, "10.1.2.3".parse().unwrap()).copied()
    }

    #[test]
    fn longer_rule_wins_by_default_and_priority_overrides() {
        let r = router(&[("PathPrefix(`/`)", None), ("PathPrefix(`/api`)", None)]);
        assert_eq!(route(&r, "GET", "a", "/api/x", ""), Some(1));
        assert_eq!(route(&r, "GET", "a", "/other", ""), Some(0));
        let r = router(&[("PathPrefix(`/`)", Some(100)), ("PathPrefix(`/api`)", None)]);
        assert_eq!(route(&r, "GET", "a", "/api/x", ""), Some(0));
    }

    #[test]
    fn each_matcher() {
        let cases: &[(&str, &str, &str, &str, &str, bool)] = &[
            ("Host(`a.com`)", "GET", "A.COM:8080", "/", "", true),
            ("Host(`a.com`)", "GET", "b.com", "/", "", false),
            (
                "HostRegexp(`^[a-z]+\\.example\\.com$`)",
                "GET",
                "API.example.com",
                "/",
                "",
                true,
            ),
            (
                "HostRegexp(`^[a-z]+\\.example\\.com$`)",
                "GET",
                "example.com",
                "/",
                "",
                false,
            ),
            ("Path(`/x`)", "GET", "a", "/x?q=1", "", true),
            ("Path(`/x`)", "GET", "a", "/x/", "", false),
            ("PathPrefix(`/x`)", "GET", "a", "/xy", "", true),
            ("PathRegexp(`^/v[0-9]+/`)", "GET", "a", "/v2/a", "", true),
            ("PathRegexp(`^/v[0-9]+/`)", "GET", "a", "/va/a", "", false),
            ("Method(`POST`)", "POST", "a", "/", "", true),
            ("Method(`POST`)", "GET", "a", "/", "", false),
            (
                "Header(`X-Env`, `prod`)",
                "GET",
                "a",
                "/",
                "x-env: prod\r\n",
                true,
            ),
            (
                "Header(`X-Env`, `prod`)",
                "GET",
                "a",
                "/",
                "x-env: dev\r\n",
                false,
            ),
            (
                "HeaderRegexp(`X-Env`, `^pr`)",
                "GET",
                "a",
                "/",
                "X-Env: prod\r\n",
                true,
            ),
            (
                "Query(`mobile`, `true`)",
                "GET",
                "a",
                "/?a=1&mobile=true",
                "",
                true,
            ),
            (
                "Query(`mobile`, `true`)",
                "GET",
                "a",
                "/?mobile=false",
                "",
                false,
            ),
            ("Query(`q`, `a b`)", "GET", "a", "/?q=a%20b", "", true),
            ("Query(`flag`)", "GET", "a", "/?flag", "", true),
            (
                "QueryRegexp(`id`, `^[0-9]+$`)",
                "GET",
                "a",
                "/?id=42",
                "",
                true,
            ),
            (
                "QueryRegexp(`id`, `^[0-9]+$`)",
                "GET",
                "a",
                "/?id=x",
                "",
                false,
            ),
            ("ClientIP(`10.1.0.0/16`)", "GET", "a", "/", "", true),
            ("ClientIP(`192.168.0.0/16`)", "GET", "a", "/", "", false),
            ("!Path(`/x`)", "GET", "a", "/y", "", true),
            (
                "Host(`a`) && (Path(`/1`) || Path(`/2`))",
                "GET",
                "a",
                "/2",
                "",
                true,
            ),
            (
                "Host(`a`) && (Path(`/1`) || Path(`/2`))",
                "GET",
                "b",
                "/2",
                "",
                false,
            ),
            ("Host(`a`) || Host(`b`)", "GET", "b", "/", "", true),
        ];
        for (rule, method, host, target, headers, want) in cases {
            let r = router(&[(rule, None)]);
            assert_eq!(
                route(&r, method, host, target, headers).is_some(),
                *want,
                "{rule} {host} {target}"
            );
        }
    }

    #[test]
    fn indexed_and_unindexed_routes_respect_rank() {
        // The unindexed route has a higher priority than the indexed exact one.
        let r = router(&[
            ("Path(`/a`)", Some(1)),
            ("Method(`GET`)", Some(5)),
            ("Host(`h`) && Path(`/a`)", Some(3)),
        ]);
        assert_eq!(route(&r, "GET", "h", "/a", ""), Some(1));
        assert_eq!(route(&r, "POST", "h", "/a", ""), Some(2));
        assert_eq!(route(&r, "POST", "x", "/a", ""), Some(0));
        assert_eq!(route(&r, "POST", "x", "/b", ""), None);
    }

    #[test]
    fn ten_thousand_hosts() {
        let rules: Vec<String> = (0..10_000)
            .map(|i| format!("Host(`h{i}.test`) && PathPrefix(`/`)"))
            .collect();
        let r = Router::new(
            rules
                .iter()
                .enumerate()
                .map(|(i, t)| (weir_config::rule::parse(t).unwrap(), 0, i))
                .collect(),
        );
        assert_eq!(route(&r, "GET", "h9999.test", "/x", ""), Some(9999));
        assert_eq!(route(&r, "GET", "nope.test", "/x", ""), None);
    }
}
