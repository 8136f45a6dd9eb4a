//! `weir import traefik FILE`: a Traefik dynamic configuration (the file provider's YAML or
//! TOML) turned into weir's YAML: HTTP routers, services and middlewares, TCP and UDP routers
//! and services, and certificates; with a note for each thing it could not carry over.
//!
//! weir's keys are Traefik's in snake_case, so most of a middleware converts key by key; the
//! few that differ in shape (`headers`' custom headers, `compress`, `stripPrefix`…) are mapped
//! here one by one. Entrypoints belong to Traefik's static configuration, so each one the
//! routers name gets a placeholder address, said in a note.

use weir_config::yaml::{self, Value};

/// A configuration tree read from YAML or TOML, each node with where it was written (YAML
/// only: TOML has no positions in the `toml` crate's values).
#[derive(Debug, Clone)]
enum Tree {
    Null,
    /// A scalar's text and whether it is a string (quoted, or a TOML string).
    Scalar(String, bool),
    List(Vec<Tree>),
    Map(Vec<(String, Tree)>),
}

impl Tree {
    fn get(&self, key: &str) -> Option<&Tree> {
        match self {
            Tree::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn entries(&self) -> &[(String, Tree)] {
        match self {
            Tree::Map(entries) => entries,
            _ => &[],
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            Tree::Scalar(text, _) => Some(text),
            _ => None,
        }
    }

    fn string(text: impl Into<String>) -> Tree {
        Tree::Scalar(text.into(), true)
    }

    fn items(&self) -> Vec<&Tree> {
        match self {
            Tree::List(items) => items.iter().collect(),
            Tree::Null => Vec::new(),
            other => vec![other],
        }
    }
}

/// The source format, from the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Toml,
}

impl Format {
    pub fn of(path: &str) -> Format {
        match path.rsplit('.').next() {
            Some("toml") => Format::Toml,
            _ => Format::Yaml,
        }
    }
}

/// The converted configuration, and what could not be converted.
pub struct Imported {
    pub yaml: String,
    pub notes: Vec<String>,
}

/// `weir import traefik FILE`: the converted YAML on stdout, the notes and what `weir check`
/// would say of the result on stderr. Fails only when the file cannot be read or parsed.
pub fn run(path: &str) -> std::process::ExitCode {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{path}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let imported = match import(&text, Format::of(path)) {
        Ok(imported) => imported,
        Err(e) => {
            eprintln!("{path}:{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    print!("{}", imported.yaml);
    for note in &imported.notes {
        eprintln!("{path}: {note}");
    }
    // As `weir check` would read it, saved beside the Traefik file (relative paths alike).
    let beside = std::path::Path::new(path).with_file_name("weir.yaml");
    if let Err(errors) = weir_config::load_str(&imported.yaml, &beside.to_string_lossy()) {
        for e in errors {
            eprintln!("check of the result: {e}");
        }
    }
    eprintln!(
        "{path}: converted; {} note{}",
        imported.notes.len(),
        if imported.notes.len() == 1 { "" } else { "s" }
    );
    std::process::ExitCode::SUCCESS
}

/// Converts the Traefik dynamic configuration `text`.
pub fn import(text: &str, format: Format) -> Result<Imported, String> {
    let tree = match format {
        Format::Yaml => {
            let node = yaml::parse(text)
                .map_err(|e| format!("{}:{}: {}", e.pos.line, e.pos.column, e.message))?;
            from_yaml(&node)
        }
        Format::Toml => {
            let value: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
            from_toml(&toml::Value::Table(value))
        }
    };
    let mut convert = Converter::default();
    convert.document(&tree);
    Ok(Imported {
        yaml: emit(&convert.finish()),
        notes: convert.notes,
    })
}

fn from_yaml(node: &yaml::Node) -> Tree {
    match &node.value {
        Value::Null => Tree::Null,
        Value::Scalar { text, quoted } => Tree::Scalar(text.clone(), *quoted),
        Value::Seq(items) => Tree::List(items.iter().map(from_yaml).collect()),
        Value::Map(entries) => Tree::Map(
            entries
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), from_yaml(v))))
                .collect(),
        ),
    }
}

