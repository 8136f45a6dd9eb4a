//! The admin API's structured views, as Traefik's API lays them out: `/api/overview`,
//! `/api/entrypoints`, `/api/http/{routers,services,middlewares}`, `/api/tcp/{routers,services}`,
//! `/api/udp/{routers,services}`, `/api/caches`, `/api/certificates`. Each field is a value
//! (`action: { kind: proxy, service: demo }`), not prose; each answer is JSON with a final
//! newline.

use crate::state::runtime::{RouteAction, Runtime};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use weir_config::{Config, Transport};

/// The JSON for `path` (one of the views above), or `None` for another path.
pub fn view(path: &[u8], runtime: &Runtime, uptime_secs: u64) -> Option<String> {
    let body = match path {
        b"/api/overview" => overview(runtime, uptime_secs),
        b"/api/entrypoints" => entrypoints(&runtime.config),
        b"/api/http/routers" => http_routers(runtime),
        b"/api/http/services" => http_services(runtime),
        b"/api/http/middlewares" => http_middlewares(&runtime.config),
        b"/api/tcp/routers" => tcp_routers(&runtime.config),
        b"/api/tcp/services" => tcp_services(&runtime.config),
        b"/api/udp/routers" => udp_routers(&runtime.config),
        b"/api/udp/services" => udp_services(&runtime.config),
        b"/api/caches" => caches(runtime),
        b"/api/certificates" => certificates(&runtime.config),
        _ => return None,
    };
    Some(format!("{body}\n"))
}

/// How many of each thing the configuration in service has, and what the process is.
fn overview(runtime: &Runtime, uptime_secs: u64) -> Value {
    let config = &runtime.config;
    let down = runtime
        .services
        .iter()
        .flat_map(|s| &s.servers)
        .filter(|s| !s.health.usable())
        .count();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "config_version": runtime.version,
        "uptime_seconds": uptime_secs,
        "entrypoints": config.entrypoints.len(),
        "http": {
            "routers": config.routers.len(),
            "services": config.services.len(),
            "middlewares": config.middlewares.len(),
            "servers_unusable": down,
        },
        "tcp": { "routers": config.tcp.routers.len(), "services": config.tcp.services.len() },
        "udp": { "routers": config.udp.routers.len(), "services": config.udp.services.len() },
        "caches": config.caches.len(),
        "features": {
            "metrics": config.server.metrics,
            "access_log": runtime.access_log.is_some(),
            "tls": config.entrypoints.iter().any(|e| e.tls.is_some()),
            "etcd": config.providers.etcd.is_some(),
        },
    })
}

fn entrypoints(config: &Config) -> Value {
    let list: Vec<Value> = config
        .entrypoints
        .iter()
        .map(|ep| {
            let tls = ep.tls.as_ref().map(|tls| {
                json!({
                    "certificates": tls.certificates.iter().map(|c| c.cert.display().to_string()).collect::<Vec<_>>(),
                    "min_version": format!("{:?}", tls.min_version),
                    "alpn": tls.alpn,
                })
            });
            json!({
                "name": ep.name,
                "address": ep.address.to_string(),
                "transport": match ep.transport { Transport::Udp => "udp", _ => "tcp" },
                "tls": tls,
                "h2c": ep.h2c,
            })
        })
        .collect();
    json!({ "entrypoints": list })
}

/// A route's action as fields.
fn action(action: &RouteAction) -> Value {
    match action {
        RouteAction::Proxy(service) => json!({ "kind": "proxy", "service": service.name }),
        RouteAction::Elasticsearch(es) => {
            json!({ "kind": "elasticsearch", "service": es.service.name })
        }
        RouteAction::Cached(service, cache) => {
            json!({ "kind": "proxy", "service": service.name, "cache": cache.name })
        }
        RouteAction::Respond(answer) => {
            json!({ "kind": "respond", "status": answer.status, "body_bytes": answer.body.len() })
        }
        RouteAction::RespondError(prebuilt) => json!({
            "kind": "respond",
            "status": prebuilt.plain.status,
            "body_bytes": prebuilt.plain.body.len(),
        }),
        RouteAction::Redirect(answer) => {
            let to = answer
                .headers
                .iter()
                .find(|(name, _)| name == "location")
                .map(|(_, value)| value.as_str());
            json!({ "kind": "redirect", "status": answer.status, "to": to })
        }
        RouteAction::Static(site) => {
            json!({ "kind": "static", "root": site.config.root.display().to_string() })
        }
        RouteAction::Lua(script) => json!({ "kind": "lua", "script": script.describe() }),
    }
}

fn http_routers(runtime: &Runtime) -> Value {
    let list: Vec<Value> = runtime
        .routes
        .iter()
        .map(|route| {
            let config = runtime.config.routers.iter().find(|r| r.name == route.name);
            let (responses, _) = route.cells.snapshot();
            json!({
                "name": route.name,
                "rule": route.rule_text,
                "priority": route.priority,
                "entrypoints": config.map(|c| c.entrypoints.clone()).unwrap_or_default(),
                "middlewares": config.map(|c| c.middlewares.clone()).unwrap_or_default(),
                "action": action(&route.action),
                "responses": responses,
            })
        })
        .collect();
    json!({ "routers": list })
}

