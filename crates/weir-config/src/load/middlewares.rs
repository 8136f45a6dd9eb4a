//! `middlewares.NAME`: one of strip_prefix, add_prefix, replace_path_regex, headers,
//! redirect_scheme, compress, replace_path, strip_prefix_regex, redirect_regex or chain; and
//! the chains resolved into flat lists (every name defined, no loop).

use super::{Fields, Loader};
use crate::model::*;
use crate::yaml::{Node, Pos, Value};
use std::collections::HashMap;

/// Why `path` cannot be a request path as sent: a malformed `%` escape, or a byte a request
/// line cannot carry.
fn check_raw_path(path: &str) -> Result<(), &'static str> {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let whole = bytes
                    .get(i + 1..i + 3)
                    .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit));
                if !whole {
                    return Err("has a `%` not followed by two hex digits");
                }
                i += 3;
                continue;
            }
            b'?' | b'#' => return Err("must not hold a query or fragment"),
            b if b <= b' ' || b == 0x7f => {
                return Err("must not hold spaces or control characters")
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

impl Loader<'_> {
    pub(super) fn middleware(&mut self, name: String, node: &Node) -> Option<Middleware> {
        const KINDS: &[&str] = &[
            "strip_prefix",
            "add_prefix",
            "replace_path_regex",
            "headers",
            "redirect_scheme",
            "compress",
            "replace_path",
            "strip_prefix_regex",
            "redirect_regex",
            "chain",
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
            "strip_prefix" => self.strip_prefix(body),
            "add_prefix" => self.add_prefix(body)?,
            "replace_path_regex" => self.replace_path_regex(body)?,
            "headers" => self.headers(body)?,
            "compress" => MiddlewareKind::Compress(self.compress(body)?),
            "replace_path" => self.replace_path(body)?,
            "strip_prefix_regex" => self.strip_prefix_regex(body)?,
            "redirect_regex" => self.redirect_regex(body)?,
            "chain" => self.chain(body)?,
            _ => self.redirect_scheme(body)?,
        };
        Some(Middleware { name, kind })
    }

    /// `strip_prefix: PREFIX` or a list of them, each starting with `/`.
    fn strip_prefix(&mut self, body: &Node) -> MiddlewareKind {
        let prefixes = self.string_list(body, "`strip_prefix`");
        for (p, pos) in &prefixes {
            if !p.starts_with('/') {
                self.error(*pos, format!("prefix `{p}` must start with `/`"));
            }
        }
        MiddlewareKind::StripPrefix(prefixes.into_iter().map(|(p, _)| p).collect())
    }

    /// `add_prefix: PREFIX`, starting with `/`.
    fn add_prefix(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let p = self.string(body, "`add_prefix`")?;
        if !p.starts_with('/') {
            self.error(body.pos, format!("prefix `{p}` must start with `/`"));
        }
        Some(MiddlewareKind::AddPrefix(p))
    }

    /// `replace_path_regex: { regex, replacement }`.
    fn replace_path_regex(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`replace_path_regex`", &["regex", "replacement"])?;
        let (regex, replacement) = self.regex_and_replacement(&rf, "`replace_path_regex`")?;
        Some(MiddlewareKind::ReplacePathRegex { regex, replacement })
    }

    /// The `regex` (compiled) and `replacement` that `what` needs both of.
    fn regex_and_replacement(
        &mut self,
        f: &Fields<'_>,
        what: &str,
    ) -> Option<(regex::Regex, String)> {
        let (Some(r), Some(rep)) = (f.get("regex"), f.get("replacement")) else {
            self.error(f.pos, format!("{what} needs `regex` and `replacement`"));
            return None;
        };
        let source = self.string(r, "`regex`")?;
        let replacement = self.string(rep, "`replacement`")?;
        match regex::Regex::new(&source) {
            Ok(regex) => Some((regex, replacement)),
            Err(e) => {
                self.error(r.pos, format!("invalid regular expression: {e}"));
                None
            }
        }
    }

    /// `replace_path: { path }`: a path as sent on the wire, so its escapes must be whole.
    fn replace_path(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`replace_path`", &["path"])?;
        let Some(p) = rf.get("path") else {
            self.error(rf.pos, "`replace_path` needs `path`");
            return None;
        };
        let path = self.string(p, "`path`")?;
        if !path.starts_with('/') {
            self.error(p.pos, format!("path `{path}` must start with `/`"));
            return None;
        }
        if let Err(problem) = check_raw_path(&path) {
            self.error(p.pos, format!("path `{path}` {problem}"));
            return None;
        }
        Some(MiddlewareKind::ReplacePath(path))
    }

    /// `strip_prefix_regex: { regex: [...] }`, at least one expression.
    fn strip_prefix_regex(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(body, "`strip_prefix_regex`", &["regex"])?;
        let Some(list) = rf.get("regex") else {
            self.error(rf.pos, "`strip_prefix_regex` needs `regex`");
            return None;
        };
        let sources = self.string_list(list, "`regex`");
        if sources.is_empty() {
            self.error(list.pos, "`regex` must list at least one expression");
            return None;
        }
        let mut expressions = Vec::with_capacity(sources.len());
        for (source, pos) in sources {
            // Traefik trims the spaces around each expression.
            match regex::bytes::Regex::new(source.trim()) {
                Ok(regex) => expressions.push(regex),
                Err(e) => self.error(pos, format!("invalid regular expression: {e}")),
            }
        }
        Some(MiddlewareKind::StripPrefixRegex(expressions))
    }

    /// `redirect_regex: { regex, replacement, permanent }` (temporary by default).
    fn redirect_regex(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let rf = self.fields(
            body,
            "`redirect_regex`",
            &["regex", "replacement", "permanent"],
        )?;
        let compiled = self.regex_and_replacement(&rf, "`redirect_regex`");
        let permanent = match rf.get("permanent") {
            Some(p) => self.boolean(p, "`permanent`")?,
            None => false,
        };
        let (regex, replacement) = compiled?;
        Some(MiddlewareKind::RedirectRegex {
            regex,
            replacement,
            permanent,
        })
    }

    /// `chain: { middlewares: [...] }`; the names are checked once every middleware is read
    /// ([`Loader::resolve_chains`]).
    fn chain(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let cf = self.fields(body, "`chain`", &["middlewares"])?;
        let Some(list) = cf.get("middlewares") else {
            self.error(cf.pos, "`chain` needs `middlewares`");
            return None;
        };
        Some(MiddlewareKind::Chain(
            self.string_list(list, "`middlewares`"),
        ))
    }

    /// Every chain's flat list of middlewares, in order. Says where a chain names a middleware
    /// that is not defined, or one that leads back to the chain; such a chain gets no list.
    pub(super) fn resolve_chains(
        &mut self,
        middlewares: &[Middleware],
    ) -> HashMap<String, Vec<String>> {
        let mut flat = HashMap::new();
        for m in middlewares {
            if let MiddlewareKind::Chain(_) = m.kind {
                let mut path = vec![m.name.as_str()];
                let mut list = Vec::new();
                if self.flatten_chain(middlewares, &mut path, None, &mut list) {
                    flat.insert(m.name.clone(), list);
                }
            }
        }
        flat
    }

    /// Appends the members of the chain last in `path` to `out`, following the chains among
    /// them; `path` holds the chains being expanded, outermost first. `entry` is where the
    /// outermost chain names the member being expanded (`None` while reading the outermost
    /// itself): an error is told there and for the outermost chain only, since every chain is
    /// resolved in turn and tells its own.
    fn flatten_chain<'m>(
        &mut self,
        middlewares: &'m [Middleware],
        path: &mut Vec<&'m str>,
        entry: Option<Pos>,
        out: &mut Vec<String>,
    ) -> bool {
        let Some(MiddlewareKind::Chain(members)) = path
            .last()
            .and_then(|name| middlewares.iter().find(|m| m.name == *name))
            .map(|m| &m.kind)
        else {
            return false;
        };
        let mut ok = true;
        for (name, pos) in members {
            let Some(member) = middlewares.iter().find(|m| m.name == *name) else {
                if entry.is_none() {
                    let defined = middlewares.iter().map(|m| m.name.as_str());
                    let what = format!("chain `{}`", path[0]);
                    self.is_defined(*pos, (&what, "middleware", name), defined);
                }
                ok = false;
                continue;
            };
            if path.contains(&member.name.as_str()) {
                if path[0] == name {
                    let around: Vec<&str> = path.iter().copied().chain([path[0]]).collect();
                    let message = format!("chain `{}` loops: {}", path[0], around.join(" → "));
                    self.error(entry.unwrap_or(*pos), message);
                }
                ok = false;
                continue;
            }
            if let MiddlewareKind::Chain(_) = member.kind {
                path.push(member.name.as_str());
                ok &= self.flatten_chain(middlewares, path, entry.or(Some(*pos)), out);
                path.pop();
            } else {
                out.push(name.clone());
            }
        }
        ok
    }

    /// `headers: { request, response }`, each a set of header operations.
    fn headers(&mut self, body: &Node) -> Option<MiddlewareKind> {
        let hf = self.fields(body, "`headers`", &["request", "response"])?;
        let request = hf
            .get("request")
            .map(|n| self.header_ops(n, "`headers.request`"))
            .unwrap_or_default();
        let response = hf
            .get("response")
            .map(|n| self.header_ops(n, "`headers.response`"))
            .unwrap_or_default();
        Some(MiddlewareKind::Headers { request, response })
    }

    /// `redirect_scheme: { scheme, permanent }` (https and temporary by default).
    fn redirect_scheme(&mut self, body: &Node) -> Option<MiddlewareKind> {
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
        Some(MiddlewareKind::RedirectScheme { scheme, permanent })
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

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

    fn middlewares(body: &str) -> String {
        format!("{BASE}middlewares:\n{body}")
    }

    #[test]
    fn replace_path_needs_a_path_as_sent() {
        let cfg = load_str(
            &middlewares("  r: { replace_path: { path: /foo%2Fbar } }\n"),
            "t.yaml",
        )
        .unwrap();
        assert!(
            matches!(&cfg.middlewares[0].kind, MiddlewareKind::ReplacePath(p) if p == "/foo%2Fbar")
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: {} }\n")),
            vec!["t.yaml:4:22: `replace_path` needs `path`"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: foo } }\n")),
            vec!["t.yaml:4:30: path `foo` must start with `/`"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: /a%2 } }\n")),
            vec!["t.yaml:4:30: path `/a%2` has a `%` not followed by two hex digits"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: \"/a?b\" } }\n")),
            vec!["t.yaml:4:30: path `/a?b` must not hold a query or fragment"]
        );
        assert_eq!(
            errors(&middlewares("  r: { replace_path: { path: \"/a b\" } }\n")),
            vec!["t.yaml:4:30: path `/a b` must not hold spaces or control characters"]
        );
    }

    #[test]
    fn strip_prefix_regex_compiles_each_expression_at_load() {
        let cfg = load_str(
            &middlewares(
                "  s: { strip_prefix_regex: { regex: [\" /a/api/ \", \"/b/([a-z0-9]+)/\"] } }\n",
            ),
            "t.yaml",
        )
        .unwrap();
        let MiddlewareKind::StripPrefixRegex(expressions) = &cfg.middlewares[0].kind else {
            panic!("not strip_prefix_regex");
        };
        assert_eq!(expressions[0].as_str(), "/a/api/");
        assert_eq!(
            errors(&middlewares("  s: { strip_prefix_regex: { regex: [/ok, \"/b/(\"] } }\n")),
            vec!["t.yaml:4:43: invalid regular expression: regex parse error:\n    /b/(\n       ^\nerror: unclosed group"]
        );
        assert_eq!(
            errors(&middlewares("  s: { strip_prefix_regex: { regex: [] } }\n")),
            vec!["t.yaml:4:37: `regex` must list at least one expression"]
        );
        assert_eq!(
            errors(&middlewares(
                "  s: { strip_prefix_regex: { regexp: [/a] } }\n"
            )),
            vec![
                "t.yaml:4:28: `strip_prefix_regex` needs `regex`",
                "t.yaml:4:30: unknown key `regexp` in `strip_prefix_regex`; expected one of: regex"
            ]
        );
    }

    #[test]
    fn redirect_regex_settings_and_their_errors() {
        let cfg = load_str(
            &middlewares("  r: { redirect_regex: { regex: \"^http://(.*)\", replacement: \"https://$1\" } }\n"),
            "t.yaml",
        )
        .unwrap();
        let MiddlewareKind::RedirectRegex {
            regex,
            replacement,
            permanent,
        } = &cfg.middlewares[0].kind
        else {
            panic!("not redirect_regex");
        };
        assert_eq!(
            (regex.as_str(), replacement.as_str(), *permanent),
            ("^http://(.*)", "https://$1", false)
        );
        assert_eq!(
            errors(&middlewares("  r: { redirect_regex: { regex: \"^(.*\", replacement: $1 } }\n")),
            vec!["t.yaml:4:33: invalid regular expression: regex parse error:\n    ^(.*\n     ^\nerror: unclosed group"]
        );
        assert_eq!(
            errors(&middlewares("  r: { redirect_regex: { regex: a } }\n")),
            vec!["t.yaml:4:24: `redirect_regex` needs `regex` and `replacement`"]
        );
        assert_eq!(
            errors(&middlewares(
                "  r: { redirect_regex: { regex: a, replacement: b, permanent: yes } }\n"
            )),
            vec!["t.yaml:4:63: `permanent` must be `true` or `false`, found `yes`"]
        );
    }

    #[test]
    fn chains_flatten_into_the_routers_lists() {
        let cfg = load_str(
            &format!(
                "{BASE}routers:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    middlewares: [outer, c]\n    respond: {{}}\nmiddlewares:\n  a: {{ add_prefix: /a }}\n  b: {{ add_prefix: /b }}\n  c: {{ add_prefix: /c }}\n  inner: {{ chain: {{ middlewares: [b, c] }} }}\n  outer: {{ chain: {{ middlewares: [a, inner, a] }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.routers[0].middlewares, vec!["a", "b", "c", "a", "c"]);
    }

    #[test]
    fn a_chain_names_defined_middlewares_and_does_not_loop() {
        assert_eq!(
            errors(&middlewares("  a: { add_prefix: /a }\n  c: { chain: { middlewares: [a, nope] } }\n")),
            vec!["t.yaml:5:34: chain `c` names middleware `nope`, which is not defined; defined: a, c"]
        );
        assert_eq!(
            errors(&middlewares("  c: { chain: { middlewares: [c] } }\n")),
            vec!["t.yaml:4:31: chain `c` loops: c → c"]
        );
        assert_eq!(
            errors(&middlewares("  x: { chain: { middlewares: [y] } }\n  y: { chain: { middlewares: [z] } }\n  z: { chain: { middlewares: [x] } }\n")),
            vec![
                "t.yaml:4:31: chain `x` loops: x → y → z → x",
                "t.yaml:5:31: chain `y` loops: y → z → x → y",
                "t.yaml:6:31: chain `z` loops: z → x → y → z",
            ]
        );
        assert_eq!(
            errors(&middlewares("  c: { chain: {} }\n")),
            vec!["t.yaml:4:15: `chain` needs `middlewares`"]
        );
    }

    /// pkg/server/middleware/middlewares_test.go (Traefik), TestBuilder_BuildChainWithContext:
    /// the "Detects recursion in Middleware chain" cases and "Detects MiddlewareChain that
    /// references a Chain that references a Chain with a missing middleware", whose loop
    /// (m2 → m3 → m2) m0 and m1 only lead into: the chains in the loop are the errors.
    #[test]
    fn traefik_chain_recursion_cases() {
        let chains = |list: &[(&str, &str)]| {
            let body: String = list
                .iter()
                .map(|(name, members)| {
                    format!("  {name}: {{ chain: {{ middlewares: [{members}] }} }}\n")
                })
                .collect();
            errors(&middlewares(&format!(
                "  ok: {{ add_prefix: /ok }}\n{body}"
            )))
        };
        assert_eq!(
            chains(&[("m1", "m2"), ("m2", "ok, m3"), ("m3", "m1")]),
            vec![
                "t.yaml:5:32: chain `m1` loops: m1 → m2 → m3 → m1",
                "t.yaml:6:36: chain `m2` loops: m2 → m3 → m1 → m2",
                "t.yaml:7:32: chain `m3` loops: m3 → m1 → m2 → m3",
            ]
        );
        assert_eq!(
            chains(&[("m0", "m0")]),
            vec!["t.yaml:5:32: chain `m0` loops: m0 → m0"]
        );
        assert_eq!(
            chains(&[("m0", "m1"), ("m1", "m2"), ("m2", "m3"), ("m3", "m2")]),
            vec![
                "t.yaml:7:32: chain `m2` loops: m2 → m3 → m2",
                "t.yaml:8:32: chain `m3` loops: m3 → m2 → m3",
            ]
        );
    }
}
