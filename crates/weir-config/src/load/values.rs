//! The generic readers of YAML nodes every section uses: a mapping's allowed keys ([`Fields`]),
//! named definitions, strings (with `${NAME}` expanded), numbers, booleans, durations, sizes,
//! lists and header maps, each reporting what it expected at the node's position.

use super::{Fields, Loader};
use crate::predicate::ExpressionError;
use crate::yaml::{Node, Pos, Value};
use std::net::SocketAddr;
use std::time::Duration;

impl Loader<'_> {
    pub(super) fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push((pos, message.into()));
    }

    /// Checks that `node` is a mapping with only `allowed` keys; `Null` reads as empty.
    pub(super) fn fields<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Option<Fields<'n>> {
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
                        "unknown key `{k}` in {what}{}; expected one of: {}",
                        super::suggest::did_you_mean(k, allowed.iter().copied()),
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
    pub(super) fn named<'n>(
        &mut self,
        node: Option<&'n Node>,
        what: &str,
    ) -> Vec<(String, &'n Node)> {
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
    pub(super) fn string(&mut self, node: &Node, what: &str) -> Option<String> {
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

    /// A vulcand/predicate expression (`crate::predicate`), parsed by `parse` into its
    /// language's condition and returned with its text; an error points into the expression.
    pub(super) fn predicate<T>(
        &mut self,
        node: &Node,
        key: &str,
        parse: fn(&str) -> Result<T, ExpressionError>,
    ) -> Option<(T, String)> {
        let text = self.string(node, &format!("`{key}`"))?;
        match parse(&text) {
            Ok(condition) => Some((condition, text)),
            Err(e) => {
                let pos = offset_pos(node, &text, e.offset);
                self.error(pos, format!("invalid `{key}`: {}", e.message));
                None
            }
        }
    }

    pub(super) fn uint(&mut self, node: &Node, what: &str, min: u64, max: u64) -> Option<u64> {
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

    pub(super) fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
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

    pub(super) fn duration(&mut self, node: &Node, what: &str) -> Option<Duration> {
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

    /// `key`'s duration into `slot`, when `f` has it; `` `key` `` names it in the error.
    /// `None` after an error (`slot` is left as it was).
    pub(super) fn duration_field(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        slot: &mut Duration,
    ) -> Option<()> {
        if let Some(node) = f.get(key) {
            *slot = self.duration(node, &format!("`{key}`"))?;
        }
        Some(())
    }

    pub(super) fn size(&mut self, node: &Node, what: &str) -> Option<u64> {
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

    /// An optional boolean key of `f`: `false` when absent (or after its error).
    pub(super) fn flag_key(&mut self, f: &Fields<'_>, key: &str) -> bool {
        match f.get(key) {
            Some(node) => self.boolean(node, &format!("`{key}`")).unwrap_or(false),
            None => false,
        }
    }

    /// An optional text key of `f`: empty when absent (or after its error).
    pub(super) fn text_key(&mut self, f: &Fields<'_>, key: &str) -> String {
        match f.get(key) {
            Some(node) => self.string(node, &format!("`{key}`")).unwrap_or_default(),
            None => String::new(),
        }
    }

    /// An optional list-of-strings key of `f`, without positions: empty when absent.
    pub(super) fn names_key(&mut self, f: &Fields<'_>, key: &str) -> Vec<String> {
        let list = self.list_key(f, key);
        list.into_iter().map(|(text, _)| text).collect()
    }

    /// An optional list-of-strings key of `f`, each with its position: empty when absent.
    pub(super) fn list_key(&mut self, f: &Fields<'_>, key: &str) -> Vec<(String, Pos)> {
        match f.get(key) {
            Some(node) => self.string_list(node, &format!("`{key}`")),
            None => Vec::new(),
        }
    }

    pub(super) fn string_list(&mut self, node: &Node, what: &str) -> Vec<(String, Pos)> {
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

    pub(super) fn header_map(&mut self, node: &Node, what: &str) -> Vec<(String, String)> {
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

    pub(super) fn header_names(&mut self, node: &Node, what: &str) -> Vec<String> {
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

pub(super) fn parse_listen_address(text: &str) -> Option<SocketAddr> {
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
}
