//! `weir config dump`: a loaded config written back as YAML, as weir understood it (nginx's
//! `-T`): every `${NAME}` expanded, and the defaults of `server`, entrypoints, routers'
//! priorities and `static` settings, and services' connection, check and retry settings written
//! out (middlewares and caches stay as written). What it prints loads to the same
//! config (a literal `${` is written `$${`); comments and anchors are not kept.

use crate::load::expand_env;
use crate::model::{
    Action, Balancer, Config, HealthCheck, LogFormat, LogTarget, RetryOn, Service, StaticFiles,
    TlsVersion, Transport, UpstreamProtocol,
};
use crate::yaml::{self, Node, Pos, Value};
use std::time::Duration;

/// `text` (the file `config` was loaded from) with variables expanded and defaults filled in.
pub fn dump(
    text: &str,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut root = yaml::parse(text).map_err(|e| e.message)?;
    expand(&mut root, env)?;
    fill_defaults(&mut root, config);
    let mut out = String::new();
    write_node(&mut out, &root, 0);
    Ok(out)
}

/// Expands every scalar value (names and keys are never expanded when loading, so are not here).
fn expand(node: &mut Node, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    match &mut node.value {
        Value::Scalar { text, .. } => {
            *text = expand_env(text, env)
                .map_err(|e| format!("{}:{}: {e}", node.pos.line, node.pos.column))?;
        }
        Value::Seq(items) => {
            for item in items {
                expand(item, env)?;
            }
        }
        Value::Map(entries) => {
            for (_, value) in entries {
                expand(value, env)?;
            }
        }
        Value::Null => {}
    }
    Ok(())
}

fn scalar(text: impl Into<String>) -> Node {
    Node {
        pos: Pos::default(),
        value: Value::Scalar {
            text: text.into(),
            quoted: false,
        },
    }
}

fn empty_map() -> Node {
    Node {
        pos: Pos::default(),
        value: Value::Map(Vec::new()),
    }
}

/// The mapping under `key` in `node`, made (empty) when absent or written as nothing; `None`
/// when `node` is no mapping or `key` holds something else.
fn child<'n>(node: &'n mut Node, key: &str) -> Option<&'n mut Node> {
    if matches!(node.value, Value::Null) {
        node.value = Value::Map(Vec::new());
    }
    let Value::Map(entries) = &mut node.value else {
        return None;
    };
    let at = match entries.iter().position(|(k, _)| k.as_str() == Some(key)) {
        Some(at) => at,
        None => {
            entries.push((scalar(key), empty_map()));
            entries.len() - 1
        }
    };
    let value = &mut entries[at].1;
    if matches!(value.value, Value::Null) {
        value.value = Value::Map(Vec::new());
    }
    matches!(value.value, Value::Map(_)).then_some(value)
}

/// Sets `key` to `default` in the mapping `node` unless it is written there.
pub(crate) fn fill(node: &mut Node, key: &str, default: impl Into<String>) {
    if let Value::Map(entries) = &mut node.value {
        if !entries.iter().any(|(k, _)| k.as_str() == Some(key)) {
            entries.push((scalar(key), scalar(default)));
        }
    }
}

/// Sets `key` to the list `default` in the mapping `node` unless it is written there.
fn fill_list(node: &mut Node, key: &str, default: Vec<String>) {
    if let Value::Map(entries) = &mut node.value {
        if !entries.iter().any(|(k, _)| k.as_str() == Some(key)) {
            let items = default.into_iter().map(scalar).collect();
            let list = Node {
                pos: Pos::default(),
                value: Value::Seq(items),
            };
            entries.push((scalar(key), list));
        }
    }
}

pub(crate) fn duration(d: Duration) -> String {
    match (d.subsec_nanos(), d.subsec_nanos() % 1_000_000) {
        (0, _) => format!("{}s", d.as_secs()),
        (_, 0) => format!("{}ms", d.as_millis()),
        _ => format!("{}us", d.as_micros()),
    }
}

