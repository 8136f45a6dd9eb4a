//! `middlewares.NAME`: one of strip_prefix, add_prefix, replace_path_regex, headers,
//! redirect_scheme, compress, ip_allow_list, replace_path, strip_prefix_regex, redirect_regex,
//! chain, basic_auth, digest_auth, rate_limit, in_flight_req, circuit_breaker, buffering, jwt
//! (read in `load/jwt.rs`), grpc_web, errors, forward_auth or lua (read in `load/lua.rs`);
//! and the chains resolved into flat
//! lists (every name defined, no loop).

use super::{is_header_name, is_header_value, Fields, Loader};
use crate::model::*;
use crate::yaml::{Node, Pos, Value};
use std::collections::HashMap;
use std::time::Duration;

/// Why `path` cannot be a request path as sent: a malformed `%` escape, or a byte a request
/// line cannot carry.
fn check_raw_path(path: &str) -> Result<(), &'static str> {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let whole = bytes
                    .get(i + 1..i + 3)
                    .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit));
                if !whole {
                    return Err("has a `%` not followed by two hex digits");
                }
                i += 3;
                continue;
            }
            b'?' | b'#' => return Err("must not hold a query or fragment"),
            b if b <= b' ' || b == 0x7f => {
                return Err("must not hold spaces or control characters")
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

impl Loader<'_> {
    pub(super) fn middleware(&mut self, name: String, node: &Node) -> Option<Middleware> {
        const KINDS: &[&str] = &[
            "strip_prefix",
            "add_prefix",
            "replace_path_regex",
            "headers",
            "redirect_scheme",
            "compress",
            "ip_allow_list",
            "replace_path",
            "strip_prefix_regex",
            "redirect_regex",
            "chain",
            "basic_auth",
            "digest_auth",
            "buffering",
            "rate_limit",
            "in_flight_req",
            "jwt",
            "circuit_breaker",
            "grpc_web",
            "errors",
            "forward_auth",
            "lua",
        ];
        let what = format!("middleware `{name}`");
        let f = self.fields(node, &what, KINDS)?;
        if f.entries.len() != 1 {
            self.error(
                f.pos,
                format!("{what} must have exactly one of: {}", KINDS.join(", ")),
            );
            return None;
        }
        let (kind, body) = f.entries[0];
        let kind = match kind {
            "strip_prefix" => self.strip_prefix(body),
            "add_prefix" => self.add_prefix(body)?,
            "replace_path_regex" => self.replace_path_regex(body)?,
            "headers" => self.headers(body)?,
            "compress" => MiddlewareKind::Compress(self.compress(body)?),
            "ip_allow_list" => MiddlewareKind::IpAllowList(self.ip_allow_list(body)?),
            "replace_path" => self.replace_path(body)?,
            "strip_prefix_regex" => self.strip_prefix_regex(body)?,
            "redirect_regex" => self.redirect_regex(body)?,
            "chain" => self.chain(body)?,
            "basic_auth" => MiddlewareKind::BasicAuth(self.basic_auth(body)?),
            "digest_auth" => MiddlewareKind::DigestAuth(self.digest_auth(body)?),
            "buffering" => MiddlewareKind::Buffering(self.buffering(body)?),
            "rate_limit" => MiddlewareKind::RateLimit(self.rate_limit(body)?),
            "in_flight_req" => MiddlewareKind::InFlightReq(self.in_flight_req(body)?),
            "jwt" => self.jwt(&name, body)?,
            "circuit_breaker" => MiddlewareKind::CircuitBreaker(self.circuit_breaker(body)?),
            "grpc_web" => MiddlewareKind::GrpcWeb(self.grpc_web(body)?),
            "errors" => MiddlewareKind::Errors(Box::new(self.error_pages(body)?)),
            "forward_auth" => {
                MiddlewareKind::ForwardAuth(Box::new(self.forward_auth(&name, body)?))
            }
            "lua" => MiddlewareKind::Lua(Box::new(self.lua_phases(body)?)),
            _ => self.redirect_scheme(body)?,
        };
        Some(Middleware { name, kind })
    }

    /// `strip_prefix: PREFIX` or a list of them, each starting with `/`.
    fn strip_prefix(&mut self, body: &Node) -> MiddlewareKind {
        let prefixes = self.string_list(body, "`strip_prefix`");
        for (p, pos) in &prefixes {
            if !p.starts_with('/') {
                self.error(*pos, format!("prefix `{p}` must start with `/`"));
            }
        }
        MiddlewareKind::StripPrefix(prefixes.into_iter().map(|(p, _)| p).collect())
    }

    /// `add_prefix: PREFIX`, starting with `/`.
    fn add_prefix(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let p = self.string(body, "`add_prefix`")?;
        if !p.starts_with('/') {
            self.error(body.pos, format!("prefix `{p}` must start with `/`"));
        }
        Some(MiddlewareKind::AddPrefix(p))
    }

    /// `replace_path_regex: { regex, replacement }`.
    fn replace_path_regex(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`replace_path_regex`", &["regex", "replacement"])?;
        let (regex, replacement) = self.regex_and_replacement(&rf, "`replace_path_regex`")?;
        Some(MiddlewareKind::ReplacePathRegex { regex, replacement })
    }

    /// The `regex` (compiled) and `replacement` that `what` needs both of.
    fn regex_and_replacement(
        &mut self,
        f: &Fields<'_>,
        what: &str,
    ) -> Option<(regex::Regex, String)> {
        let (Some(r), Some(rep)) = (f.get("regex"), f.get("replacement")) else {
            self.error(f.pos, format!("{what} needs `regex` and `replacement`"));
            return None;
        };
        let source = self.string(r, "`regex`")?;
        let replacement = self.string(rep, "`replacement`")?;
        match regex::Regex::new(&source) {
            Ok(regex) => Some((regex, replacement)),
            Err(e) => {
                self.error(
                    r.pos,
                    format!(
                        "invalid regular expression: {}",
                        crate::regex_error::one_line(&e)
                    ),
                );
                None
            }
        }
    }

    /// `replace_path: { path }`: a path as sent on the wire, so its escapes must be whole.
    fn replace_path(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`replace_path`", &["path"])?;
        let Some(p) = rf.get("path") else {
            self.error(rf.pos, "`replace_path` needs `path`");
            return None;
        };
        let path = self.string(p, "`path`")?;
        if !path.starts_with('/') {
            self.error(p.pos, format!("path `{path}` must start with `/`"));
            return None;
        }
        if let Err(problem) = check_raw_path(&path) {
            self.error(p.pos, format!("path `{path}` {problem}"));
            return None;
        }
        Some(MiddlewareKind::ReplacePath(path))
    }

    /// `strip_prefix_regex: { regex: [...] }`, at least one expression.
    fn strip_prefix_regex(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`strip_prefix_regex`", &["regex"])?;
        let Some(list) = rf.get("regex") else {
            self.error(rf.pos, "`strip_prefix_regex` needs `regex`");
            return None;
        };
        let sources = self.string_list(list, "`regex`");
        if sources.is_empty() {
            self.error(list.pos, "`regex` must list at least one expression");
            return None;
        }
        let mut expressions = Vec::with_capacity(sources.len());
        for (source, pos) in sources {
            // Traefik trims the spaces around each expression.
            match regex::bytes::Regex::new(source.trim()) {
                Ok(regex) => expressions.push(regex),
                Err(e) => self.error(
                    pos,
                    format!(
                        "invalid regular expression: {}",
                        crate::regex_error::one_line(&e)
                    ),
                ),
            }
        }
        Some(MiddlewareKind::StripPrefixRegex(expressions))
    }

    /// `redirect_regex: { regex, replacement, permanent }` (temporary by default).
    fn redirect_regex(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(
            body,
            "`redirect_regex`",
            &["regex", "replacement", "permanent"],
        )?;
        let compiled = self.regex_and_replacement(&rf, "`redirect_regex`");
        let permanent = match rf.get("permanent") {
            Some(p) => self.boolean(p, "`permanent`")?,
            None => false,
        };
        let (regex, replacement) = compiled?;
        Some(MiddlewareKind::RedirectRegex {
            regex,
            replacement,
            permanent,
        })
    }

    /// `chain: { middlewares: [...] }`; the names are checked once every middleware is read
    /// ([`Loader::resolve_chains`]).
    fn chain(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let cf = self.fields(body, "`chain`", &["middlewares"])?;
        let Some(list) = cf.get("middlewares") else {
            self.error(cf.pos, "`chain` needs `middlewares`");
            return None;
        };
        Some(MiddlewareKind::Chain(
            self.string_list(list, "`middlewares`"),
        ))
    }

    /// Every chain's flat list of middlewares, in order. Says where a chain names a middleware
    /// that is not defined, or one that leads back to the chain; such a chain gets no list.
    pub(super) fn resolve_chains(
        &mut self,
        middlewares: &[Middleware],
    ) -> HashMap<String, Vec<String>> {
        let mut flat = HashMap::new();
        for m in middlewares {
            if let MiddlewareKind::Chain(_) = m.kind {
                let mut path = vec![m.name.as_str()];
                let mut list = Vec::new();
                if self.flatten_chain(middlewares, &mut path, None, &mut list) {
                    flat.insert(m.name.clone(), list);
                }
            }
        }
        flat
    }

    /// Appends the members of the chain last in `path` to `out`, following the chains among
    /// them; `path` holds the chains being expanded, outermost first. `entry` is where the
    /// outermost chain names the member being expanded (`None` while reading the outermost
    /// itself): an error is told there and for the outermost chain only, since every chain is
    /// resolved in turn and tells its own.
    fn flatten_chain<'m>(
        &mut self,
        middlewares: &'m [Middleware],
        path: &mut Vec<&'m str>,
        entry: Option<Pos>,
        out: &mut Vec<String>,
    ) -> bool {
        let Some(MiddlewareKind::Chain(members)) = path
            .last()
            .and_then(|name| middlewares.iter().find(|m| m.name == *name))
            .map(|m| &m.kind)
        else {
            return false;
        };
        let mut ok = true;
        for (name, pos) in members {
            let Some(member) = middlewares.iter().find(|m| m.name == *name) else {
                if entry.is_none() {
                    let defined = middlewares.iter().map(|m| m.name.as_str());
                    let what = format!("chain `{}`", path[0]);
                    self.is_defined(*pos, (&what, "middleware", name), defined);
                }
                ok = false;
                continue;
            };
            if path.contains(&member.name.as_str()) {
                if path[0] == name {
                    let around: Vec<&str> = path.iter().copied().chain([path[0]]).collect();
                    let message = format!("chain `{}` loops: {}", path[0], around.join(" → "));
                    self.error(entry.unwrap_or(*pos), message);
                }
                ok = false;
                continue;
            }
            if let MiddlewareKind::Chain(_) = member.kind {
                path.push(member.name.as_str());
                ok &= self.flatten_chain(middlewares, path, entry.or(Some(*pos)), out);
                path.pop();
            } else {
                out.push(name.clone());
            }
        }
        ok
    }

    /// `headers: { request, response }`, each a set of header operations.
    fn headers(&mut self, body: &Node) -> Option<MiddlewareKind> {
        const KEYS: &[&str] = &[
            "request",
            "response",
            "access_control_allow_origin_list",
            "access_control_allow_origin_list_regex",
            "access_control_allow_methods",
            "access_control_allow_headers",
            "access_control_expose_headers",
            "access_control_allow_credentials",
            "access_control_max_age",
            "add_vary_header",
            "allowed_hosts",
            "hosts_proxy_headers",
            "ssl_proxy_headers",
            "sts_seconds",
            "sts_include_subdomains",
            "sts_preload",
            "force_sts_header",
            "frame_deny",
            "custom_frame_options_value",
            "content_type_nosniff",
            "browser_xss_filter",
            "custom_browser_xss_value",
            "content_security_policy",
            "content_security_policy_report_only",
            "referrer_policy",
            "permissions_policy",
            "is_development",
        ];
        let hf = self.fields(body, "`headers`", KEYS)?;
        let request = hf
            .get("request")
            .map(|n| self.header_ops(n, "`headers.request`"))
            .unwrap_or_default();
        let response = hf
            .get("response")
            .map(|n| self.header_ops(n, "`headers.response`"))
            .unwrap_or_default();
        let allow_origin_list = self.names_key(&hf, "access_control_allow_origin_list");
        let regexes = self.list_key(&hf, "access_control_allow_origin_list_regex");
        let allow_methods = self.names_key(&hf, "access_control_allow_methods");
        let allow_headers = self.names_key(&hf, "access_control_allow_headers");
        let expose_headers = self.names_key(&hf, "access_control_expose_headers");
        let mut allow_origin_list_regex = Vec::with_capacity(regexes.len());
        for (source, pos) in regexes {
            match regex::Regex::new(&source) {
                Ok(regex) => allow_origin_list_regex.push(regex),
                Err(e) => self.error(
                    pos,
                    format!(
                        "invalid regular expression: {}",
                        crate::regex_error::one_line(&e)
                    ),
                ),
            }
        }
        let allow_credentials = self.flag_key(&hf, "access_control_allow_credentials");
        let add_vary_header = self.flag_key(&hf, "add_vary_header");
        let max_age = match hf.get("access_control_max_age") {
            Some(node) => self.uint(node, "`access_control_max_age`", 0, i64::MAX as u64),
            None => None,
        };
        let cors = Cors {
            allow_origin_list,
            allow_origin_list_regex,
            allow_methods,
            allow_headers,
            expose_headers,
            allow_credentials,
            max_age,
            add_vary_header,
        };
        // As Traefik's `HasCorsHeadersDefined`: any field set turns CORS on.
        let defined = !cors.allow_origin_list.is_empty()
            || !cors.allow_origin_list_regex.is_empty()
            || !cors.allow_methods.is_empty()
            || !cors.allow_headers.is_empty()
            || !cors.expose_headers.is_empty()
            || cors.allow_credentials
            || cors.max_age.is_some()
            || cors.add_vary_header;
        let secure = self.secure_headers(&hf);
        // As Traefik's: a `headers` that sets nothing is a mistake, not a no-op.
        if request.is_empty() && response.is_empty() && !defined && secure.is_none() {
            self.error(
                hf.pos,
                "`headers` sets nothing; expected `request`, `response`, CORS or security fields",
            );
        }
        Some(MiddlewareKind::Headers {
            request,
            response,
            cors: defined.then(|| Box::new(cors)),
            secure,
        })
    }

    /// The security fields of `headers`, when any is set (as Traefik's
    /// `HasSecureHeadersDefined`).
    fn secure_headers(&mut self, hf: &Fields<'_>) -> Option<Box<SecureHeaders>> {
        let ssl_proxy_headers = match hf.get("ssl_proxy_headers") {
            Some(node) => self.header_map(node, "`ssl_proxy_headers`"),
            None => Vec::new(),
        };
        let sts_seconds = hf.get("sts_seconds").map(|node| {
            self.uint(node, "`sts_seconds`", 0, i64::MAX as u64)
                .unwrap_or(0)
        });
        let secure = SecureHeaders {
            allowed_hosts: self.names_key(hf, "allowed_hosts"),
            hosts_proxy_headers: self.names_key(hf, "hosts_proxy_headers"),
            ssl_proxy_headers,
            sts_seconds: sts_seconds.unwrap_or(0),
            sts_include_subdomains: self.flag_key(hf, "sts_include_subdomains"),
            sts_preload: self.flag_key(hf, "sts_preload"),
            force_sts_header: self.flag_key(hf, "force_sts_header"),
            frame_deny: self.flag_key(hf, "frame_deny"),
            custom_frame_options_value: self.text_key(hf, "custom_frame_options_value"),
            content_type_nosniff: self.flag_key(hf, "content_type_nosniff"),
            browser_xss_filter: self.flag_key(hf, "browser_xss_filter"),
            custom_browser_xss_value: self.text_key(hf, "custom_browser_xss_value"),
            content_security_policy: self.text_key(hf, "content_security_policy"),
            content_security_policy_report_only: self
                .text_key(hf, "content_security_policy_report_only"),
            referrer_policy: self.text_key(hf, "referrer_policy"),
            permissions_policy: self.text_key(hf, "permissions_policy"),
            is_development: self.flag_key(hf, "is_development"),
        };
        let defined = !secure.allowed_hosts.is_empty()
            || !secure.hosts_proxy_headers.is_empty()
            || !secure.ssl_proxy_headers.is_empty()
            || sts_seconds.is_some()
            || secure.sts_include_subdomains
            || secure.sts_preload
            || secure.force_sts_header
            || secure.frame_deny
            || !secure.custom_frame_options_value.is_empty()
            || secure.content_type_nosniff
            || secure.browser_xss_filter
            || !secure.custom_browser_xss_value.is_empty()
            || !secure.content_security_policy.is_empty()
            || !secure.content_security_policy_report_only.is_empty()
            || !secure.referrer_policy.is_empty()
            || !secure.permissions_policy.is_empty()
            || secure.is_development;
        defined.then(|| Box::new(secure))
    }

    /// `redirect_scheme: { scheme, permanent }` (https and temporary by default).
    fn redirect_scheme(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`redirect_scheme`", &["scheme", "permanent"])?;
        let scheme = match rf.get("scheme") {
            Some(s) => self.string(s, "`scheme`")?,
            None => "https".to_string(),
        };
        if scheme != "http" && scheme != "https" {
            self.error(
                rf.pos,
                format!("unknown scheme `{scheme}`; expected http or https"),
            );
        }
        let permanent = match rf.get("permanent") {
            Some(p) => self.boolean(p, "`permanent`").unwrap_or(false),
            None => false,
        };
        Some(MiddlewareKind::RedirectScheme { scheme, permanent })
    }

    fn compress(&mut self, node: &Node) -> Option<Compress> {
        let mut compress = Compress::default();
        // `compress: {}` and a bare `compress:` both mean the defaults.
        if matches!(node.value, Value::Null) {
            return Some(compress);
        }
        const KEYS: &[&str] = &["algorithms", "level", "min_length", "types"];
        let f = self.fields(node, "`compress`", KEYS)?;
        if let Some(list) = f.get("algorithms") {
            let names = self.string_list(list, "`algorithms`");
            compress.algorithms.clear();
            for (name, pos) in names {
                match Encoding::ALL.into_iter().find(|e| e.token() == name) {
                    Some(e) if compress.algorithms.contains(&e) => {
                        self.error(pos, format!("`{name}` is listed twice"));
                    }
                    Some(e) => compress.algorithms.push(e),
                    None => self.error(
                        pos,
                        format!("unknown algorithm `{name}`; expected zstd, br or gzip"),
                    ),
                }
            }
            if compress.algorithms.is_empty() {
                self.error(
                    list.pos,
                    "`algorithms` must list at least one of zstd, br, gzip",
                );
            }
        }
        // Each key is checked even after an error, so every error is reported at once.
        let levels = f
            .get("level")
            .and_then(|n| self.fields(n, "`level`", &["gzip", "br", "zstd"]));
        if let Some(lf) = levels {
            if let Some(n) = lf
                .get("gzip")
                .and_then(|n| self.uint(n, "`level.gzip`", 1, 9))
            {
                compress.gzip_level = n as u32;
            }
            if let Some(n) = lf.get("br").and_then(|n| self.uint(n, "`level.br`", 0, 11)) {
                compress.br_level = n as u32;
            }
            if let Some(n) = lf
                .get("zstd")
                .and_then(|n| self.uint(n, "`level.zstd`", 1, 22))
            {
                compress.zstd_level = n as i32;
            }
        }
        if let Some(n) = f
            .get("min_length")
            .and_then(|n| self.size(n, "`min_length`"))
        {
            compress.min_length = n;
        }
        if let Some(list) = f.get("types") {
            let types = self.string_list(list, "`types`");
            compress.types.clear();
            for (media, pos) in types {
                let media = media.to_ascii_lowercase();
                let valid = media.split_once('/').is_some_and(|(t, sub)| {
                    !t.is_empty() && t != "*" && !sub.is_empty() && !media.contains([' ', ';'])
                });
                if valid {
                    compress.types.push(media);
                } else {
                    self.error(
                        pos,
                        format!("`{media}` is not a media type like `text/html` or `text/*`"),
                    );
                }
            }
        }
        Some(compress)
    }

    /// `ip_allow_list: { source_range, ip_strategy, reject_status_code }`.
    fn ip_allow_list(&mut self, body: &Node) -> Option<IpAllowList> {
        const KEYS: &[&str] = &["source_range", "ip_strategy", "reject_status_code"];
        let f = self.fields(body, "`ip_allow_list`", KEYS)?;
        // Each key is checked even after an error, so every error is reported at once.
        let source_range = match f.get("source_range") {
            Some(list) => self.ip_ranges(list, "`source_range`"),
            None => Some(IpRanges(Vec::new())),
        };
        // Traefik refuses an empty list: it would refuse every client.
        if source_range.as_ref().is_some_and(|r| r.0.is_empty()) {
            let pos = f.get("source_range").map_or(f.pos, |n| n.pos);
            self.error(
                pos,
                "`source_range` must list at least one address or network",
            );
        }
        let ip_strategy = match f.get("ip_strategy") {
            Some(n) => self.ip_strategy(n),
            None => Some(IpStrategy::RemoteAddr { ipv6_subnet: None }),
        };
        let reject_status_code = match f.get("reject_status_code") {
            Some(n) => self.final_status(n, "reject_status_code", "403 or 404"),
            None => Some(403),
        };
        Some(IpAllowList {
            source_range: source_range.filter(|r| !r.0.is_empty())?,
            ip_strategy: ip_strategy?,
            reject_status_code: reject_status_code?,
        })
    }

    /// A status Traefik accepts (one Go names), and a final one: 1xx cannot end a request.
    fn final_status(&mut self, node: &Node, key: &str, like: &str) -> Option<u16> {
        let text = self.string(node, &format!("`{key}`"))?;
        match text.parse::<u16>() {
            Ok(status) if status >= 200 && status_text(status).is_some() => Some(status),
            _ => {
                self.error(
                    node.pos,
                    format!(
                        "`{key}` must be a final HTTP status with a standard reason, like \
                         {like}, found `{text}`"
                    ),
                );
                None
            }
        }
    }

    /// `ip_strategy: { depth, excluded_ips, ipv6_subnet }`: `depth` wins over
    /// `excluded_ips`, as in Traefik; neither means the connection's address.
    fn ip_strategy(&mut self, node: &Node) -> Option<IpStrategy> {
        const KEYS: &[&str] = &["depth", "excluded_ips", "ipv6_subnet"];
        let f = self.fields(node, "`ip_strategy`", KEYS)?;
        let depth = match f.get("depth") {
            Some(n) => self
                .uint(n, "`depth`", 0, u32::MAX.into())
                .map(|d| d as u32),
            None => Some(0),
        };
        let excluded = match f.get("excluded_ips") {
            Some(list) => self.ip_ranges(list, "`excluded_ips`"),
            None => Some(IpRanges(Vec::new())),
        };
        let ipv6_subnet = match f.get("ipv6_subnet") {
            Some(n) => self.uint(n, "`ipv6_subnet`", 1, 128).map(|b| Some(b as u8)),
            None => Some(None),
        };
        let (depth, excluded, ipv6_subnet) = (depth?, excluded?, ipv6_subnet?);
        Some(if depth > 0 {
            IpStrategy::Depth { depth, ipv6_subnet }
        } else if !excluded.0.is_empty() {
            IpStrategy::Excluded(excluded)
        } else {
            IpStrategy::RemoteAddr { ipv6_subnet }
        })
    }

    /// `rate_limit: { average, period, burst, source_criterion, redis }`: Traefik's defaults (no
    /// limit, 1 s, a burst of 1); a `period` or `burst` of 0 means the default, as there.
    fn rate_limit(&mut self, node: &Node) -> Option<RateLimit> {
        const KEYS: &[&str] = &["average", "period", "burst", "source_criterion", "redis"];
        let f = self.fields(node, "`rate_limit`", KEYS)?;
        // average × 1e9 must fit Traefik's int64 nanosecond arithmetic.
        let average = match f.get("average") {
            Some(n) => self.uint(n, "`average`", 0, u64::from(u32::MAX)),
            None => Some(0),
        };
        let mut period = Duration::ZERO;
        let period_ok = self.duration_field(&f, "period", &mut period);
        let burst = match f.get("burst") {
            Some(n) => self.uint(n, "`burst`", 0, u64::from(u32::MAX)),
            None => Some(1),
        };
        let source_criterion = self.source_criterion_field(&f, SourceCriterion::default());
        let redis = match f.get("redis") {
            Some(node) => Some(self.redis_store(node)?),
            None => None,
        };
        period_ok?;
        if period.is_zero() {
            period = Duration::from_secs(1);
        }
        Some(RateLimit {
            average: average?,
            period,
            burst: burst?.max(1),
            source_criterion: source_criterion?,
            redis,
        })
    }

    /// `in_flight_req: { amount, source_criterion }`: `amount` is required (Traefik's default
    /// of 0 refuses every request); the source is the host by default, as in Traefik.
    fn in_flight_req(&mut self, node: &Node) -> Option<InFlightReq> {
        let f = self.fields(node, "`in_flight_req`", &["amount", "source_criterion"])?;
        let amount = match f.get("amount") {
            Some(n) => self.uint(n, "`amount`", 1, i64::MAX as u64),
            None => {
                self.error(
                    f.pos,
                    "`in_flight_req` needs `amount`, the requests allowed at once",
                );
                None
            }
        };
        let source_criterion = self.source_criterion_field(&f, SourceCriterion::RequestHost);
        Some(InFlightReq {
            amount: amount?,
            source_criterion: source_criterion?,
        })
    }

    /// `grpc_web: { allow_origins }`: each `*` or an origin as browsers send it.
    fn grpc_web(&mut self, node: &Node) -> Option<GrpcWeb> {
        let f = self.fields(node, "`grpc_web`", &["allow_origins"])?;
        let origins = self.list_key(&f, "allow_origins");
        for (origin, pos) in &origins {
            if origin.is_empty() || origin.bytes().any(|b| b <= b' ' || b == 0x7f) {
                let found = format!("{origin:?}");
                self.error(
                    *pos,
                    format!("an origin must be `*` or an `Origin` value such as `https://app.example.com`, found {found}"),
                );
            }
        }
        Some(GrpcWeb {
            allow_origins: origins.into_iter().map(|(origin, _)| origin).collect(),
        })
    }

    /// The `source_criterion` of a per-source policy, or `default` without one.
    fn source_criterion_field(
        &mut self,
        f: &Fields<'_>,
        default: SourceCriterion,
    ) -> Option<SourceCriterion> {
        match f.get("source_criterion") {
            Some(n) => self.source_criterion(n, default),
            None => Some(default),
        }
    }

    /// `source_criterion: { ip_strategy, request_header_name, request_host }`, at most one
    /// of them (an empty name and `false` count as absent, as in Traefik: then `default`).
    pub(super) fn source_criterion(
        &mut self,
        node: &Node,
        default: SourceCriterion,
    ) -> Option<SourceCriterion> {
        const KEYS: &[&str] = &["ip_strategy", "request_header_name", "request_host"];
        let f = self.fields(node, "`source_criterion`", KEYS)?;
        let mut chosen = Vec::new();
        if let Some(n) = f.get("ip_strategy") {
            chosen.push(("ip_strategy", self.ip_strategy(n).map(SourceCriterion::Ip)));
        }
        if let Some(n) = f.get("request_header_name") {
            let name = self.string(n, "`request_header_name`").unwrap_or_default();
            if !name.is_empty() && !is_header_name(&name) {
                self.error(n.pos, format!("`{name}` is not a valid header name"));
                chosen.push(("request_header_name", None));
            } else if !name.is_empty() {
                let header = SourceCriterion::RequestHeader(name.to_ascii_lowercase());
                chosen.push(("request_header_name", Some(header)));
            }
        }
        if let Some(n) = f.get("request_host") {
            if self.boolean(n, "`request_host`")? {
                chosen.push(("request_host", Some(SourceCriterion::RequestHost)));
            }
        }
        match chosen.as_slice() {
            [] => Some(default),
            [(_, criterion)] => criterion.clone(),
            [(first, _), (second, _), ..] => {
                self.error(
                    f.pos,
                    format!("`source_criterion` takes one of `{first}` and `{second}`, not both"),
                );
                None
            }
        }
    }

    /// A list of addresses and CIDR networks (Go's `net.ParseIP` or `net.ParseCIDR`: host
    /// bits past the prefix are allowed and ignored); `None` after an error.
    fn ip_ranges(&mut self, list: &Node, what: &str) -> Option<IpRanges> {
        let errors_before = self.errors.len();
        let mut ranges = Vec::new();
        for (text, pos) in self.string_list(list, what) {
            match parse_range(&text) {
                Some(net) => ranges.push(net),
                None => {
                    self.error(
                        pos,
                        format!(
                            "`{text}` is not an address or network; expected e.g. \
                             192.0.2.1, 10.0.0.0/8 or 2001:db8::/32"
                        ),
                    );
                }
            }
        }
        (self.errors.len() == errors_before).then_some(IpRanges(ranges))
    }

    /// `basic_auth: { users, users_file, realm, header_field, remove_header }`: the file's
    /// users first, then `users`, so a name in both keeps its `users` hash (as Traefik merges).
    fn basic_auth(&mut self, node: &Node) -> Option<BasicAuth> {
        let f = self.fields(node, "`basic_auth`", AUTH_KEYS)?;
        let mut users = std::collections::BTreeMap::new();
        let errors_before = self.errors.len();
        self.auth_users(&f, |line| {
            let (name, hash) = basic_user(line)?;
            users.insert(name.to_string(), hash.to_string());
            Ok(())
        });
        let (realm, header_field, remove_header) =
            self.auth_options(&f, DEFAULT_BASIC_AUTH_REALM)?;
        // Only when no line was refused: that error already says what is wrong.
        if users.is_empty() && self.errors.len() == errors_before {
            self.error(
                f.pos,
                "`basic_auth` needs at least one user, in `users` or `users_file`",
            );
        }
        Some(BasicAuth {
            users,
            realm,
            header_field,
            remove_header,
        })
    }

    /// The users of an authentication middleware: `users_file`'s lines, then `users`'s, each
    /// handed to `take`, whose refusal is an error at the line (a file's line number in it).
    fn auth_users(&mut self, f: &Fields<'_>, mut take: impl FnMut(&str) -> Result<(), String>) {
        if let Some(file) = f.get("users_file") {
            self.users_file(file, &mut take);
        }
        if let Some(list) = f.get("users") {
            for (line, pos) in self.string_list(list, "`users`") {
                if let Err(problem) = take(&line) {
                    self.error(pos, problem);
                }
            }
        }
    }

    /// An authentication middleware's `realm` (`default` when absent), `header_field` and
    /// `remove_header`.
    fn auth_options(
        &mut self,
        f: &Fields<'_>,
        default: &str,
    ) -> Option<(String, Option<String>, bool)> {
        let realm = match f.get("realm") {
            Some(n) => {
                let realm = self.string(n, "`realm`")?;
                // It is sent inside a quoted string, which these would end or break.
                if realm.contains(['"', '\\']) || !is_header_value(&realm) {
                    self.error(n.pos, "`realm` must be printable text without `\"` or `\\`");
                }
                realm
            }
            None => default.to_string(),
        };
        let header_field = match f.get("header_field") {
            Some(n) => {
                let name = self.string(n, "`header_field`")?;
                if !is_header_name(&name) {
                    self.error(n.pos, format!("`{name}` is not a valid header name"));
                }
                Some(name)
            }
            None => None,
        };
        let remove_header = self.flag_key(f, "remove_header");
        Some((realm, header_field, remove_header))
    }

    /// A users file as `htpasswd` or `htdigest` writes it, read now (relative to the config
    /// file's folder): each line handed to `take`; blank lines and lines starting with `#` are
    /// skipped.
    fn users_file(&mut self, node: &Node, take: &mut impl FnMut(&str) -> Result<(), String>) {
        let Some(path) = self.string(node, "`users_file`") else {
            return;
        };
        let path = self.base.join(path);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                let path = path.display();
                self.error(node.pos, format!("cannot read users file `{path}`: {e}"));
                return;
            }
        };
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Err(problem) = take(line) {
                let (path, number) = (path.display(), number + 1);
                self.error(
                    node.pos,
                    format!("users file `{path}` line {number}: {problem}"),
                );
            }
        }
    }

    // digest_auth: begin
    /// `digest_auth: { users, users_file, realm, header_field, remove_header }`: users as
    /// `htdigest` writes them, merged as `basic_auth`'s; at least one must be of `realm`.
    fn digest_auth(&mut self, node: &Node) -> Option<DigestAuth> {
        let f = self.fields(node, "`digest_auth`", AUTH_KEYS)?;
        let mut users = std::collections::BTreeMap::new();
        let errors_before = self.errors.len();
        self.auth_users(&f, |line| {
            let (name, realm, hash) = digest_user(line)?;
            users.insert((name.to_string(), realm.to_string()), hash);
            Ok(())
        });
        let (realm, header_field, remove_header) =
            self.auth_options(&f, DEFAULT_DIGEST_AUTH_REALM)?;
        // Only when no line was refused: that error already says what is wrong.
        if self.errors.len() == errors_before && !users.keys().any(|(_, r)| *r == realm) {
            self.error(
                f.pos,
                format!(
                    "`digest_auth` needs at least one user of realm `{realm}`, in `users` or `users_file`"
                ),
            );
        }
        Some(DigestAuth {
            users,
            realm,
            header_field,
            remove_header,
        })
    }
    // digest_auth: end

    // buffering: begin
    /// `buffering: { max_request_body_bytes, mem_request_body_bytes, max_response_body_bytes,
    /// mem_response_body_bytes, retry_expression }`: sizes (0: no limit), the expression
    /// parsed now.
    fn buffering(&mut self, node: &Node) -> Option<Buffering> {
        const KEYS: &[&str] = &[
            "max_request_body_bytes",
            "mem_request_body_bytes",
            "max_response_body_bytes",
            "mem_response_body_bytes",
            "retry_expression",
        ];
        let f = self.fields(node, "`buffering`", KEYS)?;
        let mut size = |key: &str, default: u64| match f.get(key) {
            Some(n) => self.size(n, &format!("`{key}`")).unwrap_or(default),
            None => default,
        };
        let max_request_body_bytes = size("max_request_body_bytes", 0);
        let mem_request_body_bytes = size("mem_request_body_bytes", DEFAULT_BUFFERING_MEM_BYTES);
        let max_response_body_bytes = size("max_response_body_bytes", 0);
        let mem_response_body_bytes = size("mem_response_body_bytes", DEFAULT_BUFFERING_MEM_BYTES);
        let retry_expression = f.get("retry_expression").and_then(|n| {
            self.predicate(n, "retry_expression", super::retry_expression::parse)
                .map(|(expression, _)| expression)
        });
        Some(Buffering {
            max_request_body_bytes,
            mem_request_body_bytes,
            max_response_body_bytes,
            mem_response_body_bytes,
            retry_expression,
        })
    }
    // buffering: end

    /// `circuit_breaker: { expression, check_period, fallback_duration, recovery_duration,
    /// response_code }`: the expression parsed now, its errors pointing into it.
    fn circuit_breaker(&mut self, node: &Node) -> Option<CircuitBreaker> {
        const KEYS: &[&str] = &[
            "expression",
            "check_period",
            "fallback_duration",
            "recovery_duration",
            "response_code",
        ];
        let f = self.fields(node, "`circuit_breaker`", KEYS)?;
        let expression = match f.get("expression") {
            Some(n) => self.predicate(n, "expression", crate::breaker_expression::parse),
            None => {
                self.error(
                    f.pos,
                    "`circuit_breaker` needs an `expression`, e.g. expression: \
                     \"NetworkErrorRatio() > 0.5\"",
                );
                None
            }
        };
        let mut durations = [
            ("check_period", Duration::from_millis(100)),
            ("fallback_duration", Duration::from_secs(10)),
            ("recovery_duration", Duration::from_secs(10)),
        ];
        let mut durations_read = true;
        for (key, slot) in &mut durations {
            let Some(n) = f.get(key) else { continue };
            match self.duration(n, &format!("`{key}`")) {
                // Traefik reads 0 as "the default": weir asks for what is meant.
                Some(d) if d.is_zero() => {
                    self.error(n.pos, format!("`{key}` must be longer than 0"));
                    durations_read = false;
                }
                Some(d) => *slot = d,
                None => durations_read = false,
            }
        }
        let response_code = match f.get("response_code") {
            Some(n) => self.final_status(n, "response_code", "503 or 429"),
            None => Some(503),
        };
        let (expression, expression_text) = expression?;
        let [(_, check_period), (_, fallback_duration), (_, recovery_duration)] = durations;
        durations_read.then_some(CircuitBreaker {
            expression,
            expression_text,
            check_period,
            fallback_duration,
            recovery_duration,
            response_code: response_code?,
        })
    }

    fn header_ops(&mut self, node: &Node, what: &str) -> HeaderOps {
        let Some(f) = self.fields(node, what, &["set", "add", "remove"]) else {
            return HeaderOps::default();
        };
        HeaderOps {
            set: f
                .get("set")
                .map(|n| self.header_map(n, "`set`"))
                .unwrap_or_default(),
            add: f
                .get("add")
                .map(|n| self.header_map(n, "`add`"))
                .unwrap_or_default(),
            remove: f
                .get("remove")
                .map(|n| self.header_names(n, "`remove`"))
                .unwrap_or_default(),
        }
    }
}

