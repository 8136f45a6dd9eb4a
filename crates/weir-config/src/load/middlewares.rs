//! `middlewares.NAME`: one of strip_prefix, add_prefix, replace_path_regex, headers,
//! redirect_scheme or compress.

use super::{Fields, Loader};
use crate::model::*;
use crate::yaml::{Node, Value};

impl Loader<'_> {
    pub(super) fn middleware(&mut self, name: String, node: &Node) -> Option<Middleware> {
        const KINDS: &[&str] = &[
            "strip_prefix",
            "add_prefix",
            "replace_path_regex",
            "headers",
            "redirect_scheme",
            "compress",
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
        let (Some(r), Some(rep)) = (rf.get("regex"), rf.get("replacement")) else {
            self.error(
                rf.pos,
                "`replace_path_regex` needs `regex` and `replacement`",
            );
            return None;
        };
        let source = self.string(r, "`regex`")?;
        let replacement = self.string(rep, "`replacement`")?;
        match regex::Regex::new(&source) {
            Ok(regex) => Some(MiddlewareKind::ReplacePathRegex { regex, replacement }),
            Err(e) => {
                self.error(r.pos, format!("invalid regular expression: {e}"));
                None
            }
        }
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
        let mut list = |key: &str| -> Vec<(String, crate::yaml::Pos)> {
            match hf.get(key) {
                Some(node) => self.string_list(node, &format!("`{key}`")),
                None => Vec::new(),
            }
        };
        let names =
            |list: Vec<(String, crate::yaml::Pos)>| list.into_iter().map(|(s, _)| s).collect();
        let allow_origin_list = names(list("access_control_allow_origin_list"));
        let regexes = list("access_control_allow_origin_list_regex");
        let allow_methods = names(list("access_control_allow_methods"));
        let allow_headers = names(list("access_control_allow_headers"));
        let expose_headers = names(list("access_control_expose_headers"));
        let mut allow_origin_list_regex = Vec::with_capacity(regexes.len());
        for (source, pos) in regexes {
            match regex::Regex::new(&source) {
                Ok(regex) => allow_origin_list_regex.push(regex),
                Err(e) => self.error(pos, format!("invalid regular expression: {e}")),
            }
        }
        let flag = |loader: &mut Self, key: &str| match hf.get(key) {
            Some(node) => loader.boolean(node, &format!("`{key}`")).unwrap_or(false),
            None => false,
        };
        let allow_credentials = flag(self, "access_control_allow_credentials");
        let add_vary_header = flag(self, "add_vary_header");
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
        let names = |loader: &mut Self, key: &str| -> Vec<String> {
            match hf.get(key) {
                Some(node) => loader
                    .string_list(node, &format!("`{key}`"))
                    .into_iter()
                    .map(|(s, _)| s)
                    .collect(),
                None => Vec::new(),
            }
        };
        let flag = |loader: &mut Self, key: &str| match hf.get(key) {
            Some(node) => loader.boolean(node, &format!("`{key}`")).unwrap_or(false),
            None => false,
        };
        let text = |loader: &mut Self, key: &str| match hf.get(key) {
            Some(node) => loader.string(node, &format!("`{key}`")).unwrap_or_default(),
            None => String::new(),
        };
        let ssl_proxy_headers = match hf.get("ssl_proxy_headers") {
            Some(node) => self.header_map(node, "`ssl_proxy_headers`"),
            None => Vec::new(),
        };
        let sts_seconds = hf.get("sts_seconds").map(|node| {
            self.uint(node, "`sts_seconds`", 0, i64::MAX as u64)
                .unwrap_or(0)
        });
        let secure = SecureHeaders {
            allowed_hosts: names(self, "allowed_hosts"),
            hosts_proxy_headers: names(self, "hosts_proxy_headers"),
            ssl_proxy_headers,
            sts_seconds: sts_seconds.unwrap_or(0),
            sts_include_subdomains: flag(self, "sts_include_subdomains"),
            sts_preload: flag(self, "sts_preload"),
            force_sts_header: flag(self, "force_sts_header"),
            frame_deny: flag(self, "frame_deny"),
            custom_frame_options_value: text(self, "custom_frame_options_value"),
            content_type_nosniff: flag(self, "content_type_nosniff"),
            browser_xss_filter: flag(self, "browser_xss_filter"),
            custom_browser_xss_value: text(self, "custom_browser_xss_value"),
            content_security_policy: text(self, "content_security_policy"),
            content_security_policy_report_only: text(self, "content_security_policy_report_only"),
            referrer_policy: text(self, "referrer_policy"),
            permissions_policy: text(self, "permissions_policy"),
            is_development: flag(self, "is_development"),
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
}
