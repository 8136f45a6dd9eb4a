//! Turns a positioned YAML tree into the validated [`Config`], collecting every error it finds
//! (not just the first) as `FILE:LINE:COLUMN: message`, each saying what was expected.

mod cache;
mod elasticsearch;
mod health;
mod tcp;

use crate::model::*;
use crate::rule;
use crate::yaml::{self, Node, Pos, Value};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.column, self.message
        )
    }
}

/// Reads and validates a config file.
/// An error about a config file for the user: one about a place in it (it starts with
/// `LINE:COLUMN:`, as compile errors do) becomes `FILE:LINE:COLUMN: message`, like every other
/// config error.
/// Where the admin listener serves when `server.admin` names no address: loopback only.
pub const DEFAULT_ADMIN_ADDRESS: &str = "127.0.0.1:9900";

pub fn located(file: &str, error: &str) -> String {
    if error.starts_with(|c: char| c.is_ascii_digit()) {
        format!("{file}:{error}")
    } else {
        format!("{file}: {error}")
    }
}

pub fn load_file(path: &str) -> Result<Config, Vec<ConfigError>> {
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, path),
        Err(e) => Err(vec![ConfigError {
            file: path.to_string(),
            pos: Pos { line: 1, column: 1 },
            message: format!("cannot read config file: {e}"),
        }]),
    }
}

/// Validates config text; `file` is only used to label errors.
pub fn load_str(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    let root = yaml::parse(text).map_err(|e| {
        vec![ConfigError {
            file: file.to_string(),
            pos: e.pos,
            message: format!("invalid YAML: {}", e.message),
        }]
    })?;
    let mut loader = Loader {
        errors: Vec::new(),
        env: &|name| std::env::var(name).ok(),
        base: std::path::Path::new(file)
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default(),
    };
    let config = loader.config(&root);
    if loader.errors.is_empty() {
        Ok(config)
    } else {
        loader.errors.sort_by_key(|(pos, _)| (pos.line, pos.column));
        Err(loader
            .errors
            .into_iter()
            .map(|(pos, message)| ConfigError {
                file: file.to_string(),
                pos,
                message,
            })
            .collect())
    }
}

struct Loader<'e> {
    errors: Vec<(Pos, String)>,
    env: &'e dyn Fn(&str) -> Option<String>,
    /// The config file's folder: relative file paths in the config are resolved against it.
    base: std::path::PathBuf,
}

/// The entries of a mapping whose keys have been checked against the allowed set.
struct Fields<'n> {
    pos: Pos,
    entries: Vec<(&'n str, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, v)| *k == key && !matches!(v.value, Value::Null))
            .map(|(_, v)| *v)
    }
}