/// An address or a network, as Go parses them: a decimal prefix length of at most the
/// address's bits. An IPv4-mapped IPv6 network of 96 bits or more is the IPv4 network it maps
/// (Go's `IPNet.Contains` matches it against IPv4 clients).
fn parse_range(text: &str) -> Option<crate::rule::Cidr> {
    if let Some((_, bits)) = text.split_once('/') {
        if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    let net = crate::rule::Cidr::parse(text)?;
    Some(match net.addr {
        std::net::IpAddr::V6(v6) if net.prefix >= 96 => match v6.to_ipv4_mapped() {
            Some(v4) => crate::rule::Cidr {
                addr: v4.into(),
                prefix: net.prefix - 96,
            },
            None => net,
        },
        _ => net,
    })
}

/// The keys of `basic_auth` and `digest_auth`.
const AUTH_KEYS: &[&str] = &[
    "users",
    "users_file",
    "realm",
    "header_field",
    "remove_header",
];

// digest_auth: begin
/// A `name:realm:hash` line split in three (Traefik refuses any other count of `:`), with the
/// hash as 32 hex digits (lowercased: clients compute the digest over lowercase hex).
fn digest_user(line: &str) -> Result<(&str, &str, String), String> {
    let mut parts = line.split(':');
    let (Some(name), Some(realm), Some(hash), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a user must be `name:realm:hash`, as htdigest writes it".into());
    };
    // The name may go upstream in `header_field`.
    if !is_header_value(name) {
        return Err("a user's name must be printable text".into());
    }
    if hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "user `{name}`'s hash must be 32 hex digits, the MD5 of `name:realm:password` \
             that htdigest writes"
        ));
    }
    Ok((name, realm, hash.to_ascii_lowercase()))
}
// digest_auth: end