fn http_services(runtime: &Runtime) -> Value {
    let list: Vec<Value> = runtime
        .services
        .iter()
        .map(|service| {
            let config = runtime
                .config
                .services
                .iter()
                .find(|s| s.name == service.name);
            let servers: Vec<Value> = service
                .servers
                .iter()
                .map(|s| {
                    let state = if s.health.is_drained() {
                        "drained"
                    } else if s.health.is_down() {
                        "down"
                    } else if s.health.is_ejected() {
                        "ejected"
                    } else {
                        "up"
                    };
                    json!({
                        "url": s.url,
                        "weight": s.weight,
                        "state": state,
                        "in_flight": s.inflight.0.load(Ordering::Relaxed),
                    })
                })
                .collect();
            json!({
                "name": service.name,
                "protocol": format!("{:?}", service.protocol),
                "load_balancer": config.map(|c| format!("{:?}", c.load_balancer)),
                "health_check": service.health_check.is_some(),
                "passive_health": service.passive_health.is_some(),
                "retry_attempts": service.retry.as_ref().map_or(1, |r| r.attempts),
                "servers": servers,
                "used_by": runtime.routes.iter()
                    .filter(|r| r.action.service().is_some_and(|s| s.name == service.name))
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "services": list })
}

fn http_middlewares(config: &Config) -> Value {
    let list: Vec<Value> = config
        .middlewares
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "kind": m.kind.key(),
                "used_by": config.routers.iter()
                    .filter(|r| r.middlewares.contains(&m.name))
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "middlewares": list })
}

fn tcp_routers(config: &Config) -> Value {
    let list: Vec<Value> = config
        .tcp
        .routers
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "rule": r.rule_text,
                "priority": r.priority,
                "entrypoints": r.entrypoints,
                "passthrough": r.passthrough,
                "service": r.service,
            })
        })
        .collect();
    json!({ "routers": list })
}

fn tcp_services(config: &Config) -> Value {
    let list: Vec<Value> = config
        .tcp
        .services
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "servers": addressed(&s.servers),
                "load_balancer": format!("{:?}", s.load_balancer),
                "proxy_protocol": s.proxy_protocol,
                "max_connections": s.max_connections,
            })
        })
        .collect();
    json!({ "services": list })
}

/// TCP or UDP servers: their address and weight.
fn addressed(servers: &[weir_config::TcpServer]) -> Vec<Value> {
    servers
        .iter()
        .map(|server| json!({ "address": server.address, "weight": server.weight }))
        .collect()
}

fn udp_routers(config: &Config) -> Value {
    let list: Vec<Value> = config
        .udp
        .routers
        .iter()
        .map(|r| json!({ "name": r.name, "entrypoints": r.entrypoints, "service": r.service }))
        .collect();
    json!({ "routers": list })
}

fn udp_services(config: &Config) -> Value {
    let list: Vec<Value> = config
        .udp
        .services
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "servers": addressed(&s.servers),
                "load_balancer": format!("{:?}", s.load_balancer),
                "session_timeout_seconds": s.session_timeout.as_secs_f64(),
                "max_sessions": s.max_sessions,
            })
        })
        .collect();
    json!({ "services": list })
}

fn caches(runtime: &Runtime) -> Value {
    let list: Vec<Value> = runtime
        .caches
        .iter()
        .map(|cache| {
            let config = runtime.config.caches.iter().find(|c| c.name == cache.name);
            let stats = cache.stats();
            json!({
                "name": cache.name,
                "memory_limit_bytes": config.map(|c| c.memory),
                "memory_used_bytes": stats.bytes,
                "entries": stats.entries,
                "hits": stats.hits,
                "misses": stats.misses,
                "revalidated": stats.revalidated,
                "stores": stats.stores,
                "evictions": stats.evictions,
                "disk": config.and_then(|c| c.disk.as_ref()).map(|d| json!({
                    "path": d.path.display().to_string(),
                    "size_bytes": d.size,
                })),
                "purge_fanout": cache.fanout_store().is_some(),
            })
        })
        .collect();
    json!({ "caches": list })
}

/// Each entrypoint's certificates as their files say now: names, issuer, validity.
fn certificates(config: &Config) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut list = Vec::new();
    for ep in &config.entrypoints {
        let Some(tls) = &ep.tls else { continue };
        let files = tls.certificates.iter().chain(&tls.default_certificate);
        for files in files {
            let entry = match crate::listen::tls::describe_certificate(&files.cert) {
                Ok(cert) => json!({
                    "entrypoint": ep.name,
                    "file": files.cert.display().to_string(),
                    "names": cert.names,
                    "issuer": cert.issuer,
                    "not_before": cert.not_before,
                    "not_after": cert.not_after,
                    "days_left": (cert.not_after - now).div_euclid(86_400),
                }),
                Err(e) => json!({
                    "entrypoint": ep.name,
                    "file": files.cert.display().to_string(),
                    "error": e,
                }),
            };
            list.push(entry);
        }
    }
    // `tls.acme` names: state, expiry and last error (`listen/acme.rs`).
    json!({ "certificates": list, "acme": crate::listen::acme::states_json(now) })
}