fn fill_defaults(root: &mut Node, config: &Config) {
    let s = &config.server;
    // Written first, as the reference lists it, when the file has none.
    if let Value::Map(entries) = &mut root.value {
        if !entries.iter().any(|(k, _)| k.as_str() == Some("server")) {
            entries.insert(0, (scalar("server"), empty_map()));
        }
    }
    if let Some(server) = child(root, "server") {
        let workers = s.workers.map_or("auto".to_string(), |n| n.to_string());
        fill(server, "workers", workers);
        fill(server, "graceful_timeout", duration(s.graceful_timeout));
        fill(
            server,
            "client_idle_timeout",
            duration(s.client_idle_timeout),
        );
        fill(
            server,
            "client_body_timeout",
            duration(s.client_body_timeout),
        );
        fill(
            server,
            "client_send_timeout",
            duration(s.client_send_timeout),
        );
        fill(server, "metrics", s.metrics.to_string());
        if let Some(cache) = child(server, "open_file_cache") {
            fill(cache, "max", s.open_file_cache.max.to_string());
            fill(cache, "valid", duration(s.open_file_cache.valid));
        }
        if let Some(log) = child(server, "access_log") {
            let a = &s.access_log;
            fill(log, "enabled", a.enabled.to_string());
            let format = match a.format {
                LogFormat::Json => "json",
                LogFormat::Combined => "combined",
            };
            fill(log, "format", format);
            let path = match &a.path {
                LogTarget::Stdout => "stdout".to_string(),
                LogTarget::Stderr => "stderr".to_string(),
                LogTarget::File(path) => path.display().to_string(),
            };
            fill(log, "path", path);
            fill(log, "sample", a.sample.to_string());
        }
        if let Some(admin) = &s.admin {
            if let Some(node) = child(server, "admin") {
                fill(node, "address", admin.address.to_string());
                fill(
                    node,
                    "token_for_metrics",
                    admin.token_for_metrics.to_string(),
                );
            }
        }
    }
    if let Some(entrypoints) = child(root, "entrypoints") {
        // A UDP entrypoint has no HTTP settings.
        for ep in config
            .entrypoints
            .iter()
            .filter(|e| e.transport == Transport::Tcp)
        {
            let Some(node) = child(entrypoints, &ep.name) else {
                continue;
            };
            fill(node, "h2c", ep.h2c.to_string());
            if let Some(http2) = child(node, "http2") {
                fill(
                    http2,
                    "max_concurrent_streams",
                    ep.http2.max_concurrent_streams.to_string(),
                );
                fill(
                    http2,
                    "initial_window_size",
                    ep.http2.initial_window_size.to_string(),
                );
                fill(http2, "max_frame_size", ep.http2.max_frame_size.to_string());
                fill(
                    http2,
                    "max_header_list_size",
                    ep.http2.max_header_list_size.to_string(),
                );
            }
            // `child` adds the key it looks for: only for an entrypoint that has the block.
            if let Some(http3) = &ep.http3 {
                if let Some(node) = child(node, "http3") {
                    crate::load::fill_http3(node, http3);
                }
            }
            if let Some(tls) = &ep.tls {
                if let Some(node) = child(node, "tls") {
                    let version = match tls.min_version {
                        TlsVersion::V1_2 => "1.2",
                        TlsVersion::V1_3 => "1.3",
                    };
                    fill(node, "min_version", version);
                    fill(node, "handshake_timeout", duration(tls.handshake_timeout));
                    fill_list(node, "alpn", tls.alpn.clone());
                    if let Some(acme) = &tls.acme {
                        if let Some(node) = child(node, "acme") {
                            fill_acme(node, acme);
                        }
                    }
                }
            }
        }
    }
    if !config.routers.is_empty() {
        if let Some(routers) = child(root, "routers") {
            for router in &config.routers {
                if let Some(node) = child(routers, &router.name) {
                    fill(node, "priority", router.priority.to_string());
                    if let Action::Static(files) = &router.action {
                        fill_static(node, files);
                    }
                }
            }
        }
    }
    if !config.services.is_empty() {
        if let Some(services) = child(root, "services") {
            for service in &config.services {
                if let Some(node) = child(services, &service.name) {
                    fill_service(node, service);
                }
            }
        }
    }
}

/// `tls.acme`'s defaults; `storage` (beside the config file) and `renew_before` (a third of
/// each certificate's lifetime) stay unwritten, as they depend on where and what.
fn fill_acme(node: &mut Node, acme: &crate::model::Acme) {
    use crate::model::{AcmeChallenge, AcmeKeyType};
    fill(node, "directory", acme.directory.clone());
    fill(node, "from_rules", acme.from_rules.to_string());
    let challenges = acme.challenges.iter().map(|c| match c {
        AcmeChallenge::TlsAlpn01 => "tls-alpn-01".to_string(),
        AcmeChallenge::Http01 => "http-01".to_string(),
    });
    fill_list(node, "challenges", challenges.collect());
    let key_type = match acme.key_type {
        AcmeKeyType::EcdsaP256 => "ecdsa-p256",
        AcmeKeyType::Rsa2048 => "rsa2048",
    };
    fill(node, "key_type", key_type);
}

fn fill_static(router: &mut Node, files: &StaticFiles) {
    if let Some(node) = child(router, "static") {
        fill_list(node, "index", files.index.clone());
        fill(node, "precompressed", files.precompressed.to_string());
        fill(node, "autoindex", files.autoindex.to_string());
        fill(node, "follow_symlinks", files.follow_symlinks.to_string());
        fill(node, "dotfiles", files.dotfiles.to_string());
    }
}