/// A `name:hash` line split in two (Traefik refuses a line with another `:` in it), with a
/// hash weir can verify.
fn basic_user(line: &str) -> Result<(&str, &str), String> {
    let Some((name, hash)) = line.split_once(':').filter(|(_, h)| !h.contains(':')) else {
        return Err("a user must be `name:hash`, as htpasswd writes it".into());
    };
    // The name may go upstream in `header_field`.
    if !is_header_value(name) {
        return Err("a user's name must be printable text".into());
    }
    if !is_verifiable_hash(hash) {
        return Err(format!(
            "user `{name}`'s hash is not one weir verifies: bcrypt (`htpasswd -B`), \
             MD5 (`htpasswd -m`) or SHA-1 (`htpasswd -s`)"
        ));
    }
    Ok((name, hash))
}

/// bcrypt (`$2y$` and its older prefixes, cost, 53 characters of salt and hash), MD5-crypt
/// (`$apr1$` or `$1$`, a salt of up to 8 characters, 22 of hash) or `{SHA}` with the base64 of
/// a SHA-1 digest: the schemes Traefik verifies.
fn is_verifiable_hash(hash: &str) -> bool {
    use base64::Engine;
    let crypt_chars = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    };
    if let Some(digest) = hash.strip_prefix("{SHA}") {
        return base64::engine::general_purpose::STANDARD
            .decode(digest)
            .is_ok_and(|d| d.len() == 20);
    }
    let fields: Vec<&str> = hash.split('$').collect();
    match fields.as_slice() {
        ["", "2a" | "2b" | "2x" | "2y", cost, rest] => {
            cost.len() == 2
                && cost.bytes().all(|b| b.is_ascii_digit())
                && rest.len() == 53
                && crypt_chars(rest)
        }
        ["", "apr1" | "1", salt, digest] => {
            (1..=8).contains(&salt.len()) && digest.len() == 22 && crypt_chars(digest)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    #[test]
    fn compress_settings_and_their_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  gz:\n    compress: {body}\n");
        let cfg = load_str(&mw("{}"), "t.yaml").unwrap();
        let MiddlewareKind::Compress(c) = &cfg.middlewares[0].kind else {
            panic!("not compress");
        };
        assert_eq!(c.algorithms, Encoding::ALL.to_vec());
        assert_eq!(
            (c.gzip_level, c.br_level, c.zstd_level, c.min_length),
            (6, 4, 3, 1024)
        );
        let cfg = load_str(
            &mw("{ algorithms: [gzip, zstd], level: { gzip: 9 }, min_length: 2KiB, types: [Text/HTML] }"),
            "t.yaml",
        )
        .unwrap();
        let MiddlewareKind::Compress(c) = &cfg.middlewares[0].kind else {
            panic!("not compress");
        };
        assert_eq!(c.algorithms, vec![Encoding::Gzip, Encoding::Zstd]);
        assert_eq!((c.gzip_level, c.min_length), (9, 2048));
        assert_eq!(c.types, vec!["text/html".to_string()]);
        assert_eq!(
            errors(&mw("{ algorithms: [gzip, lz4, gzip] }")),
            vec![
                "t.yaml:5:36: unknown algorithm `lz4`; expected zstd, br or gzip",
                "t.yaml:5:41: `gzip` is listed twice"
            ]
        );
        assert_eq!(
            errors(&mw("{ level: { br: 12 } }")),
            vec!["t.yaml:5:30: `level.br` must be a whole number from 0 to 11, found `12`"]
        );
        assert_eq!(
            errors(&mw("{ min_length: big, types: [json] }")),
            vec![
                "t.yaml:5:29: `min_length` must be a size like `1024`, `64KiB` or `256MiB`, found `big`",
                "t.yaml:5:42: `json` is not a media type like `text/html` or `text/*`"
            ]
        );
    }

    fn ip_allow_list(body: &str) -> String {
        format!("{BASE}middlewares:\n  only:\n    ip_allow_list: {body}\n")
    }

    fn loaded_allow_list(body: &str) -> IpAllowList {
        let cfg = load_str(&ip_allow_list(body), "t.yaml").unwrap();
        match &cfg.middlewares[0].kind {
            MiddlewareKind::IpAllowList(list) => list.clone(),
            other => panic!("not ip_allow_list: {other:?}"),
        }
    }

    /// Traefik's `TestNewIPAllowLister` ("valid IP") and the `ipStrategy.Get` choices:
    /// `depth` wins over `excluded_ips`; neither is the connection's address.
    #[test]
    fn ip_allow_list_settings_and_defaults() {
        let list = loaded_allow_list("{ source_range: [10.10.10.10] }");
        assert_eq!(list.reject_status_code, 403);
        assert_eq!(
            list.ip_strategy,
            IpStrategy::RemoteAddr { ipv6_subnet: None }
        );
        assert!(list.source_range.contains("10.10.10.10".parse().unwrap()));
        let list = loaded_allow_list(
            "{ source_range: [1.2.3.4/24], reject_status_code: 404, \
             ip_strategy: { depth: 2, excluded_ips: [10.0.0.1], ipv6_subnet: 64 } }",
        );
        assert_eq!(list.reject_status_code, 404);
        assert_eq!(
            list.ip_strategy,
            IpStrategy::Depth {
                depth: 2,
                ipv6_subnet: Some(64)
            }
        );
        let list = loaded_allow_list(
            "{ source_range: 1.2.3.4, ip_strategy: { excluded_ips: [10.0.0.0/8] } }",
        );
        assert!(matches!(list.ip_strategy, IpStrategy::Excluded(_)));
        let list = loaded_allow_list(
            "{ source_range: [1.2.3.4], ip_strategy: { depth: 0, ipv6_subnet: 48 } }",
        );
        assert_eq!(
            list.ip_strategy,
            IpStrategy::RemoteAddr {
                ipv6_subnet: Some(48)
            }
        );
    }

    /// Traefik's `TestNewIPAllowLister` ("invalid IP", "invalid HTTP status code") and
    /// pkg/ip's `TestNew` (empty list, empty string, `foo`), each at its position.
    #[test]
    fn ip_allow_list_errors_name_their_position() {
        assert_eq!(
            errors(&ip_allow_list("{ source_range: [foo] }")),
            vec!["t.yaml:5:37: `foo` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32"]
        );
        assert_eq!(
            errors(&ip_allow_list("{ source_range: [1.2.3.4/24, \"\", fe80::/16, 10.0.0.0/33, 0127.2.3.1, 10.0.0.0/+8, \"fe80::1%eth0\"] }")),
            vec![
                "t.yaml:5:49: `` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32",
                "t.yaml:5:64: `10.0.0.0/33` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32",
                "t.yaml:5:77: `0127.2.3.1` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32",
                "t.yaml:5:89: `10.0.0.0/+8` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32",
                "t.yaml:5:102: `fe80::1%eth0` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32",
            ]
        );
        assert_eq!(
            errors(&ip_allow_list("{ source_range: [] }")),
            vec!["t.yaml:5:36: `source_range` must list at least one address or network"]
        );
        assert_eq!(
            errors(&ip_allow_list("{ reject_status_code: 404 }")),
            vec!["t.yaml:5:20: `source_range` must list at least one address or network"]
        );
        for status in ["600", "100", "299", "teapot"] {
            assert_eq!(
                errors(&ip_allow_list(&format!(
                    "{{ source_range: [10.10.10.10], reject_status_code: {status} }}"
                ))),
                vec![format!("t.yaml:5:71: `reject_status_code` must be a final HTTP status with a standard reason, like 403 or 404, found `{status}`")]
            );
        }
        assert_eq!(
            errors(&ip_allow_list(
                "{ source_range: [::1], ip_strategy: { depth: -1, excluded_ips: [bar], ipv6_subnet: 129 } }"
            )),
            vec![
                "t.yaml:5:65: `depth` must be a whole number from 0 to 4294967295, found `-1`",
                "t.yaml:5:84: `bar` is not an address or network; expected e.g. 192.0.2.1, 10.0.0.0/8 or 2001:db8::/32",
                "t.yaml:5:103: `ipv6_subnet` must be a whole number from 1 to 128, found `129`",
            ]
        );
        assert_eq!(
            errors(&ip_allow_list("{ source_range: [::1], ip_strategy: { ipv6_subnet: 0 }, deny: [] }")),
            vec![
                "t.yaml:5:71: `ipv6_subnet` must be a whole number from 1 to 128, found `0`",
                "t.yaml:5:76: unknown key `deny` in `ip_allow_list`; expected one of: source_range, ip_strategy, reject_status_code",
            ]
        );
    }

    fn middlewares(body: &str) -> String {
        format!("{BASE}middlewares:\n{body}")
    }

    #[test]
    fn replace_path_needs_a_path_as_sent() {
        let cfg = load_str(
            &middlewares("  r: { replace_path: { path: /foo%2Fbar } }\n"),
            "t.yaml",
        )
        .unwrap();
        assert!(
            matches!(&cfg.middlewares[0].kind, MiddlewareKind::ReplacePath(p) if p == "/foo%2Fbar")
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: {} }\n")),
            vec!["t.yaml:4:22: `replace_path` needs `path`"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: foo } }\n")),
            vec!["t.yaml:4:30: path `foo` must start with `/`"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: /a%2 } }\n")),
            vec!["t.yaml:4:30: path `/a%2` has a `%` not followed by two hex digits"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: \"/a?b\" } }\n")),
            vec!["t.yaml:4:30: path `/a?b` must not hold a query or fragment"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: \"/a b\" } }\n")),
            vec!["t.yaml:4:30: path `/a b` must not hold spaces or control characters"]
        );
    }

    #[test]
    fn strip_prefix_regex_compiles_each_expression_at_load() {
        let cfg = load_str(
            &middlewares(
                "  s: { strip_prefix_regex: { regex: [\" /a/api/ \", \"/b/([a-z0-9]+)/\"] } }\n",
            ),
            "t.yaml",
        )
        .unwrap();
        let MiddlewareKind::StripPrefixRegex(expressions) = &cfg.middlewares[0].kind else {
            panic!("not strip_prefix_regex");
        };
        assert_eq!(expressions[0].as_str(), "/a/api/");
        assert_eq!(
            errors(&middlewares(
                "  s: { strip_prefix_regex: { regex: [/ok, \"/b/(\"] } }\n"
            )),
            vec!["t.yaml:4:43: invalid regular expression: unclosed group (at character 4)"]
        );
        assert_eq!(
            errors(&middlewares("  s: { strip_prefix_regex: { regex: [] } }\n")),
            vec!["t.yaml:4:37: `regex` must list at least one expression"]
        );
        assert_eq!(
            errors(&middlewares(
                "  s: { strip_prefix_regex: { regexp: [/a] } }\n"
            )),
            vec![
                "t.yaml:4:28: `strip_prefix_regex` needs `regex`",
                "t.yaml:4:30: unknown key `regexp` in `strip_prefix_regex` (did you mean `regex`?); expected one of: regex"
            ]
        );
    }

    /// pkg/ip's `TestNew` ("IPv4 & IPv6", "IPv4 only": host bits past the prefix are
    /// ignored) and Go's matching of IPv4-mapped networks against IPv4 clients.
    #[test]
    fn source_ranges_match_as_go_s_checker_does() {
        let list = loaded_allow_list(
            "{ source_range: [1.2.3.4/24, fe80::/16, 127.0.0.1/8, \"::ffff:9.9.9.0/120\", \"::/1\"] }",
        );
        let contains = |ip: &str| list.source_range.contains(ip.parse().unwrap());
        assert!(contains("1.2.3.255") && contains("fe80::1") && contains("127.255.0.1"));
        assert!(contains("9.9.9.9") && contains("::ffff:1.2.3.9"));
        assert!(!contains("1.2.4.1") && !contains("fe81::1"));
        // `::/1` is an IPv6 network: Go matches no IPv4 client against it.
        assert!(contains("::2") && !contains("8.8.8.8"));
    }

    /// `source_criterion` as a per-source policy reads it, with its errors: Traefik's
    /// `GetSourceExtractor` (one criterion at most; none is the remote address).
    fn source_criterion(body: &str) -> Result<SourceCriterion, Vec<String>> {
        let root = crate::yaml::parse(body).expect("YAML");
        let mut loader = crate::load::Loader {
            errors: Vec::new(),
            env: &|_| None,
            base: Default::default(),
            file_name: String::new(),
        };
        let criterion = loader.source_criterion(&root, SourceCriterion::default());
        match criterion {
            Some(criterion) if loader.errors.is_empty() => Ok(criterion),
            _ => Err(loader
                .errors
                .into_iter()
                .map(|(pos, message)| format!("{}:{}: {message}", pos.line, pos.column))
                .collect()),
        }
    }

    #[test]
    fn source_criterion_takes_one_criterion() {
        let remote = SourceCriterion::Ip(IpStrategy::RemoteAddr { ipv6_subnet: None });
        assert_eq!(source_criterion("{}"), Ok(remote.clone()));
        assert_eq!(
            source_criterion("{ request_header_name: \"\", request_host: false }"),
            Ok(remote)
        );
        assert_eq!(
            source_criterion("{ request_header_name: X-Tenant }"),
            Ok(SourceCriterion::RequestHeader("x-tenant".into()))
        );
        assert_eq!(
            source_criterion("{ request_host: true }"),
            Ok(SourceCriterion::RequestHost)
        );
        assert_eq!(
            source_criterion("{ ip_strategy: { depth: 1 } }"),
            Ok(SourceCriterion::Ip(IpStrategy::Depth {
                depth: 1,
                ipv6_subnet: None
            }))
        );
        assert_eq!(
            source_criterion("{ ip_strategy: {}, request_host: true }"),
            Err(vec![
                "1:1: `source_criterion` takes one of `ip_strategy` and `request_host`, not both"
                    .to_string()
            ])
        );
        assert_eq!(
            source_criterion("{ request_header_name: \"a b\", request_host: yes }"),
            Err(vec![
                "1:24: `a b` is not a valid header name".to_string(),
                "1:45: `request_host` must be `true` or `false`, found `yes`".to_string()
            ])
        );
    }

    #[test]
    fn redirect_regex_settings_and_their_errors() {
        let cfg = load_str(
            &middlewares("  r: { redirect_regex: { regex: \"^http://(.*)\", replacement: \"https://$1\" } }\n"),
            "t.yaml",
        )
        .unwrap();
        let MiddlewareKind::RedirectRegex {
            regex,
            replacement,
            permanent,
        } = &cfg.middlewares[0].kind
        else {
            panic!("not redirect_regex");
        };
        assert_eq!(
            (regex.as_str(), replacement.as_str(), *permanent),
            ("^http://(.*)", "https://$1", false)
        );
        assert_eq!(
            errors(&middlewares(
                "  r: { redirect_regex: { regex: \"^(.*\", replacement: $1 } }\n"
            )),
            vec!["t.yaml:4:33: invalid regular expression: unclosed group (at character 2)"]
        );
        assert_eq!(
            errors(&middlewares("  r: { redirect_regex: { regex: a } }\n")),
            vec!["t.yaml:4:24: `redirect_regex` needs `regex` and `replacement`"]
        );
        assert_eq!(
            errors(&middlewares(
                "  r: { redirect_regex: { regex: a, replacement: b, permanent: yes } }\n"
            )),
            vec!["t.yaml:4:63: `permanent` must be `true` or `false`, found `yes`"]
        );
    }

    #[test]
    fn chains_flatten_into_the_routers_lists() {
        let cfg = load_str(
            &format!(
                "{BASE}routers:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    middlewares: [outer, c]\n    respond: {{}}\nmiddlewares:\n  a: {{ add_prefix: /a }}\n  b: {{ add_prefix: /b }}\n  c: {{ add_prefix: /c }}\n  inner: {{ chain: {{ middlewares: [b, c] }} }}\n  outer: {{ chain: {{ middlewares: [a, inner, a] }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.routers[0].middlewares, vec!["a", "b", "c", "a", "c"]);
    }

    #[test]
    fn a_chain_names_defined_middlewares_and_does_not_loop() {
        assert_eq!(
            errors(&middlewares("  a: { add_prefix: /a }\n  c: { chain: { middlewares: [a, nope] } }\n")),
            vec!["t.yaml:5:34: chain `c` names middleware `nope`, which is not defined; defined: a, c"]
        );
        assert_eq!(
            errors(&middlewares("  c: { chain: { middlewares: [c] } }\n")),
            vec!["t.yaml:4:31: chain `c` loops: c → c"]
        );
        assert_eq!(
            errors(&middlewares("  x: { chain: { middlewares: [y] } }\n  y: { chain: { middlewares: [z] } }\n  z: { chain: { middlewares: [x] } }\n")),
            vec![
                "t.yaml:4:31: chain `x` loops: x → y → z → x",
                "t.yaml:5:31: chain `y` loops: y → z → x → y",
                "t.yaml:6:31: chain `z` loops: z → x → y → z",
            ]
        );
        assert_eq!(
            errors(&middlewares("  c: { chain: {} }\n")),
            vec!["t.yaml:4:15: `chain` needs `middlewares`"]
        );
    }

    /// pkg/server/middleware/middlewares_test.go (Traefik), TestBuilder_BuildChainWithContext:
    /// the "Detects recursion in Middleware chain" cases and "Detects MiddlewareChain that
    /// references a Chain that references a Chain with a missing middleware", whose loop
    /// (m2 → m3 → m2) m0 and m1 only lead into: the chains in the loop are the errors.
    #[test]
    fn traefik_chain_recursion_cases() {
        let chains = |list: &[(&str, &str)]| {
            let body: String = list
                .iter()
                .map(|(name, members)| {
                    format!("  {name}: {{ chain: {{ middlewares: [{members}] }} }}\n")
                })
                .collect();
            errors(&middlewares(&format!(
                "  ok: {{ add_prefix: /ok }}\n{body}"
            )))
        };
        assert_eq!(
            chains(&[("m1", "m2"), ("m2", "ok, m3"), ("m3", "m1")]),
            vec![
                "t.yaml:5:32: chain `m1` loops: m1 → m2 → m3 → m1",
                "t.yaml:6:36: chain `m2` loops: m2 → m3 → m1 → m2",
                "t.yaml:7:32: chain `m3` loops: m3 → m1 → m2 → m3",
            ]
        );
        assert_eq!(
            chains(&[("m0", "m0")]),
            vec!["t.yaml:5:32: chain `m0` loops: m0 → m0"]
        );
        assert_eq!(
            chains(&[("m0", "m1"), ("m1", "m2"), ("m2", "m3"), ("m3", "m2")]),
            vec![
                "t.yaml:7:32: chain `m2` loops: m2 → m3 → m2",
                "t.yaml:8:32: chain `m3` loops: m3 → m2 → m3",
            ]
        );
    }
}

#[cfg(test)]
mod basic_auth_tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    fn auth(body: &str, file: &str) -> Result<BasicAuth, Vec<String>> {
        let text = format!("{BASE}middlewares:\n  auth:\n    basic_auth: {body}\n");
        match load_str(&text, file) {
            Ok(cfg) => match &cfg.middlewares[0].kind {
                MiddlewareKind::BasicAuth(a) => Ok(a.clone()),
                other => panic!("not basic_auth: {other:?}"),
            },
            Err(e) => Err(e.iter().map(|e| e.to_string()).collect()),
        }
    }

    /// A folder of its own for a test, with `users` in its file `users`: the path of a config
    /// file beside it.
    pub(super) fn beside_users(test: &str, users: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-config-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("users"), users).unwrap();
        dir.join("t.yaml")
    }

    #[test]
    fn users_and_users_file_merge_with_users_winning() {
        let file = beside_users(
            "merge",
            "# a comment\n\n  test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/  \ntest2:$1$saltsalt$tTWg0JeO/sYmHvtKmZE8c.\n",
        );
        let a = auth(
            "{ users_file: users, users: [\"test2:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\", \"test3:$2y$04$D1CSqTArbwg7.0.2jTPF5u8ZYdQWXwg02u99ZCbO8FaGgmqTt4U5.\"] }",
            file.to_str().unwrap(),
        )
        .unwrap();
        let users: Vec<(&str, &str)> = a
            .users
            .iter()
            .map(|(n, h)| (n.as_str(), h.as_str()))
            .collect();
        assert_eq!(
            users,
            vec![
                ("test", "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"),
                ("test2", "{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="),
                (
                    "test3",
                    "$2y$04$D1CSqTArbwg7.0.2jTPF5u8ZYdQWXwg02u99ZCbO8FaGgmqTt4U5."
                )
            ]
        );
        assert_eq!(a.realm, DEFAULT_BASIC_AUTH_REALM);
        assert_eq!((a.header_field, a.remove_header), (None, false));
        let a = auth(
            "{ users: [\"u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\"], realm: \"my realm\", header_field: X-User, remove_header: true }",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(a.realm, "my realm");
        assert_eq!(a.header_field.as_deref(), Some("X-User"));
        assert!(a.remove_header);
    }

    #[test]
    fn users_file_errors_name_the_key_and_the_line() {
        let path = beside_users(
            "errors",
            "ok:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n\nno-colon\na:b:c\nplain:test\nbell\u{7}:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n",
        );
        let file = path.to_str().unwrap();
        let dir = path.parent().unwrap();
        let users = dir.join("users");
        let users = users.display();
        assert_eq!(
            auth("{ users_file: users }", file).unwrap_err(),
            vec![
                format!("{file}:5:31: users file `{users}` line 3: a user must be `name:hash`, as htpasswd writes it"),
                format!("{file}:5:31: users file `{users}` line 4: a user must be `name:hash`, as htpasswd writes it"),
                format!("{file}:5:31: users file `{users}` line 5: user `plain`'s hash is not one weir verifies: bcrypt (`htpasswd -B`), MD5 (`htpasswd -m`) or SHA-1 (`htpasswd -s`)"),
                format!("{file}:5:31: users file `{users}` line 6: a user's name must be printable text"),
            ]
        );
        let missing = dir.join("missing");
        let errs = auth("{ users_file: missing }", file).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with(&format!(
                "{file}:5:31: cannot read users file `{}`: ",
                missing.display()
            )),
            "{errs:?}"
        );
    }

    #[test]
    fn basic_auth_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  auth:\n    basic_auth: {body}\n");
        assert_eq!(
            errors(&mw("{ users: [test, \"a:b:c\"] }")),
            vec![
                "t.yaml:5:27: a user must be `name:hash`, as htpasswd writes it",
                "t.yaml:5:33: a user must be `name:hash`, as htpasswd writes it"
            ]
        );
        assert_eq!(
            errors(&mw("{ users: [\"t:$2y$05$short\", \"u:$5$salt$hash\", \"v:{SHA}x\"] }")),
            [(27, "t"), (45, "u"), (63, "v")]
                .map(|(column, user)| format!("t.yaml:5:{column}: user `{user}`'s hash is not one weir verifies: bcrypt (`htpasswd -B`), MD5 (`htpasswd -m`) or SHA-1 (`htpasswd -s`)"))
        );
        assert_eq!(
            errors(&mw("{ users: [] }")),
            vec!["t.yaml:5:17: `basic_auth` needs at least one user, in `users` or `users_file`"]
        );
        assert_eq!(
            errors(&mw(
                "{ users: [\"u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\"], realm: 'a \"b\"', header_field: \"X User\" }"
            )),
            vec![
                "t.yaml:5:74: `realm` must be printable text without `\"` or `\\`",
                "t.yaml:5:97: `X User` is not a valid header name"
            ]
        );
        assert_eq!(
            errors(&mw("{ users: [\"u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\"], remove_header: maybe, realms: x }")),
            vec![
                "t.yaml:5:82: `remove_header` must be `true` or `false`, found `maybe`",
                "t.yaml:5:89: unknown key `realms` in `basic_auth` (did you mean `realm`?); expected one of: users, users_file, realm, header_field, remove_header"
            ]
        );
    }

    fn loaded_rate_limit(body: &str) -> RateLimit {
        let yaml = format!("{BASE}middlewares:\n  limit:\n    rate_limit: {body}\n");
        match load_str(&yaml, "t.yaml").unwrap().middlewares[0]
            .kind
            .clone()
        {
            MiddlewareKind::RateLimit(limit) => limit,
            other => panic!("not rate_limit: {other:?}"),
        }
    }

    /// Traefik's defaults (`TestNewRateLimiter`: "no ratelimit on Average == 0", the default
    /// source is the remote address): no limit, 1 s, a burst of 1; 0 means the default for
    /// `period` and `burst`; "SourceCriterion in config is respected".
    #[test]
    fn rate_limit_settings_and_defaults() {
        let remote = SourceCriterion::default();
        let limit = loaded_rate_limit("{}");
        assert_eq!(
            limit,
            RateLimit {
                average: 0,
                period: Duration::from_secs(1),
                burst: 1,
                source_criterion: remote.clone(),
                redis: None,
            }
        );
        let limit = loaded_rate_limit("{ average: 5, period: 0, burst: 0 }");
        assert_eq!((limit.period, limit.burst), (Duration::from_secs(1), 1));
        let limit = loaded_rate_limit(
            "{ average: 2, period: 10s, burst: 10, source_criterion: { request_header_name: Foo } }",
        );
        assert_eq!(
            limit,
            RateLimit {
                average: 2,
                period: Duration::from_secs(10),
                burst: 10,
                source_criterion: SourceCriterion::RequestHeader("foo".into()),
                redis: None,
            }
        );
    }

    /// `rate_limit.redis`: the endpoints, and the defaults of the rest (a 100ms wait at most,
    /// `weir:` before the keys, admitting when Redis cannot answer).
    #[test]
    fn rate_limit_redis_settings_and_defaults() {
        let limit = loaded_rate_limit("{ average: 5, redis: { endpoints: [\"127.0.0.1:6379\"] } }");
        assert_eq!(
            limit.redis,
            Some(RedisStore {
                endpoints: vec!["127.0.0.1:6379".into()],
                username: String::new(),
                password: String::new(),
                db: 0,
                timeout: Duration::from_millis(100),
                key_prefix: "weir:".into(),
                fail_open: true,
                sentinel_master: None,
                tls: None,
            })
        );
        let limit = loaded_rate_limit(
            "{ average: 5, redis: { endpoints: [redis-a:6380, \"[::1]:6379\"], username: u, password: p, db: 3, timeout: 20ms, key_prefix: \"site:\", fail_open: false } }",
        );
        let redis = limit.redis.unwrap();
        assert_eq!(redis.endpoints, ["redis-a:6380", "[::1]:6379"]);
        assert_eq!(
            (redis.username.as_str(), redis.password.as_str()),
            ("u", "p")
        );
        assert_eq!((redis.db, redis.timeout), (3, Duration::from_millis(20)));
        assert_eq!(
            (redis.key_prefix.as_str(), redis.fail_open),
            ("site:", false)
        );
    }

    #[test]
    fn rate_limit_redis_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  limit:\n    rate_limit: {body}\n");
        assert_eq!(
            errors(&mw(
                "{ average: 1, redis: { endpoints: [a:1], sentinel: {} } }"
            )),
            vec!["t.yaml:5:68: `sentinel` needs `master_name`, the name the sentinels monitor"]
        );
        assert_eq!(
            errors(&mw("{ average: 1, redis: {} }")),
            vec!["t.yaml:5:38: `redis` needs `endpoints`, a list of `host:port` such as `127.0.0.1:6379`"]
        );
        assert_eq!(
            errors(&mw("{ average: 1, redis: { endpoints: [localhost, \":6379\", \"h:0\"], timeout: 0s, fail_open: maybe, tlz: true } }")),
            vec![
                "t.yaml:5:52: a Redis endpoint must be `host:port` such as `127.0.0.1:6379`, found \"localhost\"",
                "t.yaml:5:63: a Redis endpoint must be `host:port` such as `127.0.0.1:6379`, found \":6379\"",
                "t.yaml:5:72: a Redis endpoint must be `host:port` such as `127.0.0.1:6379`, found \"h:0\"",
                "t.yaml:5:89: `timeout` must be more than 0",
                "t.yaml:5:104: `fail_open` must be `true` or `false`, found `maybe`",
                "t.yaml:5:111: unknown key `tlz` in `redis` (did you mean `tls`?); expected one of: endpoints, username, password, db, timeout, key_prefix, fail_open, sentinel, tls",
            ]
        );
    }

    /// Every error at once, at its `file:line:column`; Traefik's "SourceCriteria are mutually
    /// exclusive" and its negative period.
    #[test]
    fn rate_limit_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  limit:\n    rate_limit: {body}\n");
        assert_eq!(
            errors(&mw("{ average: -1, period: -1s, burst: many }")),
            vec![
                "t.yaml:5:28: `average` must be a whole number from 0 to 4294967295, found `-1`",
                "t.yaml:5:40: `period` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `-1s`",
                "t.yaml:5:52: `burst` must be a whole number from 0 to 4294967295, found `many`",
            ]
        );
        assert_eq!(
            errors(&mw(
                "{ average: 1, source_criterion: { ip_strategy: {}, request_header_name: Foo } }"
            )),
            vec![
                "t.yaml:5:49: `source_criterion` takes one of `ip_strategy` and `request_header_name`, not both"
            ]
        );
        assert_eq!(
            errors(&mw("{ averag: 1 }")),
            vec!["t.yaml:5:19: unknown key `averag` in `rate_limit` (did you mean `average`?); expected one of: average, period, burst, source_criterion, redis"]
        );
    }

    /// `in_flight_req`: `amount`, and the host as the default source (Traefik's `New` in
    /// inflightreq/inflight_req.go), also for a `source_criterion` that sets nothing.
    #[test]
    fn in_flight_req_settings_and_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  busy:\n    in_flight_req: {body}\n");
        let loaded = |body: &str| match load_str(&mw(body), "t.yaml").unwrap().middlewares[0]
            .kind
            .clone()
        {
            MiddlewareKind::InFlightReq(limit) => limit,
            other => panic!("not in_flight_req: {other:?}"),
        };
        let host = InFlightReq {
            amount: 10,
            source_criterion: SourceCriterion::RequestHost,
        };
        assert_eq!(loaded("{ amount: 10 }"), host);
        assert_eq!(
            loaded("{ amount: 10, source_criterion: { request_header_name: \"\" } }"),
            host
        );
        assert_eq!(
            loaded("{ amount: 1, source_criterion: { ip_strategy: {} } }").source_criterion,
            SourceCriterion::default()
        );
        assert_eq!(
            errors(&mw("{}")),
            vec!["t.yaml:5:20: `in_flight_req` needs `amount`, the requests allowed at once"]
        );
        assert_eq!(
            errors(&mw("{ amount: 0, source_criterion: { request_host: maybe } }")),
            vec![
                "t.yaml:5:30: `amount` must be a whole number from 1 to 9223372036854775807, found `0`",
                "t.yaml:5:67: `request_host` must be `true` or `false`, found `maybe`",
            ]
        );
    }
}

