//! A service's `health_check` (active), `passive_health` and `retry` settings.

use super::{is_header_name, is_header_value, Loader};
use crate::model::*;
use crate::yaml::Node;
use std::time::Duration;

impl Loader<'_> {
    pub(super) fn health_check(&mut self, node: &Node) -> Option<HealthCheck> {
        let f = self.fields(
            node,
            "`health_check`",
            &[
                "path",
                "interval",
                "timeout",
                "healthy_threshold",
                "unhealthy_threshold",
                "expect_status",
                "headers",
            ],
        )?;
        let path = match f.get("path") {
            Some(p) => self.string(p, "`path`")?,
            None => "/".to_string(),
        };
        if !path.starts_with('/') || !is_header_value(&path) || path.contains(' ') {
            self.error(
                node.pos,
                format!(
                    "health check `path` must start with `/` and hold no spaces, found `{path}`"
                ),
            );
            return None;
        }
        let duration = |this: &mut Self, key: &str, default: u64| match f.get(key) {
            Some(d) => this.duration(d, &format!("`{key}`")),
            None => Some(Duration::from_secs(default)),
        };
        let interval = duration(self, "interval", 5)?;
        let timeout = duration(self, "timeout", 2)?;
        let threshold = |this: &mut Self, key: &str, default: u64| match f.get(key) {
            Some(n) => this.uint(n, &format!("`{key}`"), 1, 100).map(|n| n as u32),
            None => Some(default as u32),
        };
        let healthy_threshold = threshold(self, "healthy_threshold", 2)?;
        let unhealthy_threshold = threshold(self, "unhealthy_threshold", 3)?;
        let mut expect_status = vec![(200, 399)];
        if let Some(e) = f.get("expect_status") {
            let text = self.string(e, "`expect_status`")?;
            let mut ranges = Vec::new();
            for part in text.split(',').map(str::trim) {
                let (low, high) = part.split_once('-').unwrap_or((part, part));
                match (low.trim().parse::<u16>(), high.trim().parse::<u16>()) {
                    (Ok(l), Ok(h)) if (100..=599).contains(&l) && l <= h && h <= 599 => {
                        ranges.push((l, h))
                    }
                    _ => {
                        self.error(e.pos, format!("`expect_status` must be statuses or ranges like \"200\" or \"200-399, 404\", found `{text}`"));
                        return None;
                    }
                }
            }
            expect_status = ranges;
        }
        let mut headers = Vec::new();
        if let Some(h) = f.get("headers") {
            headers = self.header_map(h, "`headers`");
            if headers.iter().any(|(n, _)| !is_header_name(n)) {
                return None;
            }
        }
        Some(HealthCheck {
            path,
            interval,
            timeout,
            healthy_threshold,
            unhealthy_threshold,
            expect_status,
            headers,
        })
    }

    pub(super) fn passive_health(&mut self, node: &Node) -> Option<PassiveHealth> {
        let f = self.fields(
            node,
            "`passive_health`",
            &["max_failures", "window", "eject"],
        )?;
        let max_failures = match f.get("max_failures") {
            Some(n) => self.uint(n, "`max_failures`", 1, 1000)? as u32,
            None => 3,
        };
        let window = match f.get("window") {
            Some(d) => self.duration(d, "`window`")?,
            None => Duration::from_secs(10),
        };
        let eject = match f.get("eject") {
            Some(d) => self.duration(d, "`eject`")?,
            None => Duration::from_secs(30),
        };
        Some(PassiveHealth {
            max_failures,
            window,
            eject,
        })
    }

    pub(super) fn retry(&mut self, node: &Node) -> Option<Retry> {
        let f = self.fields(
            node,
            "`retry`",
            &["attempts", "on", "per_try_timeout", "budget"],
        )?;
        let per_try_timeout = f
            .get("per_try_timeout")
            .and_then(|d| self.duration(d, "`retry.per_try_timeout`"));
        let budget = match f.get("budget") {
            Some(n) => match n.as_str().and_then(parse_share) {
                Some(share) => Some(share),
                None => {
                    self.error(
                        n.pos,
                        "`retry.budget` must be a share of requests, from 0 to 1 or a percentage such as 20%",
                    );
                    None
                }
            },
            None => None,
        };
        let attempts = match f.get("attempts") {
            Some(n) => self.uint(n, "`attempts`", 1, 10)? as u32,
            None => 2,
        };
        let mut on = vec![
            RetryOn::ConnectFailure,
            RetryOn::Reset,
            RetryOn::Status(502),
            RetryOn::Status(503),
            RetryOn::Status(504),
        ];
        if let Some(list) = f.get("on") {
            on.clear();
            for (item, pos) in self.string_list(list, "`on`") {
                match item.as_str() {
                    "connect_failure" => on.push(RetryOn::ConnectFailure),
                    "reset" => on.push(RetryOn::Reset),
                    status => match status.parse::<u16>() {
                        Ok(code) if (500..=599).contains(&code) => on.push(RetryOn::Status(code)),
                        _ => self.error(
                            pos,
                            format!(
                                "`on` takes connect_failure, reset or a 5xx status, found `{item}`"
                            ),
                        ),
                    },
                }
            }
        }
        Some(Retry {
            attempts,
            on,
            per_try_timeout,
            budget,
        })
    }
}

/// `0.2` or `20%`, between 0 and 1.
fn parse_share(text: &str) -> Option<f64> {
    let share = match text.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().ok()? / 100.0,
        None => text.parse::<f64>().ok()?,
    };
    (0.0..=1.0).contains(&share).then_some(share)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};
    use std::time::Duration;

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
}