fn from_toml(value: &toml::Value) -> Tree {
    match value {
        toml::Value::String(s) => Tree::string(s.as_str()),
        toml::Value::Integer(n) => Tree::Scalar(n.to_string(), false),
        toml::Value::Float(f) => Tree::Scalar(f.to_string(), false),
        toml::Value::Boolean(b) => Tree::Scalar(b.to_string(), false),
        toml::Value::Datetime(d) => Tree::string(d.to_string()),
        toml::Value::Array(items) => Tree::List(items.iter().map(from_toml).collect()),
        toml::Value::Table(table) => Tree::Map(
            table
                .iter()
                .map(|(k, v)| (k.clone(), from_toml(v)))
                .collect(),
        ),
    }
}

/// `camelCase` → `snake_case`, a run of capitals as one word (`excludedIPs` → `excluded_ips`,
/// `ipv6Subnet` → `ipv6_subnet`).
fn snake(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let mut out = String::with_capacity(key.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let after_lower = i > 0 && !chars[i - 1].is_ascii_uppercase() && chars[i - 1] != '_';
            let starts_word = i > 0
                && chars[i - 1].is_ascii_uppercase()
                && chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase())
                && chars.get(i + 2).is_some();
            if after_lower || starts_word {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every key of a mapping in snake_case, all the way down (values untouched).
fn snake_keys(tree: &Tree) -> Tree {
    match tree {
        Tree::Map(entries) => Tree::Map(
            entries
                .iter()
                .map(|(k, v)| (snake(k), snake_keys(v)))
                .collect(),
        ),
        Tree::List(items) => Tree::List(items.iter().map(snake_keys).collect()),
        other => other.clone(),
    }
}

/// A name without Traefik's `@provider` suffix.
fn bare(name: &str) -> String {
    name.split('@').next().unwrap_or(name).to_string()
}

#[derive(Default)]
struct Converter {
    notes: Vec<String>,
    routers: Vec<(String, Tree)>,
    services: Vec<(String, Tree)>,
    middlewares: Vec<(String, Tree)>,
    tcp_routers: Vec<(String, Tree)>,
    tcp_services: Vec<(String, Tree)>,
    udp_routers: Vec<(String, Tree)>,
    udp_services: Vec<(String, Tree)>,
    /// Entrypoints the routers name, with whether a UDP router does and whether an HTTP or TCP
    /// router asks for TLS there.
    entrypoints: Vec<(String, bool, bool)>,
    certificates: Vec<Tree>,
}

impl Converter {
    fn note(&mut self, at: &str, what: impl std::fmt::Display) {
        self.notes.push(format!("{at}: {what}"));
    }

    fn document(&mut self, tree: &Tree) {
        for (section, body) in tree.entries() {
            match section.as_str() {
                "http" => self.http(body),
                "tcp" => self.tcp(body),
                "udp" => self.udp(body),
                "tls" => self.tls(body),
                other => self.note(
                    other,
                    "not a part of Traefik's dynamic configuration weir converts",
                ),
            }
        }
    }

    fn uses_entrypoints(&mut self, at: &str, router: &Tree, udp: bool, tls: bool) -> Option<Tree> {
        let names: Vec<String> = router
            .get("entryPoints")
            .map(|e| {
                e.items()
                    .iter()
                    .filter_map(|t| t.text())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if names.is_empty() && (udp || tls) {
            self.note(
                at,
                "names no entryPoints: it will serve every entrypoint in weir",
            );
        }
        for name in &names {
            match self.entrypoints.iter_mut().find(|(n, _, _)| n == name) {
                Some(known) => {
                    known.1 |= udp;
                    known.2 |= tls;
                }
                None => self.entrypoints.push((name.clone(), udp, tls)),
            }
        }
        (!names.is_empty()).then(|| Tree::List(names.into_iter().map(Tree::string).collect()))
    }

    fn http(&mut self, body: &Tree) {
        for (part, items) in body.entries() {
            match part.as_str() {
                "routers" => {
                    for (name, router) in items.entries() {
                        self.http_router(name, router);
                    }
                }
                "services" => {
                    for (name, service) in items.entries() {
                        if let Some(converted) = self.http_service(name, service) {
                            self.services.push((name.clone(), converted));
                        }
                    }
                }
                "middlewares" => {
                    for (name, middleware) in items.entries() {
                        if let Some(converted) = self.middleware(name, middleware) {
                            self.middlewares.push((name.clone(), converted));
                        }
                    }
                }
                other => self.note(
                    &format!("http.{other}"),
                    "not converted (weir has no such part)",
                ),
            }
        }
    }

    fn http_router(&mut self, name: &str, router: &Tree) {
        let at = format!("http.routers.{name}");
        let mut out = Vec::new();
        let tls = router.get("tls").is_some();
        if let Some(eps) = self.uses_entrypoints(&at, router, false, tls) {
            out.push(("entrypoints".to_string(), eps));
        }
        for (key, value) in router.entries() {
            match key.as_str() {
                "rule" => out.push(("rule".into(), value.clone())),
                "priority" => out.push(("priority".into(), value.clone())),
                "entryPoints" => {}
                "middlewares" => {
                    let names: Vec<Tree> = value
                        .items()
                        .iter()
                        .filter_map(|t| t.text())
                        .map(|n| Tree::string(bare(n)))
                        .collect();
                    out.push(("middlewares".into(), Tree::List(names)));
                }
                "service" => {
                    let service = value.text().unwrap_or_default();
                    if service.ends_with("@internal") {
                        self.note(&at, format!("service `{service}` is Traefik's own; the router is left out (weir's admin API and dashboard are `server.admin`)"));
                        return;
                    }
                    out.push(("service".into(), Tree::string(bare(service))));
                }
                "tls" => {
                    if value.get("certResolver").is_some() {
                        self.note(&at, "tls.certResolver (ACME) is not converted: give the entrypoint `tls.certificates`");
                    }
                    if value.get("options").is_some() {
                        self.note(&at, "tls.options not converted: set `min_version` and friends on the entrypoint's `tls`");
                    }
                }
                "observability" => self.note(&at, "observability not converted (weir's `access_log: false` and `tracing` are per router)"),
                other => self.note(&format!("{at}.{other}"), "not converted"),
            }
        }
        self.routers.push((name.to_string(), Tree::Map(out)));
    }

    fn http_service(&mut self, name: &str, service: &Tree) -> Option<Tree> {
        let at = format!("http.services.{name}");
        let Some(lb) = service.get("loadBalancer") else {
            let kind = service
                .entries()
                .first()
                .map(|(k, _)| k.as_str())
                .unwrap_or("?");
            self.note(&at, format!("a `{kind}` service is not converted: weir's services balance over servers (weights on the servers)"));
            return None;
        };
        let mut out = Vec::new();
        for (key, value) in lb.entries() {
            match key.as_str() {
                "servers" => {
                    let servers: Vec<Tree> = value.items().iter().map(|s| {
                        let mut server = Vec::new();
                        if let Some(url) = s.get("url") {
                            server.push(("url".to_string(), url.clone()));
                        }
                        if let Some(weight) = s.get("weight") {
                            server.push(("weight".to_string(), weight.clone()));
                        }
                        Tree::Map(server)
                    }).collect();
                    out.push(("servers".into(), Tree::List(servers)));
                }
                "passHostHeader" => out.push(("pass_host_header".into(), value.clone())),
                "healthCheck" => {
                    let mut check = Vec::new();
                    for (k, v) in value.entries() {
                        match k.as_str() {
                            "path" | "interval" | "timeout" | "headers" => {
                                check.push((k.clone(), v.clone()))
                            }
                            "status" => check.push(("expect_status".into(), v.clone())),
                            other => self.note(&format!("{at}.loadBalancer.healthCheck.{other}"), "not converted (weir checks each server at its own address)"),
                        }
                    }
                    out.push(("health_check".into(), Tree::Map(check)));
                }
                "sticky" => self.note(&format!("{at}.loadBalancer.sticky"), "not converted: weir keeps a client on one server with `load_balancer: consistent_hash` and `hash_key` (`client_ip`, or `cookie:NAME` for a cookie the application sets)"),
                other => self.note(&format!("{at}.loadBalancer.{other}"), "not converted"),
            }
        }
        Some(Tree::Map(out))
    }

    fn middleware(&mut self, name: &str, middleware: &Tree) -> Option<Tree> {
        let at = format!("http.middlewares.{name}");
        let (kind, body) = middleware.entries().first()?;
        let at = format!("{at}.{kind}");
        let converted = match kind.as_str() {
            "addPrefix" => ("add_prefix", body.get("prefix")?.clone()),
            "stripPrefix" => {
                if body.get("forceSlash").is_some() {
                    self.note(
                        &at,
                        "forceSlash not converted (weir always leaves at least `/`)",
                    );
                }
                ("strip_prefix", body.get("prefixes")?.clone())
            }
            "redirectScheme" => {
                let mut out = Vec::new();
                for (k, v) in body.entries() {
                    match k.as_str() {
                        "scheme" | "permanent" => out.push((k.clone(), v.clone())),
                        other => self.note(
                            &format!("{at}.{other}"),
                            "not converted (weir redirects to the scheme's default port)",
                        ),
                    }
                }
                ("redirect_scheme", Tree::Map(out))
            }
            "headers" => ("headers", self.headers(&at, body)),
            "compress" => ("compress", self.compress(&at, body)),
            "ipWhiteList" | "ipAllowList" => ("ip_allow_list", snake_keys(body)),
            "retry" => {
                self.note(&at, "a retry middleware is not converted: weir retries per service (`services.NAME.retry.attempts`)");
                return None;
            }
            "stripPrefixRegex" | "replacePath" | "replacePathRegex" | "redirectRegex" | "chain"
            | "basicAuth" | "digestAuth" | "buffering" | "rateLimit" | "inFlightReq"
            | "circuitBreaker" | "grpcWeb" | "errors" | "forwardAuth" => {
                let kind = snake(kind);
                let mut body = snake_keys(body);
                if kind == "chain" {
                    body = self.chain_names(body);
                }
                if kind == "errors" {
                    if let Tree::Map(entries) = &mut body {
                        for (k, v) in entries.iter_mut() {
                            if k == "service" {
                                *v = Tree::string(bare(v.text().unwrap_or_default()));
                            }
                        }
                    }
                }
                return Some(Tree::Map(vec![(kind, body)]));
            }
            other => {
                self.note(&at, format!("the `{other}` middleware has no counterpart in weir; routers that name `{name}` will need another way"));
                return None;
            }
        };
        Some(Tree::Map(vec![(converted.0.to_string(), converted.1)]))
    }

    fn chain_names(&self, body: Tree) -> Tree {
        let Tree::Map(entries) = body else {
            return body;
        };
        Tree::Map(
            entries
                .into_iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), &v) {
                        ("middlewares", Tree::List(items)) => Tree::List(
                            items
                                .iter()
                                .filter_map(|t| t.text())
                                .map(|n| Tree::string(bare(n)))
                                .collect(),
                        ),
                        _ => v,
                    };
                    (k, v)
                })
                .collect(),
        )
    }

    /// Traefik's `customRequestHeaders` / `customResponseHeaders` (an empty value removes the
    /// header) become weir's `request` / `response` `set` and `remove`; the rest of the keys
    /// are the same in snake_case.
    fn headers(&mut self, at: &str, body: &Tree) -> Tree {
        let mut out = Vec::new();
        for (key, value) in body.entries() {
            let side = match key.as_str() {
                "customRequestHeaders" => "request",
                "customResponseHeaders" => "response",
                "contentSecurityPolicy"
                | "referrerPolicy"
                | "permissionsPolicy"
                | "browserXssFilter"
                | "customBrowserXSSValue"
                | "publicKey"
                | "contentSecurityPolicyReportOnly"
                | "featurePolicy"
                | "isDevelopment"
                | "sslRedirect"
                | "sslTemporaryRedirect"
                | "sslHost"
                | "sslForceHost" => {
                    self.note(
                        &format!("{at}.{key}"),
                        "not converted: set the header with `response: { set: { ... } }`",
                    );
                    continue;
                }
                _ => {
                    out.push((snake(key), value.clone()));
                    continue;
                }
            };
            let mut set = Vec::new();
            let mut remove = Vec::new();
            for (name, v) in value.entries() {
                match v.text() {
                    Some("") | None => remove.push(Tree::string(name.as_str())),
                    Some(_) => set.push((name.clone(), v.clone())),
                }
            }
            let mut ops = Vec::new();
            if !set.is_empty() {
                ops.push(("set".to_string(), Tree::Map(set)));
            }
            if !remove.is_empty() {
                ops.push(("remove".to_string(), Tree::List(remove)));
            }
            out.push((side.to_string(), Tree::Map(ops)));
        }
        Tree::Map(out)
    }

    fn compress(&mut self, at: &str, body: &Tree) -> Tree {
        let mut out = Vec::new();
        for (key, value) in body.entries() {
            match key.as_str() {
                "minResponseBodyBytes" => out.push(("min_length".to_string(), value.clone())),
                "includedContentTypes" => out.push(("types".to_string(), value.clone())),
                "encodings" => out.push(("algorithms".to_string(), value.clone())),
                other => self.note(&format!("{at}.{other}"), "not converted (weir compresses the `types` it is given, text and JSON by default)"),
            }
        }
        Tree::Map(out)
    }

    fn tcp(&mut self, body: &Tree) {
        for (name, router) in body.get("routers").map(Tree::entries).unwrap_or_default() {
            let at = format!("tcp.routers.{name}");
            let tls = router.get("tls");
            let terminates =
                tls.is_some_and(|t| t.get("passthrough").and_then(Tree::text) != Some("true"));
            let mut out = Vec::new();
            if let Some(eps) = self.uses_entrypoints(&at, router, false, terminates) {
                out.push(("entrypoints".to_string(), eps));
            }
            for (key, value) in router.entries() {
                match key.as_str() {
                    "rule" | "priority" => out.push((key.clone(), value.clone())),
                    "service" => out.push((
                        "service".into(),
                        Tree::string(bare(value.text().unwrap_or_default())),
                    )),
                    "entryPoints" => {}
                    "tls" => {
                        if let Some(p) = value.get("passthrough") {
                            out.push((
                                "tls".into(),
                                Tree::Map(vec![("passthrough".into(), p.clone())]),
                            ));
                        }
                    }
                    other => self.note(&format!("{at}.{other}"), "not converted"),
                }
            }
            self.tcp_routers.push((name.clone(), Tree::Map(out)));
        }
        for (name, service) in body.get("services").map(Tree::entries).unwrap_or_default() {
            let at = format!("tcp.services.{name}");
            let Some(lb) = service.get("loadBalancer") else {
                self.note(&at, "only `loadBalancer` services are converted");
                continue;
            };
            let mut out = Vec::new();
            for (key, value) in lb.entries() {
                match key.as_str() {
                    "servers" => out.push(("servers".into(), addresses(value))),
                    "proxyProtocol" => out.push(("proxy_protocol".into(), snake_keys(value))),
                    other => self.note(&format!("{at}.loadBalancer.{other}"), "not converted"),
                }
            }
            self.tcp_services.push((name.clone(), Tree::Map(out)));
        }
    }

    fn udp(&mut self, body: &Tree) {
        for (name, router) in body.get("routers").map(Tree::entries).unwrap_or_default() {
            let at = format!("udp.routers.{name}");
            let mut out = Vec::new();
            if let Some(eps) = self.uses_entrypoints(&at, router, true, false) {
                out.push(("entrypoints".to_string(), eps));
            }
            if let Some(service) = router.get("service").and_then(Tree::text) {
                out.push(("service".into(), Tree::string(bare(service))));
            }
            self.udp_routers.push((name.clone(), Tree::Map(out)));
        }
        for (name, service) in body.get("services").map(Tree::entries).unwrap_or_default() {
            let at = format!("udp.services.{name}");
            match service.get("loadBalancer").and_then(|lb| lb.get("servers")) {
                Some(servers) => self.udp_services.push((
                    name.clone(),
                    Tree::Map(vec![("servers".into(), addresses(servers))]),
                )),
                None => self.note(&at, "only `loadBalancer` services are converted"),
            }
        }
    }

    fn tls(&mut self, body: &Tree) {
        for (key, value) in body.entries() {
            match key.as_str() {
                "certificates" => {
                    for cert in value.items() {
                        let (Some(file), Some(key)) = (cert.get("certFile"), cert.get("keyFile"))
                        else {
                            self.note(
                                "tls.certificates",
                                "an entry without certFile and keyFile is left out",
                            );
                            continue;
                        };
                        self.certificates.push(Tree::Map(vec![
                            ("cert".into(), file.clone()),
                            ("key".into(), key.clone()),
                        ]));
                    }
                }
                other => self.note(
                    &format!("tls.{other}"),
                    "not converted: set `min_version` and the certificates on each TLS entrypoint",
                ),
            }
        }
    }

    /// The whole weir document.
    fn finish(&mut self) -> Tree {
        let mut doc = Vec::new();
        if !self.entrypoints.is_empty() {
            self.note("entrypoints", "Traefik's entrypoints are in its static configuration: check the addresses given here");
        }
        let mut entrypoints = Vec::new();
        let mut next_port = 8000;
        for (name, udp, tls) in self.entrypoints.clone() {
            let port = match (name.as_str(), udp) {
                ("web" | "http", false) => 80,
                ("websecure" | "https", false) => 443,
                _ => {
                    next_port += 1;
                    next_port
                }
            };
            let address = match udp {
                true => format!(":{port}/udp"),
                false => format!(":{port}"),
            };
            let mut ep = vec![("address".to_string(), Tree::string(address))];
            if tls && !udp {
                if self.certificates.is_empty() {
                    self.note(&format!("entrypoints.{name}"), "routers there use TLS, but the file has no tls.certificates: add them to this entrypoint's `tls`");
                } else {
                    ep.push((
                        "tls".into(),
                        Tree::Map(vec![(
                            "certificates".into(),
                            Tree::List(self.certificates.clone()),
                        )]),
                    ));
                }
            }
            entrypoints.push((name, Tree::Map(ep)));
        }
        if entrypoints.is_empty() {
            entrypoints.push((
                "web".into(),
                Tree::Map(vec![("address".into(), Tree::string(":80"))]),
            ));
        }
        doc.push(("entrypoints".to_string(), Tree::Map(entrypoints)));
        for (key, part) in [
            ("routers", std::mem::take(&mut self.routers)),
            ("services", std::mem::take(&mut self.services)),
            ("middlewares", std::mem::take(&mut self.middlewares)),
        ] {
            if !part.is_empty() {
                doc.push((key.to_string(), Tree::Map(part)));
            }
        }
        for (key, routers, services) in [
            (
                "tcp",
                std::mem::take(&mut self.tcp_routers),
                std::mem::take(&mut self.tcp_services),
            ),
            (
                "udp",
                std::mem::take(&mut self.udp_routers),
                std::mem::take(&mut self.udp_services),
            ),
        ] {
            let mut section = Vec::new();
            if !routers.is_empty() {
                section.push(("routers".to_string(), Tree::Map(routers)));
            }
            if !services.is_empty() {
                section.push(("services".to_string(), Tree::Map(services)));
            }
            if !section.is_empty() {
                doc.push((key.to_string(), Tree::Map(section)));
            }
        }
        Tree::Map(doc)
    }
}