#[cfg(test)]
mod circuit_breaker_tests {
    use super::*;
    use crate::breaker_expression::{BreakerCondition, BreakerMetric, Comparison, Threshold};
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    fn breaker(body: &str) -> String {
        format!("{BASE}middlewares:\n  cb:\n    circuit_breaker: {body}\n")
    }

    fn loaded(body: &str) -> CircuitBreaker {
        let cfg = load_str(&breaker(body), "t.yaml").unwrap();
        match &cfg.middlewares[0].kind {
            MiddlewareKind::CircuitBreaker(b) => b.clone(),
            other => panic!("not circuit_breaker: {other:?}"),
        }
    }

    /// The durations and the status, in the order of the keys.
    fn timings(b: &CircuitBreaker) -> (Duration, Duration, Duration, u16) {
        (
            b.check_period,
            b.fallback_duration,
            b.recovery_duration,
            b.response_code,
        )
    }

    /// Traefik's defaults (`dynamic.CircuitBreaker.SetDefaults`, oxy's `default*` constants).
    #[test]
    fn defaults_and_settings() {
        let b = loaded("{ expression: \"NetworkErrorRatio() > 0.5\" }");
        assert_eq!(
            b.expression,
            BreakerCondition::Compare {
                metric: BreakerMetric::NetworkErrorRatio,
                op: Comparison::Greater,
                value: Threshold::Ratio(0.5),
            }
        );
        assert_eq!(b.expression_text, "NetworkErrorRatio() > 0.5");
        let seconds = Duration::from_secs;
        assert_eq!(
            timings(&b),
            (Duration::from_millis(100), seconds(10), seconds(10), 503)
        );
        let b = loaded(
            "{ expression: 'LatencyAtQuantileMS(50.0) > 100', check_period: 1s, \
             fallback_duration: 30s, recovery_duration: 1m, response_code: 429 }",
        );
        assert_eq!(timings(&b), (seconds(1), seconds(30), seconds(60), 429));
    }