fn fill_health_check(service: &mut Node, check: &HealthCheck) {
    let Some(node) = child(service, "health_check") else {
        return;
    };
    fill(node, "path", check.path.clone());
    fill(node, "interval", duration(check.interval));
    fill(node, "timeout", duration(check.timeout));
    fill(
        node,
        "healthy_threshold",
        check.healthy_threshold.to_string(),
    );
    fill(
        node,
        "unhealthy_threshold",
        check.unhealthy_threshold.to_string(),
    );
    let statuses: Vec<String> = check
        .expect_status
        .iter()
        .map(|&(low, high)| match low == high {
            true => low.to_string(),
            false => format!("{low}-{high}"),
        })
        .collect();
    fill(node, "expect_status", statuses.join(", "));
}

fn fill_service(node: &mut Node, service: &Service) {
    let protocol = match service.protocol {
        UpstreamProtocol::Http1 => "h1",
        UpstreamProtocol::Http2 => "h2",
        UpstreamProtocol::H2c => "h2c",
    };
    fill(node, "protocol", protocol);
    let balancer = match service.load_balancer {
        Balancer::RoundRobin => "round_robin",
        Balancer::LeastConn => "least_conn",
        Balancer::Random => "random",
        Balancer::P2c => "p2c",
        Balancer::ConsistentHash => "consistent_hash",
    };
    fill(node, "load_balancer", balancer);
    fill(
        node,
        "pass_host_header",
        service.pass_host_header.to_string(),
    );
    if let Some(keepalive) = child(node, "keepalive") {
        let k = &service.keepalive;
        fill(
            keepalive,
            "max_idle_per_server",
            k.max_idle_per_server.to_string(),
        );
        fill(keepalive, "idle_timeout", duration(k.idle_timeout));
    }
    if let Some(check) = &service.health_check {
        fill_health_check(node, check);
    }
    if let Some(passive) = &service.passive_health {
        if let Some(node) = child(node, "passive_health") {
            fill(node, "max_failures", passive.max_failures.to_string());
            fill(node, "window", duration(passive.window));
            fill(node, "eject", duration(passive.eject));
        }
    }
    if let Some(retry) = &service.retry {
        if let Some(node) = child(node, "retry") {
            fill(node, "attempts", retry.attempts.to_string());
            let on = retry.on.iter().map(|on| match on {
                RetryOn::ConnectFailure => "connect_failure".to_string(),
                RetryOn::Reset => "reset".to_string(),
                RetryOn::Status(code) => code.to_string(),
            });
            fill_list(node, "on", on.collect());
        }
    }
    if let Some(timeouts) = child(node, "timeouts") {
        let t = &service.timeouts;
        fill(timeouts, "connect", duration(t.connect));
        fill(timeouts, "response_header", duration(t.response_header));
        fill(timeouts, "read", duration(t.read));
        fill(timeouts, "write", duration(t.write));
    }
}

/// A scalar as YAML: plain when that reads back as the same string, else double-quoted (JSON's
/// escapes are YAML's); a `${` is written `$${` so loading does not expand it again.
fn write_scalar(out: &mut String, text: &str) {
    let text = text.replace("${", "$${");
    let plain = !text.is_empty()
        && !matches!(text.as_str(), "~" | "null" | "Null" | "NULL")
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./@+-".contains(c))
        && !text.starts_with(['-', '.', '@']);
    if plain {
        out.push_str(&text);
    } else {
        out.push_str(&serde_json::Value::String(text).to_string());
    }
}

fn write_node(out: &mut String, node: &Node, indent: usize) {
    let pad = " ".repeat(indent);
    match &node.value {
        Value::Map(entries) if !entries.is_empty() => {
            for (key, value) in entries {
                out.push_str(&pad);
                write_scalar(out, key.as_str().unwrap_or_default());
                out.push(':');
                write_value(out, value, indent);
            }
        }
        Value::Seq(items) if !items.is_empty() => {
            for item in items {
                out.push_str(&pad);
                out.push('-');
                match &item.value {
                    // `- key: value`, the mapping's other keys under its first.
                    Value::Map(entries) if !entries.is_empty() => {
                        let mut inner = String::new();
                        write_node(&mut inner, item, indent + 2);
                        out.push(' ');
                        out.push_str(&inner[indent + 2..]);
                    }
                    _ => write_value(out, item, indent),
                }
            }
        }
        _ => {
            out.push_str(&pad);
            write_inline(out, node);
            out.push('\n');
        }
    }
}

/// What follows `key:` or `-`: a scalar or empty collection on the same line, a collection on
/// the next lines, indented.
fn write_value(out: &mut String, value: &Node, indent: usize) {
    match &value.value {
        Value::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            write_node(out, value, indent + 2);
        }
        Value::Seq(items) if !items.is_empty() => {
            out.push('\n');
            write_node(out, value, indent + 2);
        }
        _ => {
            out.push(' ');
            write_inline(out, value);
            out.push('\n');
        }
    }
}

