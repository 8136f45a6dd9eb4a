//! `middlewares.NAME`: one of strip_prefix, add_prefix, replace_path_regex, headers,
//! redirect_scheme, compress or basic_auth.

use super::{is_header_name, is_header_value, Loader};
use crate::model::*;
use crate::yaml::{Node, Value};

impl Loader<'_> {
    pub(super) fn middleware(&mut self, name: String, node: &Node) -> Option<Middleware> {
        const KINDS: &[&str] = &[
            "strip_prefix",
            "add_prefix",
            "replace_path_regex",
            "headers",
            "redirect_scheme",
            "compress",
            "basic_auth",
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
            "basic_auth" => MiddlewareKind::BasicAuth(self.basic_auth(body)?),
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
        let (Some(r), Some(rep)) = (rf.get("regex"), rf.get("replacement")) else {
            self.error(
                rf.pos,
                "`replace_path_regex` needs `regex` and `replacement`",
            );
            return None;
        };
        let source = self.string(r, "`regex`")?;
        let replacement = self.string(rep, "`replacement`")?;
        match regex::Regex::new(&source) {
            Ok(regex) => Some(MiddlewareKind::ReplacePathRegex { regex, replacement }),
            Err(e) => {
                self.error(r.pos, format!("invalid regular expression: {e}"));
                None
            }
        }
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

    /// `basic_auth: { users, users_file, realm, header_field, remove_header }`: the file's
    /// users first, then `users`, so a name in both keeps its `users` hash (as Traefik merges).
    fn basic_auth(&mut self, node: &Node) -> Option<BasicAuth> {
        const KEYS: &[&str] = &[
            "users",
            "users_file",
            "realm",
            "header_field",
            "remove_header",
        ];
        let f = self.fields(node, "`basic_auth`", KEYS)?;
        let mut users = std::collections::BTreeMap::new();
        let errors_before = self.errors.len();
        if let Some(file) = f.get("users_file") {
            self.users_file(file, &mut users);
        }
        if let Some(list) = f.get("users") {
            for (line, pos) in self.string_list(list, "`users`") {
                match basic_user(&line) {
                    Ok((name, hash)) => {
                        users.insert(name.to_string(), hash.to_string());
                    }
                    Err(problem) => self.error(pos, problem),
                }
            }
        }
        let realm = match f.get("realm") {
            Some(n) => {
                let realm = self.string(n, "`realm`")?;
                // It is sent inside a quoted string, which these would end or break.
                if realm.contains(['"', '\\']) || !is_header_value(&realm) {
                    self.error(n.pos, "`realm` must be printable text without `\"` or `\\`");
                }
                realm
            }
            None => DEFAULT_BASIC_AUTH_REALM.to_string(),
        };
        let header_field = match f.get("header_field") {
            Some(n) => {
                let name = self.string(n, "`header_field`")?;
                if !is_header_name(&name) {
                    self.error(n.pos, format!("`{name}` is not a valid header name"));
                }
                Some(name)
            }
            None => None,
        };
        let remove_header = match f.get("remove_header") {
            Some(n) => self.boolean(n, "`remove_header`").unwrap_or(false),
            None => false,
        };
        // Only when no line was refused: that error already says what is wrong.
        if users.is_empty() && self.errors.len() == errors_before {
            self.error(
                f.pos,
                "`basic_auth` needs at least one user, in `users` or `users_file`",
            );
        }
        Some(BasicAuth {
            users,
            realm,
            header_field,
            remove_header,
        })
    }

    /// A users file as `htpasswd` writes it, read now (relative to the config file's folder):
    /// one `name:hash` a line; blank lines and lines starting with `#` are skipped.
    fn users_file(&mut self, node: &Node, users: &mut std::collections::BTreeMap<String, String>) {
        let Some(path) = self.string(node, "`users_file`") else {
            return;
        };
        let path = self.base.join(path);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                let path = path.display();
                self.error(node.pos, format!("cannot read users file `{path}`: {e}"));
                return;
            }
        };
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match basic_user(line) {
                Ok((name, hash)) => {
                    users.insert(name.to_string(), hash.to_string());
                }
                Err(problem) => {
                    let (path, number) = (path.display(), number + 1);
                    self.error(
                        node.pos,
                        format!("users file `{path}` line {number}: {problem}"),
                    );
                }
            }
        }
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

/// A `name:hash` line split in two (Traefik refuses a line with another `:` in it), with a
/// hash weir can verify.
fn basic_user(line: &str) -> Result<(&str, &str), String> {
    let Some((name, hash)) = line.split_once(':').filter(|(_, h)| !h.contains(':')) else {
        return Err("a user must be `name:hash`, as htpasswd writes it".into());
    };
    // The name may go upstream in `header_field`.
    if !is_header_value(name) {
        return Err("a user's name must be printable text".into());
    }
    if !is_verifiable_hash(hash) {
        return Err(format!(
            "user `{name}`'s hash is not one weir verifies: bcrypt (`htpasswd -B`), \
             MD5 (`htpasswd -m`) or SHA-1 (`htpasswd -s`)"
        ));
    }
    Ok((name, hash))
}

/// bcrypt (`$2y$` and its older prefixes, cost, 53 characters of salt and hash), MD5-crypt
/// (`$apr1$` or `$1$`, a salt of up to 8 characters, 22 of hash) or `{SHA}` with the base64 of
/// a SHA-1 digest: the schemes Traefik verifies.
fn is_verifiable_hash(hash: &str) -> bool {
    use base64::Engine;
    let crypt_chars = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    };
    if let Some(digest) = hash.strip_prefix("{SHA}") {
        return base64::engine::general_purpose::STANDARD
            .decode(digest)
            .is_ok_and(|d| d.len() == 20);
    }
    let fields: Vec<&str> = hash.split('$').collect();
    match fields.as_slice() {
        ["", "2a" | "2b" | "2x" | "2y", cost, rest] => {
            cost.len() == 2
                && cost.bytes().all(|b| b.is_ascii_digit())
                && rest.len() == 53
                && crypt_chars(rest)
        }
        ["", "apr1" | "1", salt, digest] => {
            (1..=8).contains(&salt.len()) && digest.len() == 22 && crypt_chars(digest)
        }
        _ => false,
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
}