    #[test]
    fn errors_name_their_position_and_point_into_the_expression() {
        assert_eq!(
            errors(&breaker("{}")),
            vec!["t.yaml:5:22: `circuit_breaker` needs an `expression`, e.g. expression: \"NetworkErrorRatio() > 0.5\""]
        );
        // Plain, double- and single-quoted: the column is the offending character's.
        assert_eq!(
            errors(&breaker("{ expression: NetworkErrorRatio() > 1 }")),
            vec!["t.yaml:5:58: invalid `expression`: the metric is a ratio, compared with a decimal number like `0.5`; found the number `1`"]
        );
        assert_eq!(
            errors(&breaker(
                "{ expression: \"NetworkErrorRatio() > 0.5 && Latency() > 3\" }"
            )),
            vec![format!(
                "t.yaml:5:66: invalid `expression`: unknown metric `Latency`; expected {}",
                "NetworkErrorRatio(), ResponseCodeRatio(from, to, dividedFrom, dividedTo), \
                 LatencyAtQuantileMS(quantile) or RequestThreshold()"
            )]
        );
        assert_eq!(
            errors(&breaker("{ expression: 'LatencyAtQuantileMS(50) > 100' }")),
            vec!["t.yaml:5:57: invalid `expression`: `LatencyAtQuantileMS` takes a decimal quantile like `50.0` (with its `.0`), found the number `50`"]
        );
        assert_eq!(
            errors(&breaker("\n      expression: NetworkErrorRatio() + 0.5 > 1.0\n")),
            vec!["t.yaml:6:39: invalid `expression`: `+` is not supported: a metric is compared with a constant by `>`, `>=`, `<`, `<=`, `==` or `!=`, and comparisons are joined by `&&` and `||`"]
        );
        assert_eq!(
            errors(&breaker(
                "{ expression: 'NetworkErrorRatio() > 0.5', check_period: 0s, fallback_duration: soon, recovery_duration: 5 }"
            )),
            vec![
                "t.yaml:5:79: `check_period` must be longer than 0",
                "t.yaml:5:102: `fallback_duration` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `soon`",
            ]
        );
        assert_eq!(
            errors(&breaker(
                "{ expression: 'NetworkErrorRatio() > 0.5', response_code: 99 }"
            )),
            vec!["t.yaml:5:80: `response_code` must be a final HTTP status with a standard reason, like 503 or 429, found `99`"]
        );
        assert_eq!(
            errors(&breaker("{ expression: 'RequestThreshold() > 1', fallback: 1s }")),
            vec!["t.yaml:5:62: unknown key `fallback` in `circuit_breaker`; expected one of: expression, check_period, fallback_duration, recovery_duration, response_code"]
        );
    }
}

