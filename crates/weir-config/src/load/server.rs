//! The `server:` block: workers, the graceful and client timeouts, the access log, the admin
//! listener, the open file cache, the pid file and metrics.

use super::values::{is_header_name, is_header_value, parse_listen_address};
use super::Loader;
use crate::model::*;
use crate::yaml::{Node, Value};

/// Where the admin listener serves when `server.admin` names no address: loopback only.
pub const DEFAULT_ADMIN_ADDRESS: &str = "127.0.0.1:9900";

impl Loader<'_> {
    pub(super) fn server(&mut self, node: Option<&Node>) -> Server {
        let mut server = Server {
            workers: None,
            graceful_timeout: DEFAULT_GRACEFUL_TIMEOUT,
            client_idle_timeout: DEFAULT_CLIENT_IDLE_TIMEOUT,
            client_body_timeout: DEFAULT_CLIENT_BODY_TIMEOUT,
            client_send_timeout: DEFAULT_CLIENT_SEND_TIMEOUT,
            access_log: AccessLog {
                enabled: false,
                format: LogFormat::Json,
                path: LogTarget::Stdout,
                sample: 1.0,
            },
            request_id: RequestId::default(),
            log: ServerLog::default(),
            admin: None,
            open_file_cache: OpenFileCache::default(),
            pid_file: None,
            metrics: true,
            metric_labels: MetricLabels::default(),
            tracing: None,
        };
        let Some(node) = node else { return server };
        let Some(f) = self.fields(
            node,
            "`server`",
            &[
                "workers",
                "graceful_timeout",
                "client_idle_timeout",
                "client_body_timeout",
                "client_send_timeout",
                "access_log",
                "request_id",
                "log",
                "admin",
                "open_file_cache",
                "pid_file",
                "metrics",
                "tracing",
            ],
        ) else {
            return server;
        };
        if let Some(m) = f.get("metrics") {
            match &m.value {
                Value::Map(_) => server.metric_labels = self.metric_labels(m),
                _ => server.metrics = self.boolean(m, "`server.metrics`").unwrap_or(true),
            }
        }
        if let Some(p) = f.get("pid_file") {
            server.pid_file = self
                .string(p, "`server.pid_file`")
                .filter(|p| !p.is_empty())
                .map(Into::into);
        }
        if let Some(cache) = f.get("open_file_cache") {
            self.open_file_cache(cache, &mut server.open_file_cache);
        }
        if let Some(admin) = f.get("admin") {
            server.admin = self.admin(admin);
        }
        if let Some(w) = f.get("workers") {
            if w.as_str() != Some("auto") {
                server.workers = self
                    .uint(w, "`server.workers` (or `auto`)", 1, 1024)
                    .map(|n| n as usize);
            }
        }
        if let Some(d) = f.get("graceful_timeout") {
            server.graceful_timeout = self
                .duration(d, "`server.graceful_timeout`")
                .unwrap_or(DEFAULT_GRACEFUL_TIMEOUT);
        }
        for (key, slot) in [
            ("client_idle_timeout", &mut server.client_idle_timeout),
            ("client_body_timeout", &mut server.client_body_timeout),
            ("client_send_timeout", &mut server.client_send_timeout),
        ] {
            if let Some(d) = f.get(key) {
                if let Some(d) = self.duration(d, &format!("`server.{key}`")) {
                    *slot = d;
                }
            }
        }
        if let Some(log) = f.get("access_log") {
            self.access_log(log, &mut server.access_log);
        }
        if let Some(log) = f.get("log") {
            self.server_log(log, &mut server.log);
        }
        if let Some(ids) = f.get("request_id") {
            self.request_id(ids, &mut server.request_id);
        }
        if let Some(tracing) = f.get("tracing") {
            server.tracing = self.tracing(tracing);
        }
        server
    }

    /// One of `choices` by its name, else an error naming them all.
    fn keyword<T: Copy>(&mut self, node: &Node, what: &str, choices: &[(&str, T)]) -> Option<T> {
        let name = self.string(node, what)?;
        let found = choices.iter().find(|(known, _)| *known == name);
        if found.is_none() {
            let names: Vec<&str> = choices.iter().map(|(known, _)| *known).collect();
            let expected = names.join(", ");
            self.error(
                node.pos,
                format!("unknown {what} `{name}`; expected: {expected}"),
            );
        }
        found.map(|(_, value)| *value)
    }

    /// `server.request_id`: whether requests carry an id, and in which header.
    fn request_id(&mut self, node: &Node, ids: &mut RequestId) {
        let Some(rf) = self.fields(node, "`server.request_id`", &["enabled", "header"]) else {
            return;
        };
        if let Some(e) = rf.get("enabled") {
            ids.enabled = self
                .boolean(e, "`server.request_id.enabled`")
                .unwrap_or(false);
        }
        if let Some(h) = rf.get("header") {
            if let Some(name) = self.string(h, "`server.request_id.header`") {
                if is_header_name(&name) {
                    ids.header = name.to_ascii_lowercase();
                } else {
                    self.error(
                        h.pos,
                        format!("`server.request_id.header` must be a header name, found `{name}`"),
                    );
                }
            }
        }
    }

    /// `server.log`: weir's own log, its least severe level, format and destination.
    fn server_log(&mut self, node: &Node, log: &mut ServerLog) {
        let Some(lf) = self.fields(node, "`server.log`", &["level", "format", "path"]) else {
            return;
        };
        let levels = LogLevel::ALL.map(|level| (level.name(), level));
        if let Some(level) = lf.get("level") {
            log.level = self
                .keyword(level, "`server.log.level`", &levels)
                .unwrap_or(log.level);
        }
        let formats = [
            ("text", ServerLogFormat::Text),
            ("json", ServerLogFormat::Json),
        ];
        if let Some(format) = lf.get("format") {
            log.format = self
                .keyword(format, "`server.log.format`", &formats)
                .unwrap_or(log.format);
        }
        if let Some(p) = lf.get("path") {
            if let Some(path) = self.string(p, "`server.log.path`") {
                log.path = match path.as_str() {
                    "stderr" => LogTarget::Stderr,
                    "stdout" => LogTarget::Stdout,
                    "" => {
                        self.error(
                            p.pos,
                            "`server.log.path` must be stderr, stdout or a file's path",
                        );
                        return;
                    }
                    _ => LogTarget::File(path.into()),
                };
            }
        }
    }

    /// `server.open_file_cache`: how many open files are kept, and how long one is trusted.
    fn open_file_cache(&mut self, node: &Node, cache: &mut OpenFileCache) {
        let Some(cf) = self.fields(node, "`server.open_file_cache`", &["max", "valid"]) else {
            return;
        };
        if let Some(n) = cf.get("max") {
            if let Some(max) = self.uint(n, "`open_file_cache.max`", 1, 1 << 20) {
                cache.max = max as usize;
            }
        }
        if let Some(d) = cf.get("valid") {
            if let Some(valid) = self.duration(d, "`open_file_cache.valid`") {
                cache.valid = valid;
            }
        }
    }

    /// `server.admin`: the admin API's listener, on loopback unless a token guards it.
    /// `server.metrics: { labels: [code, method] }` (metrics on).
    fn metric_labels(&mut self, node: &Node) -> MetricLabels {
        let mut labels = MetricLabels::default();
        let Some(f) = self.fields(node, "`server.metrics`", &["labels"]) else {
            return labels;
        };
        for (label, pos) in self.list_key(&f, "labels") {
            match label.as_str() {
                "code" => labels.code = true,
                "method" => labels.method = true,
                other => self.error(
                    pos,
                    format!("unknown label `{other}` in `server.metrics.labels`; expected: code, method"),
                ),
            }
        }
        labels
    }

    fn admin(&mut self, node: &Node) -> Option<Admin> {
        let keys = ["address", "token", "token_for_metrics"];
        let af = self.fields(node, "`server.admin`", &keys)?;
        let token = af
            .get("token")
            .and_then(|t| self.string(t, "`server.admin.token`"));
        if token
            .as_deref()
            .is_some_and(|t| t.len() < 16 || !is_header_value(t))
        {
            self.error(
                af.pos,
                "`server.admin.token` must be at least 16 characters, without control characters",
            );
        }
        let token_for_metrics = match af.get("token_for_metrics") {
            Some(b) => self
                .boolean(b, "`server.admin.token_for_metrics`")
                .unwrap_or(false),
            None => false,
        };
        let (text, pos) = match af.get("address") {
            Some(a) => (
                self.string(a, "`server.admin.address`").unwrap_or_default(),
                a.pos,
            ),
            None => (DEFAULT_ADMIN_ADDRESS.to_string(), af.pos),
        };
        let Some(address) = parse_listen_address(&text) else {
            self.error(
                pos,
                format!("`server.admin.address` must be HOST:PORT or :PORT, found `{text}`"),
            );
            return None;
        };
        // The API shows and changes state: beyond loopback it needs a token.
        if !address.ip().is_loopback() && token.is_none() {
            self.error(
                pos,
                format!("`server.admin.address` {address} is not a loopback address: set `server.admin.token` too"),
            );
            return None;
        }
        Some(Admin {
            address,
            token,
            token_for_metrics,
        })
    }

    /// `server.access_log`: whether, how and where requests are logged.
    fn access_log(&mut self, node: &Node, log: &mut AccessLog) {
        let Some(lf) = self.fields(
            node,
            "`server.access_log`",
            &["enabled", "format", "path", "sample"],
        ) else {
            return;
        };
        if let Some(e) = lf.get("enabled") {
            log.enabled = self.boolean(e, "`access_log.enabled`").unwrap_or(false);
        }
        if let Some(fmt) = lf.get("format") {
            if let Some(s) = self.string(fmt, "`access_log.format`") {
                match s.as_str() {
                    "json" => log.format = LogFormat::Json,
                    "combined" => log.format = LogFormat::Combined,
                    _ => self.error(
                        fmt.pos,
                        format!("unknown access log format `{s}`; expected: json, combined"),
                    ),
                }
            }
        }
        if let Some(n) = lf.get("sample") {
            match n.as_str().and_then(|t| t.parse::<f64>().ok()) {
                Some(share) if (0.0..=1.0).contains(&share) => {
                    log.sample = share
                }
                _ => self.error(
                    n.pos,
                    "`access_log.sample` must be a number from 0 to 1 (the share of requests logged)",
                ),
            }
        }
        if let Some(p) = lf.get("path") {
            if let Some(s) = self.string(p, "`access_log.path`") {
                log.path = match s.as_str() {
                    "stdout" | "" => LogTarget::Stdout,
                    "stderr" => LogTarget::Stderr,
                    _ => LogTarget::File(s.into()),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    #[test]
    fn admin_beyond_loopback_needs_a_long_token() {
        let errs = errors(&format!(
            "server:\n  admin: {{ address: \"0.0.0.0:9900\" }}\n{BASE}"
        ));
        assert!(
            errs[0].contains("is not a loopback address: set `server.admin.token` too"),
            "{errs:?}"
        );
        let errs = errors(&format!(
            "server:\n  admin: {{ address: \"0.0.0.0:9900\", token: short }}\n{BASE}"
        ));
        assert!(errs[0].contains("at least 16 characters"), "{errs:?}");
        let cfg = load_str(&format!("server:\n  admin: {{ address: \"0.0.0.0:9900\", token: \"0123456789abcdef\" }}\n{BASE}"), "t.yaml").unwrap();
        assert_eq!(
            cfg.server.admin.unwrap().token.as_deref(),
            Some("0123456789abcdef")
        );
        // `admin: {}` listens on loopback.
        let cfg = load_str(&format!("server:\n  admin: {{}}\n{BASE}"), "t.yaml").unwrap();
        let admin = cfg.server.admin.unwrap();
        assert_eq!(admin.address.to_string(), DEFAULT_ADMIN_ADDRESS);
        assert!(!admin.token_for_metrics);
    }

    #[test]
    fn metric_labels_are_code_and_method() {
        let cfg = load_str(
            &format!("server:\n  metrics: {{ labels: [code, method] }}\n{BASE}"),
            "t.yaml",
        )
        .unwrap();
        assert!(cfg.server.metrics);
        assert_eq!(
            cfg.server.metric_labels,
            MetricLabels {
                code: true,
                method: true
            }
        );
        let errs = errors(&format!(
            "server:\n  metrics: {{ labels: [code, path] }}\n{BASE}"
        ));
        assert_eq!(
            errs,
            ["t.yaml:2:29: unknown label `path` in `server.metrics.labels`; expected: code, method"]
        );
    }

    #[test]
    fn access_log_off_on_routers_and_entrypoints() {
        let yaml = "entrypoints:\n  web: { address: \"127.0.0.1:0\", access_log: false }\n  \
                    other: { address: \"127.0.0.1:0\" }\nrouters:\n  \
                    quiet: { rule: \"Path(`/q`)\", respond: {}, access_log: false }\n  \
                    loud: { rule: \"Path(`/l`)\", respond: {} }\n";
        let cfg = load_str(yaml, "t.yaml").unwrap();
        let logged: Vec<bool> = cfg.entrypoints.iter().map(|e| e.access_log).collect();
        assert_eq!(logged, [false, true]);
        let logged: Vec<bool> = cfg.routers.iter().map(|r| r.access_log).collect();
        assert_eq!(logged, [false, true]);
        let errs =
            errors(&yaml.replace("access_log: false }\n  other", "access_log: no }\n  other"));
        assert!(errs[0].starts_with("t.yaml:2:46: "), "{errs:?}");
        assert!(
            errs[0].ends_with("`access_log` must be `true` or `false`, found `no`"),
            "{errs:?}"
        );
        let errs = errors(&yaml.replace(
            "respond: {}, access_log: false",
            "respond: {}, access_log: 0",
        ));
        assert!(errs[0].starts_with("t.yaml:5:57: "), "{errs:?}");
    }

    #[test]
    fn request_id_defaults_and_errors() {
        let cfg = load_str(BASE, "t.yaml").unwrap();
        assert_eq!(cfg.server.request_id, RequestId::default());
        assert!(!cfg.server.request_id.enabled);
        let cfg = load_str(
            &format!("server:\n  request_id: {{ enabled: true, header: X-Trace }}\n{BASE}"),
            "t.yaml",
        )
        .unwrap();
        assert!(cfg.server.request_id.enabled);
        assert_eq!(cfg.server.request_id.header, "x-trace");
        let errs = errors(&format!(
            "server:\n  request_id: {{ header: \"a b\" }}\n{BASE}"
        ));
        assert_eq!(
            errs,
            ["t.yaml:2:25: `server.request_id.header` must be a header name, found `a b`"]
        );
        let errs = errors(&format!(
            "server:\n  request_id: {{ enabled: sometimes }}\n{BASE}"
        ));
        assert!(errs[0].starts_with("t.yaml:2:26: "), "{errs:?}");
    }

    #[test]
    fn server_log_defaults_and_errors() {
        let cfg = load_str(BASE, "t.yaml").unwrap();
        assert_eq!(cfg.server.log, ServerLog::default());
        assert_eq!(cfg.server.log.level, LogLevel::Info);
        assert_eq!(cfg.server.log.path, LogTarget::Stderr);
        let cfg = load_str(
            &format!("server:\n  log: {{ level: debug, format: json, path: /tmp/w.log }}\n{BASE}"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.server.log.level, LogLevel::Debug);
        assert_eq!(cfg.server.log.format, ServerLogFormat::Json);
        assert_eq!(cfg.server.log.path, LogTarget::File("/tmp/w.log".into()));
        let errs = errors(&format!("server:\n  log: {{ level: loud }}\n{BASE}"));
        assert_eq!(
            errs,
            ["t.yaml:2:17: unknown `server.log.level` `loud`; expected: error, warn, info, debug"]
        );
        let errs = errors(&format!("server:\n  log: {{ format: xml }}\n{BASE}"));
        assert_eq!(
            errs,
            ["t.yaml:2:18: unknown `server.log.format` `xml`; expected: text, json"]
        );
        let errs = errors(&format!("server:\n  log: {{ path: \"\" }}\n{BASE}"));
        assert_eq!(
            errs,
            ["t.yaml:2:16: `server.log.path` must be stderr, stdout or a file's path"]
        );
        let errs = errors(&format!("server:\n  log: {{ levels: info }}\n{BASE}"));
        assert!(errs[0].starts_with("t.yaml:2:"), "{errs:?}");
        assert!(errs[0].contains("levels"), "{errs:?}");
    }
}