impl Loader<'_> {
    fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push((pos, message.into()));
    }

    /// Checks that `node` is a mapping with only `allowed` keys; `Null` reads as empty.
    fn fields<'n>(&mut self, node: &'n Node, what: &str, allowed: &[&str]) -> Option<Fields<'n>> {
        let entries = match &node.value {
            Value::Null => {
                return Some(Fields {
                    pos: node.pos,
                    entries: Vec::new(),
                })
            }
            Value::Map(entries) => entries,
            _ => {
                self.error(
                    node.pos,
                    format!("{what} must be a mapping, found {}", node.kind_name()),
                );
                return None;
            }
        };
        let mut out = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            match key.as_str() {
                Some(k) if allowed.contains(&k) => out.push((k, value)),
                Some(k) => self.error(
                    key.pos,
                    format!(
                        "unknown key `{k}` in {what}; expected one of: {}",
                        allowed.join(", ")
                    ),
                ),
                None => self.error(key.pos, format!("keys in {what} must be strings")),
            }
        }
        Some(Fields {
            pos: node.pos,
            entries: out,
        })
    }

    /// A mapping of user-chosen names (routers, services, ...) to their definitions.
    fn named<'n>(&mut self, node: Option<&'n Node>, what: &str) -> Vec<(String, &'n Node)> {
        let Some(node) = node else { return Vec::new() };
        match &node.value {
            Value::Map(entries) => entries
                .iter()
                .filter_map(|(k, v)| match k.as_str() {
                    Some(name) if !name.is_empty() => Some((name.to_string(), v)),
                    _ => {
                        self.error(k.pos, format!("{what} names must be non-empty strings"));
                        None
                    }
                })
                .collect(),
            _ => {
                self.error(
                    node.pos,
                    format!(
                        "`{what}` must be a mapping of names to definitions, found {}",
                        node.kind_name()
                    ),
                );
                Vec::new()
            }
        }
    }

    /// A scalar as a string, with `${NAME}` and `${NAME:-default}` expanded.
    fn string(&mut self, node: &Node, what: &str) -> Option<String> {
        match &node.value {
            Value::Scalar { text, .. } => match expand_env(text, self.env) {
                Ok(s) => Some(s),
                Err(msg) => {
                    self.error(node.pos, msg);
                    None
                }
            },
            _ => {
                self.error(
                    node.pos,
                    format!("{what} must be a string, found {}", node.kind_name()),
                );
                None
            }
        }
    }

    fn uint(&mut self, node: &Node, what: &str, min: u64, max: u64) -> Option<u64> {
        let text = self.string(node, what)?;
        match text.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.error(
                    node.pos,
                    format!("{what} must be a whole number from {min} to {max}, found `{text}`"),
                );
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        let text = self.string(node, what)?;
        match text.as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                self.error(
                    node.pos,
                    format!("{what} must be `true` or `false`, found `{text}`"),
                );
                None
            }
        }
    }

    fn duration(&mut self, node: &Node, what: &str) -> Option<Duration> {
        let text = self.string(node, what)?;
        let parsed = parse_duration(&text);
        if parsed.is_none() {
            self.error(
                node.pos,
                format!(
                    "{what} must be a duration like `250ms`, `30s`, `5m` or `1h`, found `{text}`"
                ),
            );
        }
        parsed
    }

    fn size(&mut self, node: &Node, what: &str) -> Option<u64> {
        let text = self.string(node, what)?;
        let parsed = parse_size(&text);
        if parsed.is_none() {
            self.error(
                node.pos,
                format!("{what} must be a size like `1024`, `64KiB` or `256MiB`, found `{text}`"),
            );
        }
        parsed
    }

    fn string_list(&mut self, node: &Node, what: &str) -> Vec<(String, Pos)> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(|item| self.string(item, what).map(|s| (s, item.pos)))
                .collect(),
            Value::Scalar { .. } => self
                .string(node, what)
                .map(|s| vec![(s, node.pos)])
                .unwrap_or_default(),
            _ => {
                self.error(
                    node.pos,
                    format!(
                        "{what} must be a list of strings, found {}",
                        node.kind_name()
                    ),
                );
                Vec::new()
            }
        }
    }

    fn header_map(&mut self, node: &Node, what: &str) -> Vec<(String, String)> {
        let Value::Map(entries) = &node.value else {
            self.error(
                node.pos,
                format!(
                    "{what} must be a mapping of header names to values, found {}",
                    node.kind_name()
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            let Some(name) = self.string(k, "a header name") else {
                continue;
            };
            if !is_header_name(&name) {
                self.error(k.pos, format!("`{name}` is not a valid header name"));
                continue;
            }
            let value = match &v.value {
                Value::Null => String::new(),
                _ => match self.string(v, "a header value") {
                    Some(s) => s,
                    None => continue,
                },
            };
            if !is_header_value(&value) {
                self.error(v.pos, "header values must not contain control characters");
                continue;
            }
            out.push((name, value));
        }
        out
    }

    fn header_names(&mut self, node: &Node, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (name, pos) in self.string_list(node, what) {
            if is_header_name(&name) {
                out.push(name);
            } else {
                self.error(pos, format!("`{name}` is not a valid header name"));
            }
        }
        out
    }

    fn config(&mut self, root: &Node) -> Config {
        let top = self
            .fields(
                root,
                "the top level",
                &[
                    "server",
                    "entrypoints",
                    "routers",
                    "services",
                    "middlewares",
                    "tcp",
                    "udp",
                    "caches",
                ],
            )
            .unwrap_or(Fields {
                pos: root.pos,
                entries: Vec::new(),
            });
        let server = self.server(top.get("server"));
        let entrypoints: Vec<Entrypoint> = self
            .named(top.get("entrypoints"), "entrypoints")
            .into_iter()
            .filter_map(|(name, node)| self.entrypoint(name, node))
            .collect();
        self.check_addresses_unique(&entrypoints);
        if top.get("entrypoints").is_none() {
            self.error(
                top.pos,
                "missing `entrypoints`: at least one is needed, e.g. `entrypoints: { web: { address: \":8080\" } }`",
            );
        }
        let services: Vec<Service> = self
            .named(top.get("services"), "services")
            .into_iter()
            .filter_map(|(name, node)| self.service(name, node))
            .collect();
        let middlewares: Vec<Middleware> = self
            .named(top.get("middlewares"), "middlewares")
            .into_iter()
            .filter_map(|(name, node)| self.middleware(name, node))
            .collect();
        let caches: Vec<Cache> = self
            .named(top.get("caches"), "caches")
            .into_iter()
            .filter_map(|(name, node)| self.cache(name, node))
            .collect();
        let mut routers = Vec::new();
        for (name, node) in self.named(top.get("routers"), "routers") {
            let known = Known {
                entrypoints: &entrypoints,
                services: &services,
                middlewares: &middlewares,
                caches: &caches,
            };
            if let Some(router) = self.router(name, node, &known) {
                routers.push(router);
            }
        }
        let tcp = self.tcp(top.get("tcp"), &entrypoints);
        let udp = self.udp(top.get("udp"), &entrypoints);
        for r in &routers {
            self.check_tcp_entrypoints(&r.name, r.pos, &r.entrypoints, &entrypoints, "router");
        }
        Config {
            server,
            entrypoints,
            routers,
            services,
            middlewares,
            tcp,
            udp,
            caches,
        }
    }

    fn server(&mut self, node: Option<&Node>) -> Server {
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
            admin: None,
            open_file_cache: OpenFileCache::default(),
            pid_file: None,
            metrics: true,
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
                "admin",
                "open_file_cache",
                "pid_file",
                "metrics",
            ],
        ) else {
            return server;
        };
        if let Some(m) = f.get("metrics") {
            server.metrics = self.boolean(m, "`server.metrics`").unwrap_or(true);
        }
        if let Some(p) = f.get("pid_file") {
            server.pid_file = self
                .string(p, "`server.pid_file`")
                .filter(|p| !p.is_empty())
                .map(Into::into);
        }
        if let Some(cache) = f.get("open_file_cache") {
            if let Some(cf) = self.fields(cache, "`server.open_file_cache`", &["max", "valid"]) {
                if let Some(n) = cf.get("max") {
                    if let Some(max) = self.uint(n, "`open_file_cache.max`", 1, 1 << 20) {
                        server.open_file_cache.max = max as usize;
                    }
                }
                if let Some(d) = cf.get("valid") {
                    if let Some(valid) = self.duration(d, "`open_file_cache.valid`") {
                        server.open_file_cache.valid = valid;
                    }
                }
            }
        }
        if let Some(admin) = f.get("admin") {
            if let Some(af) = self.fields(
                admin,
                "`server.admin`",
                &["address", "token", "token_for_metrics"],
            ) {
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
                match parse_listen_address(&text) {
                    // The API shows and changes state: beyond loopback it needs a token.
                    Some(address) if !address.ip().is_loopback() && token.is_none() => self.error(
                        pos,
                        format!("`server.admin.address` {address} is not a loopback address: set `server.admin.token` too"),
                    ),
                    Some(address) => {
                        server.admin = Some(Admin {
                            address,
                            token,
                            token_for_metrics,
                        })
                    }
                    None => self.error(
                        pos,
                        format!("`server.admin.address` must be HOST:PORT or :PORT, found `{text}`"),
                    ),
                }
            }
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
            if let Some(lf) = self.fields(
                log,
                "`server.access_log`",
                &["enabled", "format", "path", "sample"],
            ) {
                if let Some(e) = lf.get("enabled") {
                    server.access_log.enabled =
                        self.boolean(e, "`access_log.enabled`").unwrap_or(false);
                }
                if let Some(fmt) = lf.get("format") {
                    if let Some(s) = self.string(fmt, "`access_log.format`") {
                        match s.as_str() {
                            "json" => server.access_log.format = LogFormat::Json,
                            "combined" => server.access_log.format = LogFormat::Combined,
                            _ => self.error(
                                fmt.pos,
                                format!(
                                    "unknown access log format `{s}`; expected: json, combined"
                                ),
                            ),
                        }
                    }
                }
                if let Some(n) = lf.get("sample") {
                    match n.as_str().and_then(|t| t.parse::<f64>().ok()) {
                        Some(share) if (0.0..=1.0).contains(&share) => {
                            server.access_log.sample = share
                        }
                        _ => self.error(
                            n.pos,
                            "`access_log.sample` must be a number from 0 to 1 (the share of requests logged)",
                        ),
                    }
                }
                if let Some(p) = lf.get("path") {
                    if let Some(s) = self.string(p, "`access_log.path`") {
                        server.access_log.path = match s.as_str() {
                            "stdout" | "" => LogTarget::Stdout,
                            "stderr" => LogTarget::Stderr,
                            _ => LogTarget::File(s.into()),
                        };
                    }
                }
            }
        }
        server
    }

    /// Two entrypoints on one address would both bind it (each worker's socket has
    /// `SO_REUSEPORT`) and split its connections between them: refused, as `nginx -t` refuses
    /// a duplicate `listen`. A wildcard address overlaps every address of its port; port 0
    /// (any free port) never clashes.
    fn check_addresses_unique(&mut self, entrypoints: &[Entrypoint]) {
        for (i, later) in entrypoints.iter().enumerate() {
            let clash = entrypoints[..i].iter().find(|earlier| {
                let (a, b) = (earlier.address, later.address);
                earlier.transport == later.transport
                    && a.port() != 0
                    && a.port() == b.port()
                    && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
            });
            if let Some(earlier) = clash {
                let message = format!(
                    "entrypoint `{}` listens on {}, which entrypoint `{}` already uses (line {}, column {}): an address serves one entrypoint",
                    later.name, later.address, earlier.name, earlier.pos.line, earlier.pos.column
                );
                self.error(later.pos, message);
            }
        }
    }

    fn entrypoint(&mut self, name: String, node: &Node) -> Option<Entrypoint> {
        let what = format!("entrypoint `{name}`");
        let f = self.fields(node, &what, &["address", "tls", "h2c", "http2"])?;
        let h2c = match f.get("h2c") {
            Some(b) => self.boolean(b, "`h2c`").unwrap_or(false),
            None => false,
        };
        let http2 = f
            .get("http2")
            .map_or_else(Http2Settings::default, |h| self.http2_settings(h));
        let Some(addr_node) = f.get("address") else {
            self.error(
                f.pos,
                format!("{what} needs an `address`, e.g. \"0.0.0.0:8080\" or \":8080\""),
            );
            return None;
        };
        let text = self.string(addr_node, "`address`")?;
        let (text, transport) = match text.rsplit_once('/') {
            Some((addr, "tcp")) => (addr.to_string(), Transport::Tcp),
            Some((addr, "udp")) => (addr.to_string(), Transport::Udp),
            _ => (text, Transport::Tcp),
        };
        let tls = match (transport, f.get("tls")) {
            (_, None) => None,
            (Transport::Tcp, Some(t)) => self.entrypoint_tls(&name, t),
            (Transport::Udp, Some(t)) => {
                self.error(
                    t.pos,
                    format!("{what} is UDP: `tls` applies to TCP entrypoints only"),
                );
                None
            }
        };
        match parse_listen_address(&text) {
            Some(address) => Some(Entrypoint {
                name,
                address,
                pos: addr_node.pos,
                transport,
                tls,
                h2c,
                http2,
            }),
            None => {
                self.error(
                    addr_node.pos,
                    format!("`{text}` is not a listen address; expected HOST:PORT or :PORT"),
                );
                None
            }
        }
    }

    fn entrypoint_tls(&mut self, name: &str, node: &Node) -> Option<EntrypointTls> {
        let what = format!("`entrypoints.{name}.tls`");
        let f = self.fields(
            node,
            &what,
            &[
                "certificates",
                "default_certificate",
                "min_version",
                "alpn",
                "handshake_timeout",
            ],
        )?;
        let mut certificates = Vec::new();
        match f.get("certificates") {
            Some(list) => match &list.value {
                Value::Seq(items) => {
                    for item in items {
                        certificates.extend(self.certificate_files(item, "a certificate"));
                    }
                }
                _ => self.error(
                    list.pos,
                    format!("`certificates` must be a list, found {}", list.kind_name()),
                ),
            },
            None => self.error(
                f.pos,
                format!("{what} needs `certificates`, e.g. `certificates: [{{ cert: site.pem, key: site.key }}]`"),
            ),
        }
        let default_certificate = f
            .get("default_certificate")
            .and_then(|d| self.certificate_files(d, "`default_certificate`"));
        let mut min_version = TlsVersion::V1_2;
        if let Some(v) = f.get("min_version") {
            match self.string(v, "`min_version`").as_deref() {
                Some("1.2") => min_version = TlsVersion::V1_2,
                Some("1.3") => min_version = TlsVersion::V1_3,
                Some(other) => self.error(
                    v.pos,
                    format!("`min_version` must be \"1.2\" or \"1.3\", found `{other}`"),
                ),
                None => {}
            }
        }
        let mut alpn = vec!["h2".to_string(), "http/1.1".to_string()];
        if let Some(a) = f.get("alpn") {
            alpn.clear();
            for (proto, pos) in self.string_list(a, "`alpn`") {
                if proto == "http/1.1" || proto == "h2" {
                    alpn.push(proto);
                } else {
                    self.error(
                        pos,
                        format!(
                            "ALPN protocol `{proto}` is not served here; expected: h2, http/1.1"
                        ),
                    );
                }
            }
        }
        let handshake_timeout = match f.get("handshake_timeout") {
            Some(d) => self
                .duration(d, "`handshake_timeout`")
                .unwrap_or(DEFAULT_TLS_HANDSHAKE_TIMEOUT),
            None => DEFAULT_TLS_HANDSHAKE_TIMEOUT,
        };
        Some(EntrypointTls {
            certificates,
            default_certificate,
            min_version,
            alpn,
            handshake_timeout,
            pos: f.pos,
        })
    }

    /// `{ cert: FILE, key: FILE }`; the files themselves are read and checked when the
    /// configuration is compiled (`weir check` does it too).
    fn certificate_files(&mut self, node: &Node, what: &str) -> Option<CertificateFiles> {
        let f = self.fields(node, what, &["cert", "key"])?;
        let mut path = |key: &str| -> Option<std::path::PathBuf> {
            let Some(n) = f.get(key) else {
                self.error(
                    f.pos,
                    format!("{what} needs `{key}`, the path of a PEM file"),
                );
                return None;
            };
            let text = self.string(n, &format!("`{key}`"))?;
            Some(self.base.join(text))
        };
        let cert = path("cert");
        let key = path("key");
        Some(CertificateFiles {
            cert: cert?,
            key: key?,
            pos: f.pos,
        })
    }

    /// `http2:` settings (an entrypoint's, or a service's towards its servers).
    fn http2_settings(&mut self, h: &Node) -> Http2Settings {
        let mut http2 = Http2Settings::default();
        if let Some(hf) = self.fields(
            h,
            "`http2`",
            &[
                "max_concurrent_streams",
                "initial_window_size",
                "max_frame_size",
                "max_header_list_size",
            ],
        ) {
            if let Some(n) = hf.get("max_concurrent_streams") {
                if let Some(v) = self.uint(n, "`max_concurrent_streams`", 1, 1 << 20) {
                    http2.max_concurrent_streams = v as u32;
                }
            }
            for (key, slot, low, high) in [
                (
                    "initial_window_size",
                    &mut http2.initial_window_size,
                    1u64,
                    (1u64 << 31) - 1,
                ),
                (
                    "max_frame_size",
                    &mut http2.max_frame_size,
                    1 << 14,
                    (1 << 24) - 1,
                ),
                (
                    "max_header_list_size",
                    &mut http2.max_header_list_size,
                    1024,
                    1 << 24,
                ),
            ] {
                if let Some(n) = hf.get(key) {
                    let what = format!("`http2.{key}`");
                    match n.as_str().and_then(parse_size) {
                        Some(v) if (low..=high).contains(&v) => *slot = v as u32,
                        _ => self.error(
                            n.pos,
                            format!("{what} must be a size from {low} to {high} bytes"),
                        ),
                    }
                }
            }
        }
        http2
    }

    fn service(&mut self, name: String, node: &Node) -> Option<Service> {
        let what = format!("service `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "servers",
                "load_balancer",
                "hash_key",
                "keepalive",
                "timeouts",
                "pass_host_header",
                "tls",
                "health_check",
                "passive_health",
                "retry",
                "protocol",
                "http2",
                "elasticsearch",
            ],
        )?;
        let health_check = f.get("health_check").and_then(|n| self.health_check(n));
        let passive_health = f.get("passive_health").and_then(|n| self.passive_health(n));
        let mut retry = f.get("retry").and_then(|n| self.retry(n));
        let mut servers = Vec::new();
        let elasticsearch = match (f.get("elasticsearch"), f.get("servers")) {
            (Some(es), None) => self.elasticsearch(es, &mut servers),
            (Some(es), Some(_)) => {
                self.error(
                    es.pos,
                    format!("{what} has both `servers` and `elasticsearch`; an Elasticsearch service finds its servers from `elasticsearch.hosts`"),
                );
                None
            }
            (None, _) => None,
        };
        let mut health_check = health_check;
        if let (Some(check), Some(authorization)) = (
            health_check.as_mut(),
            elasticsearch
                .as_ref()
                .and_then(|es| es.authorization.as_ref()),
        ) {
            // The cluster answers 401 to a probe without the service's credentials.
            if !check
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            {
                check
                    .headers
                    .push(("authorization".to_string(), authorization.clone()));
            }
        }
        if elasticsearch.is_some() && f.get("retry").is_none() {
            // A node that cannot be reached, resets, or answers 502/503 is not the cluster's
            // answer: try another node once (requests that can be sent again only, as always).
            retry = Some(Retry {
                attempts: 2,
                on: vec![
                    RetryOn::ConnectFailure,
                    RetryOn::Reset,
                    RetryOn::Status(502),
                    RetryOn::Status(503),
                ],
                per_try_timeout: None,
                budget: None,
            });
        }
        match f.get("servers") {
            None if f.get("elasticsearch").is_some() => {}
            None => self.error(
                f.pos,
                format!("{what} needs `servers`, e.g. `servers: [{{ url: \"http://127.0.0.1:9000\" }}]`"),
            ),
            Some(list) => match &list.value {
                Value::Seq(items) => {
                    for item in items {
                        if let Some(s) = self.upstream_server(item) {
                            servers.push(s);
                        }
                    }
                }
                _ => self.error(
                    list.pos,
                    format!("`servers` must be a list, found {}", list.kind_name()),
                ),
            },
        }
        let mut load_balancer = Balancer::RoundRobin;
        if let Some(lb) = f.get("load_balancer") {
            if let Some(s) = self.string(lb, "`load_balancer`") {
                load_balancer = match s.as_str() {
                    "round_robin" => Balancer::RoundRobin,
                    "least_conn" => Balancer::LeastConn,
                    "random" => Balancer::Random,
                    "p2c" => Balancer::P2c,
                    "consistent_hash" => Balancer::ConsistentHash,
                    _ => {
                        self.error(
                            lb.pos,
                            format!(
                                "unknown load balancer `{s}`; expected one of: {}",
                                Balancer::NAMES
                            ),
                        );
                        Balancer::RoundRobin
                    }
                };
            }
        }
        let mut hash_key = HashKey::ClientIp;
        if let Some(hk) = f.get("hash_key") {
            if let Some(s) = self.string(hk, "`hash_key`") {
                let parsed = match s.split_once(':') {
                    None if s == "client_ip" => Some(HashKey::ClientIp),
                    None if s == "path" => Some(HashKey::Path),
                    Some(("header", h)) if is_header_name(h) => {
                        Some(HashKey::Header(h.to_string()))
                    }
                    Some(("cookie", c)) if !c.is_empty() => Some(HashKey::Cookie(c.to_string())),
                    _ => None,
                };
                match parsed {
                    Some(k) => hash_key = k,
                    None => self.error(
                        hk.pos,
                        format!("unknown hash_key `{s}`; expected client_ip, path, header:NAME or cookie:NAME"),
                    ),
                }
            }
            if load_balancer != Balancer::ConsistentHash {
                self.error(
                    hk.pos,
                    "`hash_key` only applies to `load_balancer: consistent_hash`",
                );
            }
        }
        let mut keepalive = Keepalive {
            max_idle_per_server: DEFAULT_MAX_IDLE_PER_SERVER,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        };
        if let Some(k) = f.get("keepalive") {
            if let Some(kf) =
                self.fields(k, "`keepalive`", &["max_idle_per_server", "idle_timeout"])
            {
                if let Some(n) = kf.get("max_idle_per_server") {
                    if let Some(n) = self.uint(n, "`max_idle_per_server`", 0, 1_000_000) {
                        keepalive.max_idle_per_server = n as usize;
                    }
                }
                if let Some(d) = kf.get("idle_timeout") {
                    if let Some(d) = self.duration(d, "`idle_timeout`") {
                        keepalive.idle_timeout = d;
                    }
                }
            }
        }
        let mut timeouts = Timeouts {
            request: None,
            connect: DEFAULT_CONNECT_TIMEOUT,
            response_header: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            read: DEFAULT_UPSTREAM_READ_TIMEOUT,
            write: DEFAULT_UPSTREAM_WRITE_TIMEOUT,
            websocket_idle: None,
        };
        if let Some(t) = f.get("timeouts") {
            if let Some(tf) = self.fields(
                t,
                "`timeouts`",
                &[
                    "request",
                    "connect",
                    "response_header",
                    "read",
                    "write",
                    "websocket_idle",
                ],
            ) {
                timeouts.request = tf
                    .get("request")
                    .and_then(|d| self.duration(d, "`timeouts.request`"))
                    .filter(|d| !d.is_zero());
                timeouts.websocket_idle = tf
                    .get("websocket_idle")
                    .and_then(|d| self.duration(d, "`timeouts.websocket_idle`"));
                for (key, slot) in [
                    ("connect", &mut timeouts.connect),
                    ("response_header", &mut timeouts.response_header),
                    ("read", &mut timeouts.read),
                    ("write", &mut timeouts.write),
                ] {
                    if let Some(d) = tf
                        .get(key)
                        .and_then(|d| self.duration(d, &format!("`{key}`")))
                    {
                        *slot = d;
                    }
                }
            }
        }
        let pass_host_header = match f.get("pass_host_header") {
            Some(b) => self.boolean(b, "`pass_host_header`").unwrap_or(true),
            None => true,
        };
        let mut tls = UpstreamTls {
            pos: f.pos,
            ..UpstreamTls::default()
        };
        if let Some(t) = f.get("tls") {
            tls.pos = t.pos;
            if let Some(tf) = self.fields(
                t,
                "`tls`",
                &["ca", "server_name", "insecure_skip_verify", "certificate"],
            ) {
                if let Some(ca) = tf.get("ca").and_then(|n| self.string(n, "`ca`")) {
                    tls.ca = Some(self.base.join(ca));
                }
                tls.server_name = tf
                    .get("server_name")
                    .and_then(|n| self.string(n, "`server_name`"));
                if let Some(b) = tf.get("insecure_skip_verify") {
                    tls.insecure_skip_verify =
                        self.boolean(b, "`insecure_skip_verify`").unwrap_or(false);
                }
                tls.certificate = tf
                    .get("certificate")
                    .and_then(|c| self.certificate_files(c, "`certificate`"));
            }
            if !servers.iter().any(|s: &UpstreamServer| s.tls) {
                self.error(
                    t.pos,
                    "`tls` applies to https:// servers; this service has none",
                );
            }
        }
        let protocol = self.upstream_protocol(&f, &servers);
        let http2 = match f.get("http2") {
            Some(h) if protocol == UpstreamProtocol::Http1 => {
                self.error(h.pos, "`http2` applies to `protocol: h2` or `h2c`");
                Http2Settings::default()
            }
            Some(h) => self.http2_settings(h),
            None => Http2Settings::default(),
        };
        Some(Service {
            name,
            protocol,
            http2,
            servers,
            load_balancer,
            hash_key,
            keepalive,
            timeouts,
            pass_host_header,
            tls,
            health_check,
            passive_health,
            retry,
            elasticsearch,
        })
    }

    /// `protocol:` h1 (the default), h2 (TLS with ALPN, `https://` servers) or h2c (prior
    /// knowledge, `http://` servers).
    fn upstream_protocol(
        &mut self,
        f: &Fields<'_>,
        servers: &[UpstreamServer],
    ) -> UpstreamProtocol {
        let Some(node) = f.get("protocol") else {
            return UpstreamProtocol::Http1;
        };
        let protocol = match self.string(node, "`protocol`").as_deref() {
            Some("h1") => UpstreamProtocol::Http1,
            Some("h2") => UpstreamProtocol::Http2,
            Some("h2c") => UpstreamProtocol::H2c,
            Some(other) => {
                self.error(
                    node.pos,
                    format!("unknown protocol `{other}`; expected h1, h2 or h2c"),
                );
                return UpstreamProtocol::Http1;
            }
            None => return UpstreamProtocol::Http1,
        };
        let mismatch = match protocol {
            UpstreamProtocol::Http2 => servers.iter().find(|s| !s.tls).map(|s| {
                format!("`protocol: h2` is HTTP/2 over TLS, but {} is http:// (cleartext HTTP/2 is `h2c`)", s.url)
            }),
            UpstreamProtocol::H2c => servers.iter().find(|s| s.tls).map(|s| {
                format!("`protocol: h2c` is cleartext HTTP/2, but {} is https:// (HTTP/2 over TLS is `h2`)", s.url)
            }),
            UpstreamProtocol::Http1 => None,
        };
        if let Some(message) = mismatch {
            self.error(node.pos, message);
        }
        protocol
    }

    fn upstream_server(&mut self, node: &Node) -> Option<UpstreamServer> {
        let f = self.fields(node, "a server", &["url", "weight"])?;
        let Some(url_node) = f.get("url") else {
            self.error(
                f.pos,
                "a server needs a `url`, e.g. \"http://127.0.0.1:9000\"",
            );
            return None;
        };
        let url = self.string(url_node, "`url`")?;
        let weight = match f.get("weight") {
            Some(w) => self.uint(w, "`weight`", 1, 10_000)? as u32,
            None => 1,
        };
        let server = UpstreamServer::from_url(&url, weight);
        if server.is_none() {
            self.error(url_node.pos, bad_server_url(&url));
        }
        server
    }

    fn middleware(&mut self, name: String, node: &Node) -> Option<Middleware> {
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
            "strip_prefix" => {
                let prefixes = self.string_list(body, "`strip_prefix`");
                for (p, pos) in &prefixes {
                    if !p.starts_with('/') {
                        self.error(*pos, format!("prefix `{p}` must start with `/`"));
                    }
                }
                MiddlewareKind::StripPrefix(prefixes.into_iter().map(|(p, _)| p).collect())
            }
            "add_prefix" => {
                let p = self.string(body, "`add_prefix`")?;
                if !p.starts_with('/') {
                    self.error(body.pos, format!("prefix `{p}` must start with `/`"));
                }
                MiddlewareKind::AddPrefix(p)
            }
            "replace_path_regex" => {
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
                    Ok(regex) => MiddlewareKind::ReplacePathRegex { regex, replacement },
                    Err(e) => {
                        self.error(r.pos, format!("invalid regular expression: {e}"));
                        return None;
                    }
                }
            }
            "headers" => {
                let hf = self.fields(body, "`headers`", &["request", "response"])?;
                let request = hf
                    .get("request")
                    .map(|n| self.header_ops(n, "`headers.request`"))
                    .unwrap_or_default();
                let response = hf
                    .get("response")
                    .map(|n| self.header_ops(n, "`headers.response`"))
                    .unwrap_or_default();
                MiddlewareKind::Headers { request, response }
            }
            "compress" => MiddlewareKind::Compress(self.compress(body)?),
            _ => {
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
                MiddlewareKind::RedirectScheme { scheme, permanent }
            }
        };
        Some(Middleware { name, kind })
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

    fn static_files(&mut self, node: &Node) -> Option<StaticFiles> {
        const KEYS: &[&str] = &[
            "root",
            "index",
            "precompressed",
            "autoindex",
            "follow_symlinks",
            "dotfiles",
            "cache_control",
            "not_found",
        ];
        let f = self.fields(node, "`static`", KEYS)?;
        let Some(root_node) = f.get("root") else {
            self.error(f.pos, "`static` needs `root`, the folder to serve");
            return None;
        };
        let root_text = self.string(root_node, "`root`")?;
        let root = self.base.join(root_text);
        if !root.is_dir() {
            self.error(
                root_node.pos,
                format!("`root` {} is not a readable folder", root.display()),
            );
        }
        let index = match f.get("index") {
            Some(list) => {
                let names = self.string_list(list, "`index`");
                for (name, pos) in &names {
                    if name.is_empty() || name.contains('/') || name.starts_with('.') {
                        self.error(*pos, format!("index `{name}` must be a plain file name"));
                    }
                }
                names.into_iter().map(|(n, _)| n).collect()
            }
            None => vec!["index.html".to_string()],
        };
        let mut flag = |key: &str, default: bool| {
            f.get(key)
                .and_then(|n| self.boolean(n, &format!("`{key}`")))
                .unwrap_or(default)
        };
        let precompressed = flag("precompressed", true);
        let autoindex = flag("autoindex", false);
        let follow_symlinks = flag("follow_symlinks", false);
        let dotfiles = flag("dotfiles", false);
        let cache_control = match f.get("cache_control") {
            Some(n) => {
                let value = self.string(n, "`cache_control`")?;
                if !is_header_value(&value) {
                    self.error(n.pos, "`cache_control` must be a header value");
                }
                Some(value)
            }
            None => None,
        };
        let not_found = match f.get("not_found") {
            Some(n) => {
                let path = self.string(n, "`not_found`")?;
                let file = root.join(path.trim_start_matches('/'));
                if path.split('/').any(|seg| seg == "..") || !file.is_file() {
                    self.error(
                        n.pos,
                        format!("`not_found` {} is not a file under `root`", file.display()),
                    );
                }
                Some(path.trim_start_matches('/').to_string())
            }
            None => None,
        };
        Some(StaticFiles {
            root,
            index,
            precompressed,
            autoindex,
            follow_symlinks,
            dotfiles,
            cache_control,
            not_found,
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

    /// Whether `name` is one of `defined`. If not, says at `pos` that `what` names a `kind`
    /// that is not defined, and lists the ones that are.
    fn is_defined<'d>(
        &mut self,
        pos: Pos,
        (what, kind, name): (&str, &str, &str),
        defined: impl Iterator<Item = &'d str> + Clone,
    ) -> bool {
        if defined.clone().any(|d| d == name) {
            return true;
        }
        let known: Vec<&str> = defined.collect();
        self.error(
            pos,
            format!(
                "{what} names {kind} `{name}`, which is not defined; defined: {}",
                list_or_none(&known)
            ),
        );
        false
    }

    /// A router's `entrypoints`, each of which must be defined. A TCP or UDP router's must
    /// also take its `transport` (with what to call one that does not); HTTP routers pass
    /// `None`. An error sets `ok` to false.
    fn router_entrypoints(
        &mut self,
        f: &Fields<'_>,
        what: &str,
        entrypoints: &[Entrypoint],
        transport: Option<(Transport, &str)>,
        ok: &mut bool,
    ) -> Vec<String> {
        let Some(list) = f.get("entrypoints") else {
            return Vec::new();
        };
        let mut eps = Vec::new();
        for (ep, pos) in self.string_list(list, "`entrypoints`") {
            match (entrypoints.iter().find(|e| e.name == ep), transport) {
                (Some(e), Some((taken, other))) if e.transport != taken => {
                    self.error(
                        pos,
                        format!("{what} names entrypoint `{ep}`, which is {other}"),
                    );
                    *ok = false;
                }
                (Some(_), _) => {}
                (None, _) => {
                    let defined = entrypoints.iter().map(|e| e.name.as_str());
                    *ok &= self.is_defined(pos, (what, "entrypoint", &ep), defined);
                }
            }
            eps.push(ep);
        }
        eps
    }

    /// A router's `rule`, read by `parse` (`example` shows one when it is missing), and its
    /// `priority`.
    fn router_rule<R>(
        &mut self,
        f: &Fields<'_>,
        what: &str,
        example: &str,
        parse: impl Fn(&str) -> Result<R, rule::RuleError>,
    ) -> Option<(String, R, i64)> {
        let Some(rule_node) = f.get("rule") else {
            self.error(
                f.pos,
                format!("{what} needs a `rule`, e.g. rule: {example}"),
            );
            return None;
        };
        let rule_text = self.string(rule_node, "`rule`")?;
        let rule = match parse(&rule_text) {
            Ok(rule) => rule,
            Err(e) => {
                self.error(
                    offset_pos(rule_node, &rule_text, e.offset),
                    format!("invalid rule: {}", e.message),
                );
                return None;
            }
        };
        let priority = self.router_priority(f.get("priority"), &rule_text)?;
        Some((rule_text, rule, priority))
    }

    /// A router's `priority`: as written, else the rule's length (Traefik's default).
    fn router_priority(&mut self, node: Option<&Node>, rule_text: &str) -> Option<i64> {
        let Some(p) = node else {
            return Some(rule_text.chars().count() as i64);
        };
        let text = self.string(p, "`priority`")?;
        match text.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    p.pos,
                    format!("`priority` must be a whole number, found `{text}`"),
                );
                None
            }
        }
    }

    fn router(&mut self, name: String, node: &Node, known: &Known<'_>) -> Option<Router> {
        let Known {
            entrypoints,
            services,
            middlewares,
            caches,
        } = *known;
        let what = format!("router `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "entrypoints",
                "rule",
                "priority",
                "middlewares",
                "service",
                "respond",
                "redirect",
                "static",
                "cache",
            ],
        )?;
        let mut ok = true;
        let eps = self.router_entrypoints(&f, &what, entrypoints, None, &mut ok);
        let (rule_text, rule, priority) =
            self.router_rule(&f, &what, "\"PathPrefix(`/`)\"", rule::parse)?;
        let mut mws = Vec::new();
        if let Some(list) = f.get("middlewares") {
            for (mw, pos) in self.string_list(list, "`middlewares`") {
                let defined = middlewares.iter().map(|m| m.name.as_str());
                ok &= self.is_defined(pos, (&what, "middleware", &mw), defined);
                mws.push(mw);
            }
        }
        let actions: Vec<(&str, &Node)> = ["service", "respond", "redirect", "static"]
            .iter()
            .filter_map(|k| f.get(k).map(|n| (*k, n)))
            .collect();
        if actions.len() != 1 {
            let pos = actions.get(1).map(|a| a.1.pos).unwrap_or(f.pos);
            self.error(
                pos,
                format!(
                    "{what} must have exactly one action: `service`, `respond`, `redirect` or `static`"
                ),
            );
            return None;
        }
        let (kind, body) = actions[0];
        let action = match kind {
            "service" => {
                let svc = self.string(body, "`service`")?;
                let defined = services.iter().map(|s| s.name.as_str());
                ok &= self.is_defined(body.pos, (&what, "service", &svc), defined);
                Action::Service(svc)
            }
            "respond" => {
                let rf = self.fields(body, "`respond`", &["status", "body", "headers"])?;
                let status = match rf.get("status") {
                    Some(s) => self.uint(s, "`status`", 200, 599)? as u16,
                    None => 200,
                };
                let body_text = match rf.get("body") {
                    Some(b) => self.string(b, "`body`")?,
                    None => String::new(),
                };
                let headers = rf
                    .get("headers")
                    .map(|h| self.header_map(h, "`headers`"))
                    .unwrap_or_default();
                Action::Respond(Respond {
                    status,
                    body: body_text,
                    headers,
                })
            }
            "static" => Action::Static(self.static_files(body)?),
            _ => {
                let rf = self.fields(body, "`redirect`", &["to", "status"])?;
                let Some(to_node) = rf.get("to") else {
                    self.error(
                        rf.pos,
                        "`redirect` needs `to`, e.g. to: \"https://example.com/\"",
                    );
                    return None;
                };
                let to = self.string(to_node, "`to`")?;
                if !is_header_value(&to) || to.is_empty() {
                    self.error(
                        to_node.pos,
                        "`to` must be a non-empty URL without control characters",
                    );
                }
                let status = match rf.get("status") {
                    Some(s) => {
                        let n = self.uint(s, "`status`", 300, 399)? as u16;
                        if ![301, 302, 303, 307, 308].contains(&n) {
                            self.error(s.pos, format!("redirect status must be one of 301, 302, 303, 307, 308, found {n}"));
                        }
                        n
                    }
                    None => 302,
                };
                Action::Redirect(Redirect { to, status })
            }
        };
        let cache = match f.get("cache") {
            None => None,
            Some(n) => {
                let cache = self.string(n, "`cache`")?;
                let defined = caches.iter().map(|c| c.name.as_str());
                ok &= self.is_defined(n.pos, (&what, "cache", &cache), defined);
                if !matches!(action, Action::Service(_)) {
                    self.error(n.pos, "`cache` applies to routers with a `service`");
                    ok = false;
                }
                Some(cache)
            }
        };
        ok.then_some(Router {
            name,
            pos: node.pos,
            entrypoints: eps,
            rule_text,
            rule,
            priority,
            middlewares: mws,
            action,
            cache,
        })
    }
}