#[cfg(test)]
mod grpc_web_tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    fn mw(body: &str) -> String {
        format!("{BASE}middlewares:\n  web:\n    grpc_web: {body}\n")
    }

    #[test]
    fn grpc_web_settings_and_errors() {
        let loaded = |body: &str| match load_str(&mw(body), "t.yaml").unwrap().middlewares[0]
            .kind
            .clone()
        {
            MiddlewareKind::GrpcWeb(config) => config,
            other => panic!("not grpc_web: {other:?}"),
        };
        assert_eq!(loaded("{}").allow_origins, Vec::<String>::new());
        assert_eq!(
            loaded("{ allow_origins: [\"*\", \"https://app.example.com\"] }").allow_origins,
            ["*", "https://app.example.com"]
        );
        assert_eq!(
            errors(&mw("{ allow_origin: [\"*\"] }")),
            vec!["t.yaml:5:17: unknown key `allow_origin` in `grpc_web` (did you mean `allow_origins`?); expected one of: allow_origins"]
        );
        assert_eq!(
            errors(&mw("{ allow_origins: [\"\", \"https://a b\"] }")),
            vec![
                "t.yaml:5:33: an origin must be `*` or an `Origin` value such as `https://app.example.com`, found \"\"",
                "t.yaml:5:37: an origin must be `*` or an `Origin` value such as `https://app.example.com`, found \"https://a b\"",
            ]
        );
        assert_eq!(
            errors(&mw("{ allow_origins: { a: b } }")),
            vec!["t.yaml:5:32: `allow_origins` must be a list of strings, found a mapping"]
        );
    }
}