/// Traefik's `servers: [{ address }]`, as weir writes them.
fn addresses(servers: &Tree) -> Tree {
    Tree::List(
        servers
            .items()
            .iter()
            .filter_map(|s| s.get("address"))
            .map(|a| Tree::Map(vec![("address".into(), a.clone())]))
            .collect(),
    )
}

/// The tree as block-style YAML; strings double-quoted (JSON's escapes are YAML's).
fn emit(tree: &Tree) -> String {
    let mut out = String::new();
    emit_into(&mut out, tree, 0);
    out
}

fn emit_into(out: &mut String, tree: &Tree, indent: usize) {
    let pad = " ".repeat(indent);
    match tree {
        Tree::Map(entries) => {
            for (key, value) in entries {
                out.push_str(&pad);
                out.push_str(&key_text(key));
                out.push(':');
                match value {
                    Tree::Map(inner) if !inner.is_empty() => {
                        out.push('\n');
                        emit_into(out, value, indent + 2);
                    }
                    Tree::List(items) if !items.is_empty() => {
                        out.push('\n');
                        emit_into(out, value, indent + 2);
                    }
                    other => {
                        out.push(' ');
                        out.push_str(&inline(other));
                        out.push('\n');
                    }
                }
            }
        }
        Tree::List(items) => {
            for item in items {
                out.push_str(&pad);
                out.push_str("- ");
                match item {
                    Tree::Map(entries) if !entries.is_empty() => {
                        let mut inner = String::new();
                        emit_into(&mut inner, item, indent + 2);
                        out.push_str(inner.trim_start());
                    }
                    other => {
                        out.push_str(&inline(other));
                        out.push('\n');
                    }
                }
            }
        }
        other => {
            out.push_str(&pad);
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// A scalar, or an empty mapping or list, on one line.
fn inline(tree: &Tree) -> String {
    match tree {
        Tree::Null => "null".into(),
        Tree::Scalar(text, false) if is_plain_literal(text) => text.clone(),
        Tree::Scalar(text, _) => serde_json::Value::String(text.clone()).to_string(),
        Tree::Map(_) => "{}".into(),
        Tree::List(_) => "[]".into(),
    }
}

/// Numbers and booleans keep their type; anything else is quoted.
fn is_plain_literal(text: &str) -> bool {
    matches!(text, "true" | "false") || text.parse::<f64>().is_ok() && !text.is_empty()
}

fn key_text(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    match plain {
        true => key.to_string(),
        false => serde_json::Value::String(key.to_string()).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_keeps_runs_of_capitals_together() {
        assert_eq!(snake("sourceRange"), "source_range");
        assert_eq!(snake("excludedIPs"), "excluded_ips");
        assert_eq!(snake("ipv6Subnet"), "ipv6_subnet");
        assert_eq!(
            snake("accessControlAllowOriginListRegex"),
            "access_control_allow_origin_list_regex"
        );
        assert_eq!(snake("stsSeconds"), "sts_seconds");
        assert_eq!(
            snake("authResponseHeadersRegex"),
            "auth_response_headers_regex"
        );
        assert_eq!(snake("maxRequestBodyBytes"), "max_request_body_bytes");
    }

    #[test]
    fn custom_headers_become_set_and_remove() {
        let yaml = "http:\n  middlewares:\n    h:\n      headers:\n        customRequestHeaders: { X-Script: test, X-Drop: \"\" }\n        stsSeconds: 63072000\n";
        let out = import(yaml, Format::Yaml).unwrap();
        assert!(out.yaml.contains("request:\n"), "{}", out.yaml);
        assert!(out.yaml.contains("set:\n"), "{}", out.yaml);
        assert!(out.yaml.contains("X-Script: \"test\""), "{}", out.yaml);
        assert!(out.yaml.contains("remove:\n"), "{}", out.yaml);
        assert!(out.yaml.contains("sts_seconds: 63072000"), "{}", out.yaml);
    }
}