fn write_inline(out: &mut String, node: &Node) {
    match &node.value {
        Value::Null => out.push_str("null"),
        Value::Scalar { text, .. } => write_scalar(out, text),
        Value::Map(_) => out.push_str("{}"),
        Value::Seq(_) => out.push_str("[]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{load_str, load_str_with_env};

    fn env(name: &str) -> Option<String> {
        (name == "DUMP_PORT").then(|| "8443".to_string())
    }

    const CONFIG: &str = "\
# a comment, not kept
entrypoints:
  web: { address: \"127.0.0.1:${DUMP_PORT}\" }
  dns: { address: \":5353/udp\" }
routers:
  hi:
    rule: \"Host(`a.example`) && PathPrefix(`/x`)\"
    respond: { body: \"costs $${PRICE}: yes\", headers: { x-empty: \"\" } }
  api: { rule: \"PathPrefix(`/`)\", service: app, middlewares: [strip] }
  files: { rule: \"PathPrefix(`/f`)\", static: { root: . } }
services:
  app:
    servers: [{ url: \"http://127.0.0.1:9000\" }, { url: \"http://127.0.0.1:9001\", weight: 3 }]
    timeouts: { connect: 250ms }
    health_check: { path: /healthz }
    retry: { attempts: 2 }
middlewares:
  strip: { strip_prefix: [/api] }
";

    fn dumped() -> String {
        let loaded = load_str_with_env(CONFIG, "t.yaml", &env).unwrap();
        dump(CONFIG, &loaded, &env).unwrap()
    }

    #[test]
    fn variables_are_expanded_and_defaults_written() {
        let text = dumped();
        for line in [
            "    address: \"127.0.0.1:8443\"\n",
            "  workers: auto\n",
            "  graceful_timeout: 30s\n",
            "  client_idle_timeout: 60s\n",
            "    format: json\n",
            "    h2c: false\n",
            "      max_concurrent_streams: 128\n",
            "    priority: 37\n",
            "    load_balancer: round_robin\n",
            "      connect: 250ms\n",
            "      response_header: 60s\n",
            "    body: \"costs $${PRICE}: yes\"\n",
            "      x-empty: \"\"\n",
            "      index:\n        - index.html\n      precompressed: true\n",
            "      interval: 5s\n",
            "      expect_status: 200-399\n",
            "      on:\n        - connect_failure\n",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
        assert!(!text.contains("comment"), "{text}");
        // Only what the config has gets its defaults: one static router, no passive checks.
        assert_eq!(text.matches("static:").count(), 1, "{text}");
        assert!(!text.contains("passive_health"), "{text}");
        // The UDP entrypoint gets no HTTP settings.
        let dns = text.split("  dns:\n").nth(1).unwrap();
        assert!(
            dns.starts_with("    address: \":5353/udp\"\nrouters:"),
            "{text}"
        );
    }

    #[test]
    fn an_acme_block_gets_its_defaults_and_loads_the_same() {
        let config = "entrypoints:\n  s:\n    address: \":443\"\n    tls: { acme: { domains: [a.example.org], challenges: [tls-alpn-01] } }\n";
        let loaded = load_str_with_env(config, "t.yaml", &env).unwrap();
        let text = dump(config, &loaded, &env).unwrap();
        for line in [
            "        directory: \"https://acme-v02.api.letsencrypt.org/directory\"\n",
            "        from_rules: false\n",
            "        key_type: ecdsa-p256\n",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
        let again = load_str(&text, "t.yaml").unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        // The same block but for where it is written.
        let acme = |c: &Config| {
            let mut acme = c.entrypoints[0].tls.as_ref().unwrap().acme.clone().unwrap();
            acme.pos = Pos { line: 0, column: 0 };
            acme
        };
        assert_eq!(acme(&again), acme(&loaded));
    }

    #[test]
    fn the_dump_loads_to_the_same_config() {
        let text = dumped();
        let again = load_str(&text, "dump.yaml").unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let first = load_str_with_env(CONFIG, "t.yaml", &env).unwrap();
        assert_eq!(again.entrypoints[0].address, first.entrypoints[0].address);
        assert_eq!(again.routers.len(), 3);
        let body = |c: &Config| match &c.routers[0].action {
            crate::model::Action::Respond(r) => r.body.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(body(&again), "costs ${PRICE}: yes");
        assert_eq!(body(&again), body(&first));
        assert_eq!(again.routers[0].priority, first.routers[0].priority);
        assert_eq!(again.services[0].servers[1].weight, 3);
        assert_eq!(
            again.services[0].timeouts.connect,
            Duration::from_millis(250)
        );
        // Dumping the dump changes nothing.
        assert_eq!(dump(&text, &again, &env).unwrap(), text);
    }
}