/// What a router may name.
#[derive(Clone, Copy)]
struct Known<'a> {
    entrypoints: &'a [Entrypoint],
    services: &'a [Service],
    middlewares: &'a [Middleware],
    caches: &'a [Cache],
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The file position of character `offset` inside a one-line scalar (quotes accounted for).
pub(crate) fn offset_pos(node: &Node, text: &str, offset: usize) -> Pos {
    let quoted = matches!(node.value, Value::Scalar { quoted: true, .. });
    let Value::Scalar { text: raw, .. } = &node.value else {
        return node.pos;
    };
    if raw != text || raw.contains('\n') {
        return node.pos;
    }
    Pos {
        line: node.pos.line,
        column: node.pos.column + offset + usize::from(quoted),
    }
}

/// Expands `${NAME}` and `${NAME:-default}`; `$${` writes a literal `${`.
pub fn expand_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if !text.contains("${") {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        if rest[..i].ends_with('$') {
            out.push_str(&rest[..i - 1]);
            out.push_str("${");
            rest = &rest[i + 2..];
            continue;
        }
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated `${{` in `{text}`; expected `${{NAME}}`"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "`${{{inner}}}` is not a valid environment variable reference"
            ));
        }
        match (env(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "environment variable `{name}` is not set (use `${{{name}:-default}}` for a fallback)"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "us" => n / 1_000_000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// A byte size: a whole number with an optional unit (`B`, `KB`/`KiB`, `MB`/`MiB`,
/// `GB`/`GiB`; the decimal ones are read as binary, as nginx reads `k` and `m`).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "KiB" | "k" => 1 << 10,
        "MB" | "MiB" | "m" => 1 << 20,
        "GB" | "GiB" | "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

fn parse_listen_address(text: &str) -> Option<SocketAddr> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_string()
    };
    resolve(&full)
}

