//! `server.tracing` (the OTLP exporter, sampling, the exported resource, the queue and its
//! batches) and a router's `tracing: { sample_rate }`.

use super::values::is_header_value;
use super::Loader;
use crate::model::*;
use crate::yaml::Node;

impl Loader<'_> {
    /// `server.tracing`.
    pub(super) fn tracing(&mut self, node: &Node) -> Option<Tracing> {
        let keys = [
            "otlp",
            "sample_rate",
            "parent_based",
            "service_name",
            "resource_attributes",
            "max_queue",
            "batch",
            "flush_interval",
        ];
        let f = self.fields(node, "`server.tracing`", &keys)?;
        let Some(otlp_node) = f.get("otlp") else {
            self.error(
                f.pos,
                "`server.tracing` needs `otlp`, e.g. otlp: { endpoint: \"http://127.0.0.1:4318\" }",
            );
            return None;
        };
        let otlp = self.otlp(otlp_node);
        let sample_rate = match f.get("sample_rate") {
            Some(n) => self.share(n, "`server.tracing.sample_rate`")?,
            None => DEFAULT_TRACING_SAMPLE_RATE,
        };
        let parent_based = match f.get("parent_based") {
            Some(n) => self.boolean(n, "`server.tracing.parent_based`")?,
            None => true,
        };
        let service_name = match f.get("service_name") {
            Some(n) => {
                let name = self.string(n, "`server.tracing.service_name`")?;
                if name.is_empty() {
                    self.error(n.pos, "`server.tracing.service_name` must not be empty");
                    return None;
                }
                name
            }
            None => DEFAULT_TRACING_SERVICE_NAME.to_string(),
        };
        let resource_attributes = match f.get("resource_attributes") {
            Some(n) => self.resource_attributes(n)?,
            None => Vec::new(),
        };
        let count = |loader: &mut Self, key: &str, default: usize, max: u64| match f.get(key) {
            Some(n) => loader
                .uint(n, &format!("`server.tracing.{key}`"), 1, max)
                .map(|n| n as usize),
            None => Some(default),
        };
        let max_queue = count(self, "max_queue", DEFAULT_TRACING_MAX_QUEUE, 1 << 24)?;
        let batch = count(self, "batch", DEFAULT_TRACING_BATCH, 1 << 16)?;
        let flush_interval = match f.get("flush_interval") {
            Some(n) => self.positive_duration(n, "`server.tracing.flush_interval`")?,
            None => DEFAULT_TRACING_FLUSH_INTERVAL,
        };
        Some(Tracing {
            otlp: otlp?,
            sample_rate,
            parent_based,
            service_name,
            resource_attributes,
            max_queue,
            batch,
            flush_interval,
        })
    }

    /// `server.tracing.otlp`: the collector's base URL (`http://` only), the protocol, header
    /// lines, the timeout of an export and its compression.
    fn otlp(&mut self, node: &Node) -> Option<Otlp> {
        let keys = ["endpoint", "protocol", "headers", "timeout", "compression"];
        let f = self.fields(node, "`server.tracing.otlp`", &keys)?;
        let Some(endpoint_node) = f.get("endpoint") else {
            self.error(
                f.pos,
                "`server.tracing.otlp` needs an `endpoint`, the collector's base URL, e.g. \"http://127.0.0.1:4318\"",
            );
            return None;
        };
        let endpoint = self.string(endpoint_node, "`otlp.endpoint`")?;
        let Some(authority) = endpoint_authority(&endpoint) else {
            self.error(
                endpoint_node.pos,
                format!("`otlp.endpoint` must be a base URL like http://HOST:PORT (no path, no https), found `{endpoint}`"),
            );
            return None;
        };
        let protocols = [
            ("http/protobuf", OtlpProtocol::HttpProtobuf),
            ("grpc", OtlpProtocol::Grpc),
        ];
        let protocol = match f.get("protocol") {
            None => OtlpProtocol::HttpProtobuf,
            Some(n) => self.one_of(n, "`otlp.protocol`", &protocols)?,
        };
        let compressions = [
            ("gzip", OtlpCompression::Gzip),
            ("none", OtlpCompression::None),
        ];
        let compression = match f.get("compression") {
            None => OtlpCompression::None,
            Some(n) => self.one_of(n, "`otlp.compression`", &compressions)?,
        };
        let headers = match f.get("headers") {
            Some(n) => self.header_map(n, "`otlp.headers`"),
            None => Vec::new(),
        };
        let timeout = match f.get("timeout") {
            Some(n) => self.positive_duration(n, "`otlp.timeout`")?,
            None => DEFAULT_OTLP_TIMEOUT,
        };
        Some(Otlp {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            authority,
            protocol,
            headers,
            timeout,
            compression,
        })
    }

    /// `server.tracing.resource_attributes`: string keys to string values.
    fn resource_attributes(&mut self, node: &Node) -> Option<Vec<(String, String)>> {
        let what = "`server.tracing.resource_attributes`";
        let f = match &node.value {
            crate::yaml::Value::Map(entries) => entries,
            _ => {
                self.error(
                    node.pos,
                    format!(
                        "{what} must be a mapping of attribute names to values, found {}",
                        node.kind_name()
                    ),
                );
                return None;
            }
        };
        let mut out = Vec::with_capacity(f.len());
        for (k, v) in f {
            let key = self.string(k, "an attribute name")?;
            let value = self.string(v, "an attribute value")?;
            if key.is_empty() || !is_header_value(&value) {
                self.error(
                    k.pos,
                    format!("{what}: `{key}` needs a non-empty name and a value without control characters"),
                );
                return None;
            }
            out.push((key, value));
        }
        Some(out)
    }

    /// A router's `tracing: { sample_rate }`.
    /// `configured`: whether `server.tracing` is, which this adjusts.
    pub(super) fn router_tracing(
        &mut self,
        node: &Node,
        what: &str,
        configured: bool,
    ) -> Option<f64> {
        if !configured {
            self.error(
                node.pos,
                format!("{what} sets `tracing`, but `server.tracing` is not configured"),
            );
            return None;
        }
        let f = self.fields(node, &format!("{what}'s `tracing`"), &["sample_rate"])?;
        let Some(n) = f.get("sample_rate") else {
            self.error(
                f.pos,
                format!("{what}'s `tracing` needs `sample_rate`, a number from 0 to 1"),
            );
            return None;
        };
        self.share(n, "`tracing.sample_rate`")
    }

    /// The value `options` names for the string at `node`.
    fn one_of<T: Copy>(&mut self, node: &Node, what: &str, options: &[(&str, T)]) -> Option<T> {
        let text = self.string(node, what)?;
        let found = options.iter().find(|(name, _)| *name == text);
        if found.is_none() {
            let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
            let expected = names.join(", ");
            self.error(
                node.pos,
                format!("unknown {what} `{text}`; expected: {expected}"),
            );
        }
        found.map(|(_, value)| *value)
    }

    /// A duration longer than 0.
    fn positive_duration(&mut self, node: &Node, what: &str) -> Option<std::time::Duration> {
        let d = self.duration(node, what)?;
        if d.is_zero() {
            self.error(node.pos, format!("{what} must be above 0"));
            return None;
        }
        Some(d)
    }

    /// A number from 0 to 1.
    fn share(&mut self, node: &Node, what: &str) -> Option<f64> {
        let text = self.string(node, what)?;
        match text.parse::<f64>() {
            Ok(share) if (0.0..=1.0).contains(&share) => Some(share),
            _ => {
                self.error(
                    node.pos,
                    format!("{what} must be a number from 0 to 1, found `{text}`"),
                );
                None
            }
        }
    }
}