// digest_auth: begin
#[cfg(test)]
mod digest_auth_tests {
    use super::basic_auth_tests::beside_users;
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    /// Traefik's digest_auth_test.go: `test`, realm `traefik`, password `test`.
    const TEST: &str = "test:traefik:a2688e031edb4be6a3797f3882655c05";

    fn auth(body: &str, file: &str) -> Result<DigestAuth, Vec<String>> {
        let text = format!("{BASE}middlewares:\n  auth:\n    digest_auth: {body}\n");
        match load_str(&text, file) {
            Ok(cfg) => match &cfg.middlewares[0].kind {
                MiddlewareKind::DigestAuth(a) => Ok(a.clone()),
                other => panic!("not digest_auth: {other:?}"),
            },
            Err(e) => Err(e.iter().map(|e| e.to_string()).collect()),
        }
    }

    fn user(name: &str, realm: &str) -> (String, String) {
        (name.to_string(), realm.to_string())
    }

    /// TestDigestAuthUsersFromFile's merge: the file's users, then `users`, which wins for the
    /// same name and realm; a name in two realms is two users; hex is kept lowercase.
    #[test]
    fn users_and_users_file_merge_by_name_and_realm() {
        let file = beside_users(
            "digest-merge",
            "# htdigest\n\n  test:traefik:a2688e031edb4be6a3797f3882655c05  \ntest2:traefik:518845800f9e2bfb1f1f740ec24f074e\ntest:traefiker:A3D334DFF2645B914918DE78BEC50BF4\n",
        );
        let a = auth(
            "{ users_file: users, users: [\"test2:traefik:8de60a1c52da68ccf41f0c0ffb7c51a0\"] }",
            file.to_str().unwrap(),
        )
        .unwrap();
        let users: Vec<_> = a.users.into_iter().collect();
        assert_eq!(
            users,
            vec![
                (
                    user("test", "traefik"),
                    "a2688e031edb4be6a3797f3882655c05".to_string()
                ),
                (
                    user("test", "traefiker"),
                    "a3d334dff2645b914918de78bec50bf4".to_string()
                ),
                (
                    user("test2", "traefik"),
                    "8de60a1c52da68ccf41f0c0ffb7c51a0".to_string()
                ),
            ]
        );
        assert_eq!(a.realm, DEFAULT_DIGEST_AUTH_REALM);
        assert_eq!((a.header_field, a.remove_header), (None, false));
        let a = auth(
            &format!(
                "{{ users: [\"{TEST}\", \"u:r:a2688e031edb4be6a3797f3882655c05\"], realm: r, header_field: X-User, remove_header: true }}"
            ),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(a.realm, "r");
        assert_eq!(a.header_field.as_deref(), Some("X-User"));
        assert!(a.remove_header);
    }

    #[test]
    fn users_file_errors_name_the_key_and_the_line() {
        let path = beside_users(
            "digest-errors",
            &format!("{TEST}\n\ntest\na:b\na:b:c:d\nshort:traefik:a2688e\nhex:traefik:g2688e031edb4be6a3797f3882655c05\n"),
        );
        let file = path.to_str().unwrap();
        let dir = path.parent().unwrap();
        let users = dir.join("users");
        let users = users.display();
        let shape = "a user must be `name:realm:hash`, as htdigest writes it";
        let hash = |name: &str| {
            format!("user `{name}`'s hash must be 32 hex digits, the MD5 of `name:realm:password` that htdigest writes")
        };
        assert_eq!(
            auth("{ users_file: users }", file).unwrap_err(),
            vec![
                format!("{file}:5:32: users file `{users}` line 3: {shape}"),
                format!("{file}:5:32: users file `{users}` line 4: {shape}"),
                format!("{file}:5:32: users file `{users}` line 5: {shape}"),
                format!(
                    "{file}:5:32: users file `{users}` line 6: {}",
                    hash("short")
                ),
                format!("{file}:5:32: users file `{users}` line 7: {}", hash("hex")),
            ]
        );
        let missing = dir.join("missing");
        let errs = auth("{ users_file: missing }", file).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with(&format!(
                "{file}:5:32: cannot read users file `{}`: ",
                missing.display()
            )),
            "{errs:?}"
        );
    }