#[cfg(test)]
mod basic_auth_tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    fn auth(body: &str, file: &str) -> Result<BasicAuth, Vec<String>> {
        let text = format!("{BASE}middlewares:\n  auth:\n    basic_auth: {body}\n");
        match load_str(&text, file) {
            Ok(cfg) => match &cfg.middlewares[0].kind {
                MiddlewareKind::BasicAuth(a) => Ok(a.clone()),
                other => panic!("not basic_auth: {other:?}"),
            },
            Err(e) => Err(e.iter().map(|e| e.to_string()).collect()),
        }
    }

    /// A folder of its own for a test, with `users` in its file `users`: the path of a config
    /// file beside it.
    fn beside_users(test: &str, users: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-config-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("users"), users).unwrap();
        dir.join("t.yaml")
    }

    #[test]
    fn users_and_users_file_merge_with_users_winning() {
        let file = beside_users(
            "merge",
            "# a comment\n\n  test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/  \ntest2:$1$saltsalt$tTWg0JeO/sYmHvtKmZE8c.\n",
        );
        let a = auth(
            "{ users_file: users, users: [\"test2:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\", \"test3:$2y$04$D1CSqTArbwg7.0.2jTPF5u8ZYdQWXwg02u99ZCbO8FaGgmqTt4U5.\"] }",
            file.to_str().unwrap(),
        )
        .unwrap();
        let users: Vec<(&str, &str)> = a
            .users
            .iter()
            .map(|(n, h)| (n.as_str(), h.as_str()))
            .collect();
        assert_eq!(
            users,
            vec![
                ("test", "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"),
                ("test2", "{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="),
                (
                    "test3",
                    "$2y$04$D1CSqTArbwg7.0.2jTPF5u8ZYdQWXwg02u99ZCbO8FaGgmqTt4U5."
                )
            ]
        );
        assert_eq!(a.realm, DEFAULT_BASIC_AUTH_REALM);
        assert_eq!((a.header_field, a.remove_header), (None, false));
        let a = auth(
            "{ users: [\"u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\"], realm: \"my realm\", header_field: X-User, remove_header: true }",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(a.realm, "my realm");
        assert_eq!(a.header_field.as_deref(), Some("X-User"));
        assert!(a.remove_header);
    }

    #[test]
    fn users_file_errors_name_the_key_and_the_line() {
        let path = beside_users(
            "errors",
            "ok:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n\nno-colon\na:b:c\nplain:test\nbell\u{7}:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n",
        );
        let file = path.to_str().unwrap();
        let dir = path.parent().unwrap();
        let users = dir.join("users");
        let users = users.display();
        assert_eq!(
            auth("{ users_file: users }", file).unwrap_err(),
            vec![
                format!("{file}:5:31: users file `{users}` line 3: a user must be `name:hash`, as htpasswd writes it"),
                format!("{file}:5:31: users file `{users}` line 4: a user must be `name:hash`, as htpasswd writes it"),
                format!("{file}:5:31: users file `{users}` line 5: user `plain`'s hash is not one weir verifies: bcrypt (`htpasswd -B`), MD5 (`htpasswd -m`) or SHA-1 (`htpasswd -s`)"),
                format!("{file}:5:31: users file `{users}` line 6: a user's name must be printable text"),
            ]
        );
        let missing = dir.join("missing");
        let errs = auth("{ users_file: missing }", file).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with(&format!(
                "{file}:5:31: cannot read users file `{}`: ",
                missing.display()
            )),
            "{errs:?}"
        );
    }

    #[test]
    fn basic_auth_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  auth:\n    basic_auth: {body}\n");
        assert_eq!(
            errors(&mw("{ users: [test, \"a:b:c\"] }")),
            vec![
                "t.yaml:5:27: a user must be `name:hash`, as htpasswd writes it",
                "t.yaml:5:33: a user must be `name:hash`, as htpasswd writes it"
            ]
        );
        assert_eq!(
            errors(&mw("{ users: [\"t:$2y$05$short\", \"u:$5$salt$hash\", \"v:{SHA}x\"] }")),
            [(27, "t"), (45, "u"), (63, "v")]
                .map(|(column, user)| format!("t.yaml:5:{column}: user `{user}`'s hash is not one weir verifies: bcrypt (`htpasswd -B`), MD5 (`htpasswd -m`) or SHA-1 (`htpasswd -s`)"))
        );
        assert_eq!(
            errors(&mw("{ users: [] }")),
            vec!["t.yaml:5:17: `basic_auth` needs at least one user, in `users` or `users_file`"]
        );
        assert_eq!(
            errors(&mw(
                "{ users: [\"u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\"], realm: 'a \"b\"', header_field: \"X User\" }"
            )),
            vec![
                "t.yaml:5:74: `realm` must be printable text without `\"` or `\\`",
                "t.yaml:5:97: `X User` is not a valid header name"
            ]
        );
        assert_eq!(
            errors(&mw("{ users: [\"u:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\"], remove_header: maybe, realms: x }")),
            vec![
                "t.yaml:5:82: `remove_header` must be `true` or `false`, found `maybe`",
                "t.yaml:5:89: unknown key `realms` in `basic_auth`; expected one of: users, users_file, realm, header_field, remove_header"
            ]
        );
    }
}