/// `host:port` of an `http://host:port` base URL (a trailing `/` allowed), else `None`.
fn endpoint_authority(endpoint: &str) -> Option<String> {
    let rest = endpoint.strip_prefix("http://")?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':')?;
    let valid_host = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    (valid_host && port.parse::<u16>().is_ok_and(|p| p > 0)).then(|| authority.to_string())
}

#[cfg(test)]
mod tests {
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};
    use crate::model::*;
    use std::time::Duration;

    const ROUTES: &str = "services:\n  s: { servers: [{ url: \"http://127.0.0.1:1\" }] }\nrouters:\n  r: { rule: \"PathPrefix(`/`)\", service: s }\n";

    fn tracing(block: &str) -> Result<Tracing, Vec<String>> {
        let text = format!("server:\n  tracing:\n{block}{BASE}{ROUTES}");
        match load_str(&text, "t.yaml") {
            Ok(cfg) => Ok(cfg.server.tracing.expect("tracing")),
            Err(_) => Err(errors(&text)),
        }
    }

    #[test]
    fn defaults_follow_the_opentelemetry_exporters() {
        let t = tracing("    otlp: { endpoint: \"http://127.0.0.1:4318/\" }\n").unwrap();
        assert_eq!(t.otlp.endpoint, "http://127.0.0.1:4318");
        assert_eq!(t.otlp.authority, "127.0.0.1:4318");
        assert_eq!(t.otlp.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(t.otlp.compression, OtlpCompression::None);
        assert_eq!(t.otlp.timeout, Duration::from_secs(10));
        assert!(t.otlp.headers.is_empty());
        assert_eq!(t.sample_rate, 1.0);
        assert!(t.parent_based);
        assert_eq!(t.service_name, "weir");
        assert_eq!((t.max_queue, t.batch), (2048, 512));
        assert_eq!(t.flush_interval, Duration::from_secs(1));
    }

    #[test]
    fn every_key_is_read() {
        let t = tracing(concat!(
            "    otlp:\n",
            "      endpoint: \"http://collector:4317\"\n",
            "      protocol: grpc\n",
            "      headers: { x-api-key: secret }\n",
            "      timeout: 2s\n",
            "      compression: gzip\n",
            "    sample_rate: 0.25\n",
            "    parent_based: false\n",
            "    service_name: edge\n",
            "    resource_attributes: { deployment.environment: prod, host.name: gw1 }\n",
            "    max_queue: 100\n",
            "    batch: 10\n",
            "    flush_interval: 250ms\n",
        ))
        .unwrap();
        assert_eq!(t.otlp.protocol, OtlpProtocol::Grpc);
        assert_eq!(t.otlp.compression, OtlpCompression::Gzip);
        assert_eq!(t.otlp.headers, vec![("x-api-key".into(), "secret".into())]);
        assert_eq!(t.otlp.timeout, Duration::from_secs(2));
        assert_eq!(t.sample_rate, 0.25);
        assert!(!t.parent_based);
        assert_eq!(t.service_name, "edge");
        assert_eq!(
            t.resource_attributes,
            vec![
                ("deployment.environment".into(), "prod".into()),
                ("host.name".into(), "gw1".into())
            ]
        );
        assert_eq!((t.max_queue, t.batch), (100, 10));
        assert_eq!(t.flush_interval, Duration::from_millis(250));
    }

    #[test]
    fn bad_values_are_errors_at_their_place() {
        let cases = [
            ("    sample_rate: 0.5\n", "t.yaml:3:5: `server.tracing` needs `otlp`"),
            ("    otlp: {}\n", "t.yaml:3:11: `server.tracing.otlp` needs an `endpoint`"),
            (
                "    otlp: { endpoint: \"https://c:4318\" }\n",
                "t.yaml:3:23: `otlp.endpoint` must be a base URL like http://HOST:PORT (no path, no https), found `https://c:4318`",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318/v1/traces\" }\n",
                "t.yaml:3:23: `otlp.endpoint` must be a base URL",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\", protocol: http/json }\n",
                "t.yaml:3:50: unknown `otlp.protocol` `http/json`; expected: http/protobuf, grpc",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\", compression: zstd }\n",
                "t.yaml:3:53: unknown `otlp.compression` `zstd`; expected: gzip, none",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\", timeout: 0s }\n",
                "t.yaml:3:49: `otlp.timeout` must be above 0",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\", headers: { \"bad name\": x } }\n",
                "t.yaml:3:51: `bad name` is not a valid header name",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    sample_rate: 1.5\n",
                "t.yaml:4:18: `server.tracing.sample_rate` must be a number from 0 to 1, found `1.5`",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    parent_based: maybe\n",
                "t.yaml:4:19: `server.tracing.parent_based` must be",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    max_queue: 0\n",
                "t.yaml:4:16: `server.tracing.max_queue` must be",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    batch: many\n",
                "t.yaml:4:12: `server.tracing.batch` must be",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    flush_interval: 0s\n",
                "t.yaml:4:21: `server.tracing.flush_interval` must be above 0",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    service_name: \"\"\n",
                "t.yaml:4:19: `server.tracing.service_name` must not be empty",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    resource_attributes: [a]\n",
                "t.yaml:4:26: `server.tracing.resource_attributes` must be a mapping of attribute names to values",
            ),
            (
                "    otlp: { endpoint: \"http://c:4318\" }\n    sampler: always\n",
                "t.yaml:4:5: unknown key `sampler` in `server.tracing`; expected one of: otlp,",
            ),
        ];
        for (block, expected) in cases {
            let errs = tracing(block).unwrap_err();
            assert!(errs[0].starts_with(expected), "{block}: {errs:?}");
        }
    }

    #[test]
    fn a_router_overrides_the_sample_rate() {
        let server = "server:\n  tracing: { otlp: { endpoint: \"http://127.0.0.1:4318\" } }\n";
        let svc = "services:\n  s: { servers: [{ url: \"http://127.0.0.1:1\" }] }\n";
        let router = |tracing: &str| {
            format!("{server}{BASE}{svc}routers:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    service: s\n    tracing: {tracing}\n")
        };
        let cfg = load_str(&router("{ sample_rate: 0.1 }"), "t.yaml").unwrap();
        assert_eq!(cfg.routers[0].tracing_sample_rate, Some(0.1));
        let errs = errors(&router("{ sample_rate: -1 }"));
        assert!(
            errs[0].starts_with("t.yaml:11:29: `tracing.sample_rate` must be a number from 0 to 1"),
            "{errs:?}"
        );
        let errs = errors(&router("{}"));
        assert!(
            errs[0].starts_with("t.yaml:11:14: router `r`'s `tracing` needs `sample_rate`"),
            "{errs:?}"
        );
        // Without `server.tracing` there is nothing to override.
        let text = format!("{BASE}{svc}routers:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    service: s\n    tracing: {{ sample_rate: 1 }}\n");
        let errs = errors(&text);
        assert_eq!(
            errs,
            vec!["t.yaml:9:14: router `r` sets `tracing`, but `server.tracing` is not configured"]
        );
    }
}
