//! `entrypoints.NAME.http3`: HTTP/3 over QUIC on a TLS entrypoint's port, and its limits.

use super::values::parse_size;
use super::Loader;
use crate::model::Http3Settings;
use crate::yaml::Node;

/// The bounds of `http3.initial_window_size`: a window below a packet's worth stalls every
/// stream, and quinn keeps the connection's window (four times this) in a `u32`-sized budget.
const WINDOW_BOUNDS: (u64, u64) = (1024, 1 << 30);

impl Loader<'_> {
    /// `http3:` of the entrypoint `what`; `None` when it is off (or after an error). HTTP/3
    /// runs over TLS 1.3 with the entrypoint's certificates, so a plain entrypoint cannot have it.
    pub(super) fn http3_settings(
        &mut self,
        node: &Node,
        what: &str,
        has_tls: bool,
    ) -> Option<Http3Settings> {
        let f = self.fields(
            node,
            "`http3`",
            &[
                "enabled",
                "advertise",
                "max_concurrent_streams",
                "initial_window_size",
                "idle_timeout",
                "zero_rtt",
                "retry_above",
            ],
        )?;
        let mut settings = Http3Settings::default();
        let enabled = match f.get("enabled") {
            Some(b) => self.boolean(b, "`http3.enabled`")?,
            None => false,
        };
        if let Some(b) = f.get("advertise") {
            settings.advertise = self.boolean(b, "`http3.advertise`")?;
        }
        if let Some(b) = f.get("zero_rtt") {
            settings.zero_rtt = self.boolean(b, "`http3.zero_rtt`")?;
        }
        if let Some(n) = f.get("max_concurrent_streams") {
            let streams = self.uint(n, "`http3.max_concurrent_streams`", 1, 1 << 20)?;
            settings.max_concurrent_streams = streams as u32;
        }
        if let Some(n) = f.get("retry_above") {
            let handshakes = self.uint(n, "`http3.retry_above`", 0, 1 << 20)?;
            settings.retry_above = handshakes as u32;
        }
        if let Some(n) = f.get("initial_window_size") {
            let (low, high) = WINDOW_BOUNDS;
            match n.as_str().and_then(parse_size) {
                Some(v) if (low..=high).contains(&v) => settings.initial_window_size = v as u32,
                _ => {
                    self.error(
                        n.pos,
                        format!(
                            "`http3.initial_window_size` must be a size from {low} to {high} bytes"
                        ),
                    );
                    return None;
                }
            }
        }
        if let Some(d) = f.get("idle_timeout") {
            let idle = self.duration(d, "`http3.idle_timeout`")?;
            if idle.is_zero() {
                self.error(d.pos, "`http3.idle_timeout` must be longer than 0s");
                return None;
            }
            settings.idle_timeout = idle;
        }
        if enabled && !has_tls {
            self.error(
                node.pos,
                format!("{what} has no `tls`: `http3` needs a TLS entrypoint (QUIC carries TLS 1.3 with its certificates)"),
            );
            return None;
        }
        enabled.then_some(settings)
    }
}

/// `weir config dump`: an enabled `http3` block with its defaults written out.
pub(crate) fn fill_http3(node: &mut crate::yaml::Node, http3: &Http3Settings) {
    use crate::dump::{duration, fill};
    fill(node, "advertise", http3.advertise.to_string());
    let streams = http3.max_concurrent_streams.to_string();
    fill(node, "max_concurrent_streams", streams);
    let window = http3.initial_window_size.to_string();
    fill(node, "initial_window_size", window);
    fill(node, "idle_timeout", duration(http3.idle_timeout));
    fill(node, "zero_rtt", http3.zero_rtt.to_string());
    fill(node, "retry_above", http3.retry_above.to_string());
}

#[cfg(test)]
mod tests {
    use crate::load::load_str;
    use crate::load::tests::errors;
    use crate::model::Http3Settings;
    use std::time::Duration;

    const TLS: &str = "tls: { certificates: [{ cert: c.pem, key: k.pem }] }";

    fn entrypoint(http3: &str) -> String {
        format!("entrypoints:\n  web: {{ address: \"127.0.0.1:0\", {TLS},\n    http3: {http3} }}\n")
    }