    /// TestDigestAuthError (`test`, no realm or hash), no user of the realm, and bad keys.
    #[test]
    fn digest_auth_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  auth:\n    digest_auth: {body}\n");
        assert_eq!(
            errors(&mw("{ users: [test] }")),
            vec!["t.yaml:5:28: a user must be `name:realm:hash`, as htdigest writes it"]
        );
        assert_eq!(
            errors(&mw("{ users: [] }")),
            vec!["t.yaml:5:18: `digest_auth` needs at least one user of realm `traefik`, in `users` or `users_file`"]
        );
        assert_eq!(
            errors(&mw(&format!("{{ users: [\"{TEST}\"], realm: other }}"))),
            vec!["t.yaml:5:18: `digest_auth` needs at least one user of realm `other`, in `users` or `users_file`"]
        );
        assert_eq!(
            errors(&mw(&format!(
                "{{ users: [\"{TEST}\"], realm: 'a \"b\"', header_field: \"X User\" }}"
            ))),
            vec![
                "t.yaml:5:85: `realm` must be printable text without `\"` or `\\`",
                "t.yaml:5:108: `X User` is not a valid header name"
            ]
        );
        assert_eq!(
            errors(&mw(&format!("{{ users: [\"{TEST}\"], remove_header: maybe, opaque: x }}"))),
            vec![
                "t.yaml:5:93: `remove_header` must be `true` or `false`, found `maybe`",
                "t.yaml:5:100: unknown key `opaque` in `digest_auth`; expected one of: users, users_file, realm, header_field, remove_header"
            ]
        );
    }
}
// digest_auth: end

// buffering: begin
#[cfg(test)]
mod buffering_tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    fn buffering(body: &str) -> Buffering {
        let text = format!("{BASE}middlewares:\n  b:\n    buffering: {body}\n");
        match &load_str(&text, "t.yaml").unwrap().middlewares[0].kind {
            MiddlewareKind::Buffering(b) => b.clone(),
            other => panic!("not buffering: {other:?}"),
        }
    }

    #[test]
    fn sizes_default_to_oxy_s() {
        let b = buffering("{}");
        assert_eq!(
            (b.max_request_body_bytes, b.mem_request_body_bytes),
            (0, 1 << 20)
        );
        assert_eq!(
            (b.max_response_body_bytes, b.mem_response_body_bytes),
            (0, 1 << 20)
        );
        assert_eq!(b.retry_expression, None);
        let b = buffering(
            "{ max_request_body_bytes: 2000000, mem_request_body_bytes: 64KiB, max_response_body_bytes: 1MiB, retry_expression: \"IsNetworkError() && Attempts() < 2\" }",
        );
        assert_eq!(
            (b.max_request_body_bytes, b.mem_request_body_bytes),
            (2_000_000, 64 << 10)
        );
        assert_eq!(b.max_response_body_bytes, 1 << 20);
        assert!(matches!(b.retry_expression, Some(RetryExpression::And(..))));
    }

    #[test]
    fn buffering_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  b:\n    buffering: {body}\n");
        assert_eq!(
            errors(&mw("{ max_request_body_bytes: -1, retry_expression: \"Attempts()\" }")),
            vec![
                "t.yaml:5:42: `max_request_body_bytes` must be a size like `1024`, `64KiB` or `256MiB`, found `-1`",
                "t.yaml:5:65: invalid `retry_expression`: a function's value must be compared: `Attempts() <= 2`",
            ]
        );
        assert_eq!(
            errors(&mw("{ disable_request_buffer: true }")),
            vec!["t.yaml:5:18: unknown key `disable_request_buffer` in `buffering`; expected one of: max_request_body_bytes, mem_request_body_bytes, max_response_body_bytes, mem_response_body_bytes, retry_expression"]
        );
    }

    /// A router applies one `buffering`: two, directly or through a chain, are refused.
    #[test]
    fn one_buffering_per_router() {
        let text = format!(
            "{BASE}routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [a, both], respond: {{ body: x }} }}\n\
             middlewares:\n  a: {{ buffering: {{}} }}\n  b: {{ buffering: {{}} }}\n  both: {{ chain: {{ middlewares: [b] }} }}\n"
        );
        assert_eq!(
            errors(&text),
            vec!["t.yaml:4:46: router `r` has more than one `buffering` middleware (`a`, `b`): name one"]
        );
        let one = text.replace("[a, both]", "[both]");
        assert!(load_str(&one, "t.yaml").is_ok());
    }
}
// buffering: end
