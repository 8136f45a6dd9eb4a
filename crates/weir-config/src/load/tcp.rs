//! The `tcp:` and `udp:` sections: TCP routers (rules over the ClientHello's SNI and ALPN and
//! the client's address) and TCP services (servers by `host:port`, balancing, PROXY protocol,
//! timeouts); UDP routers (one per UDP entrypoint) and UDP services (sessions per client).

use super::Loader;
use crate::model::*;
use crate::rule;
use crate::yaml::Node;

impl Loader<'_> {
    pub(super) fn tcp(&mut self, node: Option<&Node>, entrypoints: &[Entrypoint]) -> TcpConfig {
        let Some(node) = node else {
            return TcpConfig::default();
        };
        let Some(f) = self.fields(node, "`tcp`", &["routers", "services"]) else {
            return TcpConfig::default();
        };
        let services: Vec<TcpService> = self
            .named(f.get("services"), "tcp services")
            .into_iter()
            .filter_map(|(name, node)| self.tcp_service(name, node))
            .collect();
        let routers = self
            .named(f.get("routers"), "tcp routers")
            .into_iter()
            .filter_map(|(name, node)| self.tcp_router(name, node, entrypoints, &services))
            .collect();
        TcpConfig { routers, services }
    }

    fn tcp_router(
        &mut self,
        name: String,
        node: &Node,
        entrypoints: &[Entrypoint],
        services: &[TcpService],
    ) -> Option<TcpRouter> {
        let what = format!("tcp router `{name}`");
        let f = self.fields(
            node,
            &what,
            &["entrypoints", "rule", "priority", "tls", "service"],
        )?;
        let mut ok = true;
        let tcp_only = Some((Transport::Tcp, "not a TCP entrypoint"));
        let eps = self.router_entrypoints(&f, &what, entrypoints, tcp_only, &mut ok);
        let example = "\"HostSNI(`db.example.com`)\" or \"HostSNI(`*`)\"";
        let (rule_text, rule, priority) = self.router_rule(&f, &what, example, rule::parse_tcp)?;
        let mut passthrough = false;
        if let Some(tls) = f.get("tls") {
            let tf = self.fields(tls, "`tls`", &["passthrough"])?;
            if let Some(p) = tf.get("passthrough") {
                passthrough = self.boolean(p, "`passthrough`")?;
            }
        }
        let Some(service_node) = f.get("service") else {
            self.error(f.pos, format!("{what} needs a `service`"));
            return None;
        };
        let service = self.string(service_node, "`service`")?;
        let defined = services.iter().map(|s| s.name.as_str());
        ok &= self.is_defined(service_node.pos, (&what, "tcp service", &service), defined);
        ok.then_some(TcpRouter {
            name,
            pos: node.pos,
            entrypoints: eps,
            rule_text,
            rule,
            priority,
            passthrough,
            service,
        })
    }

    fn tcp_service(&mut self, name: String, node: &Node) -> Option<TcpService> {
        let what = format!("tcp service `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "servers",
                "load_balancer",
                "proxy_protocol",
                "timeouts",
                "max_connections",
            ],
        )?;
        let example = "address: \"127.0.0.1:6379\"";
        let servers = self.servers(&f, &what, example, Self::tcp_server);
        let load_balancer = self.load_balancer(&f)?;
        let mut proxy_protocol = None;
        if let Some(pp) = f.get("proxy_protocol") {
            let pf = self.fields(pp, "`proxy_protocol`", &["version"])?;
            let version = match pf.get("version") {
                Some(v) => self.uint(v, "`version`", 1, 2)? as u8,
                None => 2,
            };
            proxy_protocol = Some(version);
        }
        let mut connect_timeout = DEFAULT_CONNECT_TIMEOUT;
        let mut idle_timeout = DEFAULT_TCP_IDLE_TIMEOUT;
        if let Some(t) = f.get("timeouts") {
            let tf = self.fields(t, "`timeouts`", &["connect", "idle"])?;
            self.duration_field(&tf, "connect", &mut connect_timeout)?;
            self.duration_field(&tf, "idle", &mut idle_timeout)?;
        }
        let max_connections = match f.get("max_connections") {
            Some(m) => Some(self.uint(m, "`max_connections`", 1, 10_000_000)? as usize),
            None => None,
        };
        Some(TcpService {
            name,
            servers,
            load_balancer,
            proxy_protocol,
            connect_timeout,
            idle_timeout,
            max_connections,
        })
    }

    fn tcp_server(&mut self, node: &Node) -> Option<TcpServer> {
        let needs = "a tcp server needs an `address`, e.g. \"127.0.0.1:6379\"";
        let (address, pos, weight) = self.server_entry(node, "address", needs)?;
        let parsed = address.rsplit_once(':').and_then(|(host, port)| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
            (!host.is_empty()).then(|| (host.to_string(), port))
        });
        let Some((host, port)) = parsed else {
            self.error(
                pos,
                format!("`{address}` is not a server address; expected HOST:PORT"),
            );
            return None;
        };
        Some(TcpServer {
            address,
            host,
            port,
            weight,
        })
    }
}