#[cfg(not(fuzzing))]
fn resolve(address: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    address.to_socket_addrs().ok()?.next()
}

/// Fuzz builds (`cfg(fuzzing)`, set by cargo fuzz) take numeric addresses only: the `config`
/// target would otherwise send a DNS query for every name the fuzzer makes up.
#[cfg(fuzzing)]
fn resolve(address: &str) -> Option<SocketAddr> {
    address.parse().ok()
}

/// `http://HOST[:PORT][/]` into host and port.
/// `http://HOST[:PORT]` or `https://HOST[:PORT]` → (is https, host, port).
fn bad_server_url(url: &str) -> String {
    format!("`{url}` is not a server URL; expected http://HOST[:PORT] or https://HOST[:PORT]")
}

impl UpstreamServer {
    /// A server from its URL (`http://HOST[:PORT]` or `https://...`); `None` when it is not one.
    pub fn from_url(url: &str, weight: u32) -> Option<UpstreamServer> {
        let (tls, host, port) = parse_http_url(url)?;
        let authority = url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        Some(UpstreamServer {
            url: url.to_string(),
            tls,
            authority,
            host,
            port,
            weight,
        })
    }
}

fn parse_http_url(url: &str) -> Option<(bool, String, u16)> {
    let (tls, rest) = match url.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, url.strip_prefix("http://")?),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let host = rule::strip_port(rest);
    let port = if host.len() == rest.len() {
        if tls {
            443
        } else {
            80
        }
    } else {
        rest[host.len() + 1..].parse().ok()?
    };
    if host.is_empty() {
        return None;
    }
    Some((
        tls,
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    ))
}

pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_used_by_two_entrypoints_is_refused() {
        let errs = errors(
            "entrypoints:\n  a: { address: \"127.0.0.1:18090\" }\n  b: { address: \"127.0.0.1:18090\" }\n",
        );
        assert_eq!(
            errs,
            ["t.yaml:3:17: entrypoint `b` listens on 127.0.0.1:18090, which entrypoint `a` already uses (line 2, column 17): an address serves one entrypoint"]
        );
        // A wildcard overlaps a specific address of its port; UDP and TCP do not clash.
        let errs = errors(
            "entrypoints:\n  a: { address: \":18090\" }\n  b: { address: \"127.0.0.1:18090\" }\n  c: { address: \"127.0.0.1:18090/udp\" }\n",
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("entrypoint `b`"), "{errs:?}");
        // Any free port, and different ports, are fine.
        let ok = "entrypoints:\n  a: { address: \"127.0.0.1:0\" }\n  b: { address: \"127.0.0.1:0\" }\n  c: { address: \"127.0.0.1:18091\" }\n  d: { address: \"127.0.0.2:18091\" }\n";
        assert!(load_str(ok, "t.yaml").is_ok());
    }

    fn errors(text: &str) -> Vec<String> {
        load_str(text, "t.yaml")
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    const BASE: &str = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n";

    #[test]
    fn minimal_config_loads() {
        let cfg = load_str(
            &format!(
                "{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    respond: {{ body: hi }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.routers[0].priority, 9);
        assert!(matches!(cfg.routers[0].action, Action::Respond(_)));
    }

    #[test]
    fn caches_and_the_routers_that_name_them() {
        let text = format!(
            "{BASE}caches:\n  main: {{ memory: 1MiB, max_object_size: 2MiB, key: [host, query, color] }}\n\
             routers:\n  a: {{ rule: \"Path(`/a`)\", respond: {{ body: x }}, cache: main }}\n  \
             b: {{ rule: \"Path(`/b`)\", service: s, cache: nope }}\n\
             services:\n  s: {{ servers: [{{ url: \"http://a:1\" }}] }}\n"
        );
        let errs = errors(&text);
        assert_eq!(errs.len(), 5, "{errs:?}");
        assert!(
            errs[0].contains("`max_object_size` is larger than `memory`"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:4:53: `key` must include `path`"),
            "{errs:?}"
        );
        assert!(
            errs[2].starts_with("t.yaml:4:67: unknown `key` part `color`"),
            "{errs:?}"
        );
        assert!(
            errs[3].ends_with("`cache` applies to routers with a `service`"),
            "{errs:?}"
        );
        assert!(
            errs[4].contains("router `b` names cache `nope`, which is not defined; defined: main"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!("{BASE}caches:\n  main: {{}}\nrouters:\n  b: {{ rule: \"Path(`/b`)\", service: s, cache: main }}\nservices:\n  s: {{ servers: [{{ url: \"http://a:1\" }}] }}\n"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.caches[0].memory, DEFAULT_CACHE_MEMORY);
        assert_eq!(cfg.caches[0].key, CacheKeyPart::DEFAULT.to_vec());
        assert_eq!(cfg.caches[0].lock_timeout, DEFAULT_CACHE_LOCK_TIMEOUT);
        assert!(cfg.caches[0].purge_allow.is_empty());
        assert_eq!(cfg.routers[0].cache.as_deref(), Some("main"));
    }

    #[test]
    fn cache_lock_and_purge_settings() {
        let errs = errors(&format!(
            "{BASE}caches:\n  main: {{ lock_timeout: soon, purge: {{ allow: [127.0.0.1/32, 10.0.0.0/33], deny: [] }} }}\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:4:25: "), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.contains("`10.0.0.0/33` is not an address or network")),
            "{errs:?}"
        );
        assert!(errs.iter().any(|e| e.contains("deny")), "{errs:?}");
        let cfg = load_str(
            &format!("{BASE}caches:\n  main: {{ lock_timeout: 2s, purge: {{ allow: [127.0.0.1, \"::1\"] }} }}\n"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.caches[0].lock_timeout, Duration::from_secs(2));
        assert_eq!(cfg.caches[0].purge_allow.len(), 2);
        assert_eq!(cfg.caches[0].disk, None);
        // The disk tier: a folder (relative to the config file's), and a size.
        let errs = errors(&format!(
            "{BASE}caches:\n  main: {{ disk: {{ size: 1GiB }} }}\n"
        ));
        assert!(errs[0].contains("`disk` needs a `path`"), "{errs:?}");
        let cfg = load_str(
            &format!("{BASE}caches:\n  a: {{ disk: {{ path: data/cache }} }}\n  b: {{ disk: {{ path: /var/cache/w, size: 2GiB }} }}\n"),
            "conf/t.yaml",
        )
        .unwrap();
        let disk = |i: usize| cfg.caches[i].disk.clone().unwrap();
        assert_eq!(disk(0).path, std::path::Path::new("conf/data/cache"));
        assert_eq!(disk(0).size, DEFAULT_CACHE_DISK_SIZE);
        assert_eq!(disk(1).path, std::path::Path::new("/var/cache/w"));
        assert_eq!(disk(1).size, 2 << 30);
    }

    #[test]
    fn elasticsearch_services() {
        let errs = errors(&format!(
            "{BASE}services:\n  a: {{ elasticsearch: {{ discovery: {{ refresh: 5s }} }} }}\n  \
             b: {{ servers: [{{ url: \"http://x:1\" }}], elasticsearch: {{ hosts: [\"http://x:9200\"] }} }}\n  \
             c: {{ elasticsearch: {{ hosts: [\"ftp://x\"] }} }}\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].contains("`elasticsearch` needs `hosts`"),
            "{errs:?}"
        );
        assert!(
            errs[1].contains("has both `servers` and `elasticsearch`"),
            "{errs:?}"
        );
        assert!(
            errs[2].contains("`ftp://x` is not a server URL"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://127.0.0.1:9200\"], discovery: {{ roles: [data] }} }} }}\n  \
                 fixed: {{ elasticsearch: {{ hosts: [\"http://a:9200\", \"http://b:9200\"], discovery: {{ enabled: false }} }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let es = &cfg.services[0];
        assert_eq!(es.servers[0].url, "http://127.0.0.1:9200");
        let discovery = es
            .elasticsearch
            .as_ref()
            .unwrap()
            .discovery
            .clone()
            .unwrap();
        assert_eq!(discovery.refresh, DEFAULT_ES_REFRESH);
        assert_eq!(discovery.roles, ["data"]);
        assert_eq!(cfg.services[1].servers.len(), 2);
        assert_eq!(
            cfg.services[1].elasticsearch.as_ref().unwrap().discovery,
            None
        );
        assert_eq!(es.elasticsearch.as_ref().unwrap().bulk, EsBulk::default());
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], bulk: {{ route: none, max_body: 1MiB, batch: false }} }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let bulk = &cfg.services[0].elasticsearch.as_ref().unwrap().bulk;
        assert_eq!(
            (bulk.route, bulk.max_body, bulk.batch),
            (BulkRoute::None, 1 << 20, false)
        );
        let errs = errors(&format!(
            "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], bulk: {{ route: shard }} }} }}\n"
        ));
        assert!(
            errs[0].contains("unknown bulk route `shard`; expected `node` or `none`"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], spool: {{ path: data/spool, max_size: 1GiB, fsync: never }} }} }}\n"
            ),
            "conf/t.yaml",
        )
        .unwrap();
        let spool = cfg.services[0]
            .elasticsearch
            .as_ref()
            .unwrap()
            .spool
            .clone()
            .unwrap();
        assert_eq!(spool.path, std::path::Path::new("conf/data/spool"));
        assert_eq!((spool.max_size, spool.fsync), (1 << 30, false));
        let errs = errors(&format!(
            "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], spool: {{ fsync: always }} }} }}\n"
        ));
        assert!(errs[0].contains("`spool` needs a `path`"), "{errs:?}");
        assert!(errs[1].contains("unknown fsync mode `always`"), "{errs:?}");
    }

    #[test]
    fn elasticsearch_credentials() {
        let authorization = |auth: &str| {
            let cfg = load_str(
                &format!(
                    "{BASE}services:\n  es:\n    elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {auth} }}\n    health_check: {{ path: /_cluster/health }}\n"
                ),
                "t.yaml",
            )
            .unwrap();
            let service = &cfg.services[0];
            let value = service
                .elasticsearch
                .as_ref()
                .unwrap()
                .authorization
                .clone();
            let probe = service.health_check.as_ref().unwrap().headers.clone();
            assert_eq!(
                probe,
                [("authorization".to_string(), value.clone().unwrap())]
            );
            value
        };
        assert_eq!(
            authorization("{ basic: { username: elastic, password: \"p:w\" } }").as_deref(),
            Some("Basic ZWxhc3RpYzpwOnc=")
        );
        assert_eq!(
            authorization(
                "{ api_key: VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw== }"
            )
            .as_deref(),
            Some("ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==")
        );
        let errs = errors(&format!(
            "{BASE}services:\n  a: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ basic: {{ username: x }}, api_key: k }} }} }}\n  \
             b: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ basic: {{ username: \"a:b\", password: p }} }} }} }}\n  \
             c: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ basic: {{ password: p }} }} }} }}\n  \
             d: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ api_key: \"two words\" }} }} }}\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].contains("exactly one of `basic"), "{errs:?}");
        assert!(errs[1].contains("cannot hold `:`"), "{errs:?}");
        assert!(
            errs[2].contains("`auth.basic` needs `username`"),
            "{errs:?}"
        );
        assert!(errs[3].contains("`encoded` form"), "{errs:?}");
        assert!(errs[3].starts_with("t.yaml:"), "{errs:?}");
    }

    #[test]
    fn elasticsearch_search_cache() {
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], search_cache: {{ ttl: 10s }} }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let es = cfg.services[0].elasticsearch.as_ref().unwrap();
        assert_eq!(
            es.search_cache,
            Some(EsSearchCache {
                ttl: Duration::from_secs(10),
                max_entries: DEFAULT_ES_SEARCH_CACHE_ENTRIES,
                max_entry_size: 1 << 20,
            })
        );
        let errs = errors(&format!(
            "{BASE}services:\n  a: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], search_cache: {{ max_entries: 5 }} }} }}\n  \
             b: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], search_cache: {{ ttl: 1s, max_entries: 0 }} }} }}\n"
        ));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("`search_cache` needs a `ttl`"), "{errs:?}");
        assert!(errs[1].contains("`search_cache.max_entries`"), "{errs:?}");
    }

    #[test]
    fn upstream_protocols_match_their_servers() {
        let services =
            "services:\n  s:\n    protocol: h3\n    servers: [{ url: \"http://a:1\" }]\n  \
            t:\n    protocol: h2\n    servers: [{ url: \"http://a:1\" }]\n  \
            u:\n    protocol: h2c\n    servers: [{ url: \"https://a:1\" }]\n  \
            v:\n    http2: { max_concurrent_streams: 4 }\n    servers: [{ url: \"http://a:1\" }]\n";
        let errs = errors(&format!("{BASE}{services}"));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(
            errs[0].starts_with("t.yaml:5:15: unknown protocol `h3`"),
            "{errs:?}"
        );
        assert!(
            errs[1].contains("`protocol: h2` is HTTP/2 over TLS, but http://a:1"),
            "{errs:?}"
        );
        assert!(
            errs[2].contains("`protocol: h2c` is cleartext HTTP/2, but https://a:1"),
            "{errs:?}"
        );
        assert!(
            errs[3].starts_with("t.yaml:14:12: `http2` applies to `protocol: h2` or `h2c`"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!("{BASE}services:\n  g:\n    protocol: h2c\n    http2: {{ max_concurrent_streams: 4 }}\n    servers: [{{ url: \"http://a:1\" }}]\n"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.services[0].protocol, UpstreamProtocol::H2c);
        assert_eq!(cfg.services[0].http2.max_concurrent_streams, 4);
    }

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
    fn retry_budget_per_try_and_request_timeouts() {
        let cfg = load_str(
            &format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    retry: {{ per_try_timeout: 250ms, budget: 20% }}\n    timeouts: {{ request: 3s }}\n"),
            "t.yaml",
        )
        .unwrap();
        let s = &cfg.services[0];
        let retry = s.retry.as_ref().unwrap();
        assert_eq!(retry.per_try_timeout, Some(Duration::from_millis(250)));
        assert_eq!(retry.budget, Some(0.2));
        assert_eq!(s.timeouts.request, Some(Duration::from_secs(3)));
        assert_eq!(s.timeouts.websocket_idle, None);
        let errs = errors(&format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    retry: {{ budget: 2 }}\n"));
        assert!(
            errs[0].contains("`retry.budget` must be a share"),
            "{errs:?}"
        );
    }

    #[test]
    fn websocket_idle_timeout_and_its_error() {
        let service = |timeouts: &str| {
            format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    timeouts: {{ {timeouts} }}\n")
        };
        let cfg = load_str(&service("websocket_idle: 5m"), "t.yaml").unwrap();
        assert_eq!(
            cfg.services[0].timeouts.websocket_idle,
            Some(Duration::from_secs(300))
        );
        let errs = errors(&service("read: 1s, websocket_idle: forever"));
        assert!(
            errs[0].starts_with("t.yaml:6:43: `timeouts.websocket_idle` must be a duration"),
            "{errs:?}"
        );
    }

    #[test]
    fn health_and_retry_settings_and_their_errors() {
        let cfg = load_str(
            &format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    health_check: {{ path: /healthz, interval: 1s, expect_status: \"200, 204-299\" }}\n    passive_health: {{ max_failures: 5 }}\n    retry: {{ attempts: 3, on: [connect_failure, 503] }}\n"),
            "t.yaml",
        )
        .unwrap();
        let s = &cfg.services[0];
        let check = s.health_check.as_ref().unwrap();
        assert_eq!(check.path, "/healthz");
        assert_eq!(check.interval, Duration::from_secs(1));
        assert_eq!(check.expect_status, vec![(200, 200), (204, 299)]);
        assert_eq!((check.healthy_threshold, check.unhealthy_threshold), (2, 3));
        assert_eq!(s.passive_health.unwrap().max_failures, 5);
        assert_eq!(s.passive_health.unwrap().eject, Duration::from_secs(30));
        let retry = s.retry.as_ref().unwrap();
        assert_eq!(retry.attempts, 3);
        assert_eq!(
            retry.on,
            vec![RetryOn::ConnectFailure, RetryOn::Status(503)]
        );
        let errs = errors(&format!("{BASE}services:\n  s:\n    servers: []\n    health_check: {{ expect_status: \"2xx\" }}\n    retry: {{ on: [404, sometimes] }}\n"));
        assert!(
            errs.iter().any(|e| e.starts_with("t.yaml:6:")
                && e.contains("`expect_status` must be statuses or ranges")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e
                    .contains("`on` takes connect_failure, reset or a 5xx status, found `404`")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("found `sometimes`")),
            "{errs:?}"
        );
    }

    #[test]
    fn unknown_key_names_key_and_allowed_keys() {
        let errs = errors(&format!("{BASE}servr: {{}}\n"));
        assert_eq!(
            errs,
            vec!["t.yaml:3:1: unknown key `servr` in the top level; expected one of: server, entrypoints, routers, services, middlewares, tcp, udp, caches"]
        );
        let errs = errors(&format!(
            "{BASE}services:\n  s:\n    servers: []\n    lb: x\n"
        ));
        assert!(
            errs[0].starts_with(
                "t.yaml:6:5: unknown key `lb` in service `s`; expected one of: servers,"
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn missing_references_are_named() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    entrypoints: [websecure]\n    rule: \"Path(`/`)\"\n    middlewares: [nope]\n    service: api\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert_eq!(errs[0], "t.yaml:5:19: router `r` names entrypoint `websecure`, which is not defined; defined: web");
        assert_eq!(
            errs[1],
            "t.yaml:7:19: router `r` names middleware `nope`, which is not defined; defined: none"
        );
        assert_eq!(
            errs[2],
            "t.yaml:8:14: router `r` names service `api`, which is not defined; defined: none"
        );
    }

    #[test]
    fn tcp_and_udp_routers_name_what_is_defined() {
        let yaml = "entrypoints:\n  db: { address: \"127.0.0.1:0\" }\n  dns: { address: \"127.0.0.1:0/udp\" }\n\
            tcp:\n  services:\n    pg: { servers: [{ address: \"127.0.0.1:5432\" }] }\n\
            \x20 routers:\n    t: { entrypoints: [dbx], rule: \"HostSNI(`*`)\", service: pgx }\n\
            udp:\n  services:\n    ns: { servers: [{ address: \"127.0.0.1:53\" }] }\n\
            \x20 routers:\n    u: { entrypoints: [dnsx], service: nsx }\n";
        let errs = errors(yaml);
        let expected = [
            "tcp router `t` names entrypoint `dbx`, which is not defined; defined: db, dns",
            "tcp router `t` names tcp service `pgx`, which is not defined; defined: pg",
            "udp router `u` names entrypoint `dnsx`, which is not defined; defined: db, dns",
            "udp router `u` names udp service `nsx`, which is not defined; defined: ns",
        ];
        assert_eq!(errs.len(), expected.len(), "{errs:?}");
        for (err, want) in errs.iter().zip(expected) {
            assert!(err.ends_with(want), "{err} does not end with {want}");
        }
    }

    #[test]
    fn rule_errors_point_inside_the_rule() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    rule: \"Host(`a`) && Paht(`/`)\"\n    respond: {{}}\n"
        ));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("t.yaml:5:25: invalid rule: unknown matcher `Paht`"),
            "{errs:?}"
        );
    }

    #[test]
    fn every_error_is_reported() {
        let errs = errors(&format!(
            "{BASE}server:\n  workers: many\n  graceful_timeout: soon\nservices:\n  s:\n    servers: [{{ url: \"ftp://x\" }}]\n    load_balancer: fastest\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:4:12:"));
        assert!(errs[1].starts_with("t.yaml:5:21:"));
        assert!(errs[2].contains("ftp://x"));
        assert!(errs[3].contains("unknown load balancer `fastest`"));
    }

    #[test]
    fn exactly_one_action() {
        let errs = errors(&format!("{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    respond: {{}}\n    redirect: {{ to: /x }}\n"));
        assert!(
            errs[0].starts_with("t.yaml:7:15: router `r` must have exactly one action"),
            "{errs:?}"
        );
        let errs = errors(&format!("{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n"));
        assert!(errs[0].contains("exactly one action"));
    }

    #[test]
    fn yaml_syntax_errors_have_positions() {
        let errs = errors("entrypoints:\n  web: [\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("t.yaml:3:"), "{errs:?}");
    }

    #[test]
    fn env_expansion() {
        let env = |n: &str| (n == "PORT").then(|| "9000".to_string());
        assert_eq!(
            expand_env("127.0.0.1:${PORT}", &env).unwrap(),
            "127.0.0.1:9000"
        );
        assert_eq!(expand_env("${HOST:-localhost}", &env).unwrap(), "localhost");
        assert_eq!(expand_env("$${PORT}", &env).unwrap(), "${PORT}");
        assert!(expand_env("${MISSING}", &env)
            .unwrap_err()
            .contains("`MISSING` is not set"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("10GB"), Some(10 << 30));
        assert_eq!(parse_size("1.5MiB"), None);
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("99999999999GiB"), None);
    }

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

    #[test]
    fn urls() {
        assert_eq!(
            parse_http_url("http://127.0.0.1:9000"),
            Some((false, "127.0.0.1".into(), 9000))
        );
        assert_eq!(
            parse_http_url("http://backend/"),
            Some((false, "backend".into(), 80))
        );
        assert_eq!(
            parse_http_url("http://[::1]:81"),
            Some((false, "::1".into(), 81))
        );
        assert_eq!(parse_http_url("https://x"), Some((true, "x".into(), 443)));
        assert_eq!(parse_http_url("ftp://x"), None);
        assert_eq!(parse_http_url("http://x/path"), None);
    }
}