    #[test]
    fn http3_defaults_and_every_key() {
        let config = load_str(&entrypoint("{ enabled: true }"), "t.yaml").expect("valid");
        assert_eq!(config.entrypoints[0].http3, Some(Http3Settings::default()));
        let defaults = Http3Settings::default();
        assert!(defaults.advertise && !defaults.zero_rtt);
        assert_eq!(defaults.max_concurrent_streams, 100);
        assert_eq!(defaults.idle_timeout, Duration::from_secs(30));
        assert_eq!(defaults.retry_above, 128);
        let text = entrypoint(
            "{ enabled: true, advertise: false, max_concurrent_streams: 7, initial_window_size: 64KiB, idle_timeout: 5s, zero_rtt: true, retry_above: 0 }",
        );
        let config = load_str(&text, "t.yaml").expect("valid");
        assert_eq!(
            config.entrypoints[0].http3,
            Some(Http3Settings {
                advertise: false,
                max_concurrent_streams: 7,
                initial_window_size: 64 << 10,
                idle_timeout: Duration::from_secs(5),
                zero_rtt: true,
                retry_above: 0,
            })
        );
        // Written but not enabled, or absent: off.
        let config = load_str(&entrypoint("{ enabled: false }"), "t.yaml").expect("valid");
        assert_eq!(config.entrypoints[0].http3, None);
        let config = load_str(&entrypoint("{}"), "t.yaml").expect("valid");
        assert_eq!(config.entrypoints[0].http3, None);
    }

    #[test]
    fn http3_defaults_are_dumped_and_load_back() {
        let text = entrypoint("{ enabled: true, idle_timeout: 5s }");
        let config = load_str(&text, "t.yaml").expect("valid");
        let dumped = crate::dump::dump(&text, &config, &|_| None).expect("dumps");
        for line in [
            "advertise: true",
            "max_concurrent_streams: 100",
            "initial_window_size: 1048576",
            "idle_timeout: 5s",
            "zero_rtt: false",
            "retry_above: 128",
        ] {
            assert!(dumped.contains(line), "{line} in {dumped}");
        }
        let again = load_str(&dumped, "t.yaml").unwrap_or_else(|e| panic!("{e:?} in {dumped}"));
        assert_eq!(again.entrypoints[0].http3, config.entrypoints[0].http3);
        // A TLS entrypoint without `http3` (or `acme`) gets no such block from the dump.
        let plain = format!("entrypoints:\n  web: {{ address: \"127.0.0.1:0\", {TLS} }}\n");
        let config = load_str(&plain, "t.yaml").expect("valid");
        let dumped = crate::dump::dump(&plain, &config, &|_| None).expect("dumps");
        assert!(
            !dumped.contains("http3") && !dumped.contains("acme"),
            "{dumped}"
        );
        load_str(&dumped, "t.yaml").unwrap_or_else(|e| panic!("{e:?} in {dumped}"));
    }

    #[test]
    fn http3_on_a_plain_entrypoint_is_refused() {
        let errs = errors(
            "entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n    http3: { enabled: true }\n",
        );
        assert_eq!(
            errs,
            ["t.yaml:4:12: entrypoint `web` has no `tls`: `http3` needs a TLS entrypoint (QUIC carries TLS 1.3 with its certificates)"]
        );
        // Off, it is allowed anywhere.
        let off =
            "entrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n    http3: { enabled: false }\n";
        assert!(load_str(off, "t.yaml").is_ok());
    }

    #[test]
    fn http3_bad_values_name_what_was_expected() {
        let cases = [
            (
                "{ enabled: yes }",
                "t.yaml:3:23: `http3.enabled` must be `true` or `false`, found `yes`",
            ),
            (
                "{ enabled: true, max_concurrent_streams: 0 }",
                "t.yaml:3:53: `http3.max_concurrent_streams` must be a whole number from 1 to 1048576, found `0`",
            ),
            (
                "{ enabled: true, initial_window_size: 10 }",
                "t.yaml:3:50: `http3.initial_window_size` must be a size from 1024 to 1073741824 bytes",
            ),
            (
                "{ enabled: true, idle_timeout: 0s }",
                "t.yaml:3:43: `http3.idle_timeout` must be longer than 0s",
            ),
            (
                "{ enabled: true, idle_timeout: soon }",
                "t.yaml:3:43: `http3.idle_timeout` must be a duration like `250ms`, `30s`, `5m` or `1h`, found `soon`",
            ),
            (
                "{ enabled: true, zero_rt: true }",
                "t.yaml:3:29: unknown key `zero_rt` in `http3` (did you mean `zero_rtt`?); expected one of: enabled, advertise, max_concurrent_streams, initial_window_size, idle_timeout, zero_rtt, retry_above",
            ),
            (
                "{ enabled: true, retry_above: -1 }",
                "t.yaml:3:42: `http3.retry_above` must be a whole number from 0 to 1048576, found `-1`",
            ),
            (
                "{ enabled: true, retry_above: many }",
                "t.yaml:3:42: `http3.retry_above` must be a whole number from 0 to 1048576, found `many`",
            ),
        ];
        for (http3, expected) in cases {
            assert_eq!(errors(&entrypoint(http3)), [expected], "{http3}");
        }
    }
}