impl Loader<'_> {
    /// HTTP and TCP routers name TCP entrypoints only.
    pub(super) fn check_tcp_entrypoints(
        &mut self,
        router: &str,
        pos: crate::yaml::Pos,
        names: &[String],
        entrypoints: &[Entrypoint],
        kind: &str,
    ) {
        for name in names {
            if entrypoints
                .iter()
                .any(|e| &e.name == name && e.transport == Transport::Udp)
            {
                self.error(
                    pos,
                    format!("{kind} `{router}` names entrypoint `{name}`, which is UDP; use a `udp` router there"),
                );
            }
        }
    }

    pub(super) fn udp(&mut self, node: Option<&Node>, entrypoints: &[Entrypoint]) -> UdpConfig {
        let Some(node) = node else {
            return UdpConfig::default();
        };
        let Some(f) = self.fields(node, "`udp`", &["routers", "services"]) else {
            return UdpConfig::default();
        };
        let services: Vec<UdpService> = self
            .named(f.get("services"), "udp services")
            .into_iter()
            .filter_map(|(name, node)| self.udp_service(name, node))
            .collect();
        let mut routers: Vec<UdpRouter> = Vec::new();
        for (name, node) in self.named(f.get("routers"), "udp routers") {
            let what = format!("udp router `{name}`");
            let Some(rf) = self.fields(node, &what, &["entrypoints", "service"]) else {
                continue;
            };
            // An error here fails the load; the router is still checked for overlaps.
            let mut ok = true;
            let udp_only = Some((
                Transport::Udp,
                "not UDP (write its address as \":PORT/udp\")",
            ));
            let eps = self.router_entrypoints(&rf, &what, entrypoints, udp_only, &mut ok);
            let Some(service_node) = rf.get("service") else {
                self.error(rf.pos, format!("{what} needs a `service`"));
                continue;
            };
            let Some(service) = self.string(service_node, "`service`") else {
                continue;
            };
            let defined = services.iter().map(|s| s.name.as_str());
            if !self.is_defined(service_node.pos, (&what, "udp service", &service), defined) {
                continue;
            }
            // UDP has nothing to match on: one router per entrypoint.
            let covers =
                |r_eps: &[String], ep: &str| r_eps.is_empty() || r_eps.iter().any(|e| e == ep);
            for ep in entrypoints.iter().filter(|e| e.transport == Transport::Udp) {
                if let Some(other) = routers
                    .iter()
                    .find(|o| covers(&o.entrypoints, &ep.name) && covers(&eps, &ep.name))
                {
                    self.error(node.pos, format!("{what} and udp router `{}` both take entrypoint `{}`; one router per UDP entrypoint", other.name, ep.name));
                }
            }
            routers.push(UdpRouter {
                name,
                entrypoints: eps,
                service,
            });
        }
        UdpConfig { routers, services }
    }

    fn udp_service(&mut self, name: String, node: &Node) -> Option<UdpService> {
        let what = format!("udp service `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "servers",
                "load_balancer",
                "session_timeout",
                "max_sessions",
            ],
        )?;
        let example = "address: \"127.0.0.1:53\"";
        let servers = self.servers(&f, &what, example, Self::tcp_server);
        let load_balancer = self.load_balancer(&f)?;
        let session_timeout = match f.get("session_timeout") {
            Some(t) => self.duration(t, "`session_timeout`")?,
            None => DEFAULT_UDP_SESSION_TIMEOUT,
        };
        let max_sessions = match f.get("max_sessions") {
            Some(m) => self.uint(m, "`max_sessions`", 1, 10_000_000)? as usize,
            None => DEFAULT_UDP_MAX_SESSIONS,
        };
        Some(UdpService {
            name,
            servers,
            load_balancer,
            session_timeout,
            max_sessions,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::load::tests::errors;

    #[test]
    fn tcp_and_udp_routers_name_what_is_defined() {
        let yaml = "entrypoints:\n  db: { address: \"127.0.0.1:0\" }\n  dns: { address: \"127.0.0.1:0/udp\" }\n\
            tcp:\n  services:\n    pg: { servers: [{ address: \"127.0.0.1:5432\" }] }\n\
            \x20 routers:\n    t: { entrypoints: [dbx], rule: \"HostSNI(`*`)\", service: pgx }\n\
            udp:\n  services:\n    ns: { servers: [{ address: \"127.0.0.1:53\" }] }\n\
            \x20 routers:\n    u: { entrypoints: [dnsx], service: nsx }\n";
        let errs = errors(yaml);
        let expected = [
            "tcp router `t` names entrypoint `dbx`, which is not defined (did you mean `db`?); defined: db, dns",
            "tcp router `t` names tcp service `pgx`, which is not defined (did you mean `pg`?); defined: pg",
            "udp router `u` names entrypoint `dnsx`, which is not defined (did you mean `dns`?); defined: db, dns",
            "udp router `u` names udp service `nsx`, which is not defined (did you mean `ns`?); defined: ns",
        ];
        assert_eq!(errs.len(), expected.len(), "{errs:?}");
        for (err, want) in errs.iter().zip(expected) {
            assert!(err.ends_with(want), "{err} does not end with {want}");
        }
    }
}
