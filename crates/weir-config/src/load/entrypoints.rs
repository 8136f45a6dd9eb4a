//! `entrypoints.NAME`: listen addresses (TCP or `/udp`), TLS, h2c and HTTP/2 settings, and the
//! check that no two entrypoints listen on one address. Also the `{ cert, key }` pairs and
//! `http2:` settings that upstream services read the same way.

use super::values::{parse_listen_address, parse_size};
use super::Loader;
use crate::model::*;
use crate::yaml::{Node, Value};

impl Loader<'_> {
    /// Two entrypoints on one address would both bind it (each worker's socket has
    /// `SO_REUSEPORT`) and split its connections between them: refused, as `nginx -t` refuses
    /// a duplicate `listen`. A wildcard address overlaps every address of its port; port 0
    /// (any free port) never clashes.
    pub(super) fn check_addresses_unique(&mut self, entrypoints: &[Entrypoint]) {
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

    pub(super) fn entrypoint(&mut self, name: String, node: &Node) -> Option<Entrypoint> {
        let what = format!("entrypoint `{name}`");
        let f = self.fields(
            node,
            &what,
            &["address", "tls", "h2c", "http2", "http3", "access_log"],
        )?;
        let access_log = match f.get("access_log") {
            Some(b) => self.boolean(b, "`access_log`").unwrap_or(true),
            None => true,
        };
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
        let http3 = f
            .get("http3")
            .and_then(|h| self.http3_settings(h, &what, tls.is_some()));
        match parse_listen_address(&text) {
            Some(address) => Some(Entrypoint {
                name,
                address,
                pos: addr_node.pos,
                transport,
                tls,
                h2c,
                http2,
                http3,
                access_log,
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
                "acme",
            ],
        )?;
        let acme = f.get("acme").and_then(|a| self.entrypoint_acme(name, a));
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
            None if acme.is_some() => {}
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
            acme,
            pos: f.pos,
        })
    }

    /// `{ cert: FILE, key: FILE }`; the files themselves are read and checked when the
    /// configuration is compiled (`weir check` does it too).
    pub(super) fn certificate_files(
        &mut self,
        node: &Node,
        what: &str,
    ) -> Option<CertificateFiles> {
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
    pub(super) fn http2_settings(&mut self, h: &Node) -> Http2Settings {
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
}

#[cfg(test)]
mod tests {
    use crate::load::load_str;
    use crate::load::tests::errors;

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
}
