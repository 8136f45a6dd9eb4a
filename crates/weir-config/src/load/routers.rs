//! `routers.NAME`: HTTP routers (entrypoints, rule, priority, middlewares, and one action:
//! service, respond, redirect or static), and the parts TCP and UDP routers read the same way
//! (entrypoints, rule and priority, names that must be defined).

use super::values::{is_header_value, offset_pos};
use super::{Fields, Loader};
use crate::model::*;
use crate::rule;
use crate::yaml::{Node, Pos};

/// What a router may name.
#[derive(Clone, Copy)]
pub(super) struct Known<'a> {
    pub(super) entrypoints: &'a [Entrypoint],
    pub(super) services: &'a [Service],
    pub(super) middlewares: &'a [Middleware],
    /// Each chain's flat list of middlewares.
    pub(super) chains: &'a std::collections::HashMap<String, Vec<String>>,
    pub(super) caches: &'a [Cache],
    /// Whether `server.tracing` is configured (a router's `tracing` adjusts it).
    pub(super) tracing: bool,
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

impl Loader<'_> {
    /// Whether `name` is one of `defined`. If not, says at `pos` that `what` names a `kind`
    /// that is not defined, and lists the ones that are.
    pub(super) fn is_defined<'d>(
        &mut self,
        pos: Pos,
        (what, kind, name): (&str, &str, &str),
        defined: impl Iterator<Item = &'d str> + Clone,
    ) -> bool {
        if defined.clone().any(|d| d == name) {
            return true;
        }
        let known: Vec<&str> = defined.collect();
        self.error(
            pos,
            format!(
                "{what} names {kind} `{name}`, which is not defined{}; defined: {}",
                super::suggest::did_you_mean(name, known.iter().copied()),
                list_or_none(&known)
            ),
        );
        false
    }

    /// A router's `entrypoints`, each of which must be defined. A TCP or UDP router's must
    /// also take its `transport` (with what to call one that does not); HTTP routers pass
    /// `None`. An error sets `ok` to false.
    pub(super) fn router_entrypoints(
        &mut self,
        f: &Fields<'_>,
        what: &str,
        entrypoints: &[Entrypoint],
        transport: Option<(Transport, &str)>,
        ok: &mut bool,
    ) -> Vec<String> {
        let Some(list) = f.get("entrypoints") else {
            return Vec::new();
        };
        let mut eps = Vec::new();
        for (ep, pos) in self.string_list(list, "`entrypoints`") {
            match (entrypoints.iter().find(|e| e.name == ep), transport) {
                (Some(e), Some((taken, other))) if e.transport != taken => {
                    self.error(
                        pos,
                        format!("{what} names entrypoint `{ep}`, which is {other}"),
                    );
                    *ok = false;
                }
                (Some(_), _) => {}
                (None, _) => {
                    let defined = entrypoints.iter().map(|e| e.name.as_str());
                    *ok &= self.is_defined(pos, (what, "entrypoint", &ep), defined);
                }
            }
            eps.push(ep);
        }
        eps
    }

    /// A router's `rule`, read by `parse` (`example` shows one when it is missing), and its
    /// `priority`.
    pub(super) fn router_rule<R>(
        &mut self,
        f: &Fields<'_>,
        what: &str,
        example: &str,
        parse: impl Fn(&str) -> Result<R, rule::RuleError>,
    ) -> Option<(String, R, i64)> {
        let Some(rule_node) = f.get("rule") else {
            self.error(
                f.pos,
                format!("{what} needs a `rule`, e.g. rule: {example}"),
            );
            return None;
        };
        let rule_text = self.string(rule_node, "`rule`")?;
        let rule = match parse(&rule_text) {
            Ok(rule) => rule,
            Err(e) => {
                self.error(
                    offset_pos(rule_node, &rule_text, e.offset),
                    format!("invalid rule: {}", e.message),
                );
                return None;
            }
        };
        let priority = self.router_priority(f.get("priority"), &rule_text)?;
        Some((rule_text, rule, priority))
    }

    /// A router's `priority`: as written, else the rule's length (Traefik's default).
    fn router_priority(&mut self, node: Option<&Node>, rule_text: &str) -> Option<i64> {
        let Some(p) = node else {
            return Some(rule_text.chars().count() as i64);
        };
        let text = self.string(p, "`priority`")?;
        match text.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    p.pos,
                    format!("`priority` must be a whole number, found `{text}`"),
                );
                None
            }
        }
    }

    pub(super) fn router(
        &mut self,
        name: String,
        node: &Node,
        known: &Known<'_>,
    ) -> Option<Router> {
        let Known {
            entrypoints,
            services,
            middlewares,
            chains,
            caches,
            tracing,
        } = *known;
        let what = format!("router `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "entrypoints",
                "rule",
                "priority",
                "middlewares",
                "service",
                "respond",
                "redirect",
                "static",
                "lua",
                "cache",
                "access_log",
                "tracing",
            ],
        )?;
        let access_log = match f.get("access_log") {
            Some(b) => self.boolean(b, "`access_log`").unwrap_or(true),
            None => true,
        };
        let mut ok = true;
        let eps = self.router_entrypoints(&f, &what, entrypoints, None, &mut ok);
        let (rule_text, rule, priority) =
            self.router_rule(&f, &what, "\"PathPrefix(`/`)\"", rule::parse)?;
        let mut mws = Vec::new();
        if let Some(list) = f.get("middlewares") {
            for (mw, pos) in self.string_list(list, "`middlewares`") {
                let defined = middlewares.iter().map(|m| m.name.as_str());
                ok &= self.is_defined(pos, (&what, "middleware", &mw), defined);
                // A chain stands for its members, in place.
                match chains.get(&mw) {
                    Some(members) => mws.extend(members.iter().cloned()),
                    None => mws.push(mw),
                }
            }
            // buffering: begin
            // The exchange applies one `buffering` per route: two would be one ignored.
            let buffering: Vec<&str> = mws
                .iter()
                .filter(|name| {
                    middlewares
                        .iter()
                        .any(|m| m.name == **name && matches!(m.kind, MiddlewareKind::Buffering(_)))
                })
                .map(String::as_str)
                .collect();
            if buffering.len() > 1 {
                let names = buffering.join("`, `");
                self.error(
                    list.pos,
                    format!(
                        "{what} has more than one `buffering` middleware (`{names}`): name one"
                    ),
                );
                ok = false;
            }
            // buffering: end
        }
        let actions: Vec<(&str, &Node)> = ["service", "respond", "redirect", "static", "lua"]
            .iter()
            .filter_map(|k| f.get(k).map(|n| (*k, n)))
            .collect();
        if actions.len() != 1 {
            let pos = actions.get(1).map(|a| a.1.pos).unwrap_or(f.pos);
            self.error(
                pos,
                format!(
                    "{what} must have exactly one action: `service`, `respond`, `redirect`, `static` or `lua`"
                ),
            );
            return None;
        }
        let (kind, body) = actions[0];
        let action = match kind {
            "service" => {
                let svc = self.string(body, "`service`")?;
                let defined = services.iter().map(|s| s.name.as_str());
                ok &= self.is_defined(body.pos, (&what, "service", &svc), defined);
                Action::Service(svc)
            }
            "respond" => Action::Respond(self.respond(body)?),
            "static" => Action::Static(self.static_files(body)?),
            "lua" => Action::Lua(self.lua_content(body)?),
            _ => Action::Redirect(self.redirect(body)?),
        };
        let cache = match f.get("cache") {
            None => None,
            Some(n) => {
                let cache = self.string(n, "`cache`")?;
                let defined = caches.iter().map(|c| c.name.as_str());
                ok &= self.is_defined(n.pos, (&what, "cache", &cache), defined);
                if !matches!(action, Action::Service(_)) {
                    self.error(n.pos, "`cache` applies to routers with a `service`");
                    ok = false;
                }
                Some(cache)
            }
        };
        let tracing_sample_rate = match f.get("tracing") {
            Some(n) => Some(self.router_tracing(n, &what, tracing)?),
            None => None,
        };
        ok.then_some(Router {
            name,
            pos: node.pos,
            entrypoints: eps,
            rule_text,
            rule,
            priority,
            middlewares: mws,
            action,
            cache,
            access_log,
            tracing_sample_rate,
        })
    }

    /// The `respond: { status, body, headers }` action (200 and empty by default).
    fn respond(&mut self, body: &Node) -> Option<Respond> {
        let rf = self.fields(body, "`respond`", &["status", "body", "headers"])?;
        let status = match rf.get("status") {
            Some(s) => self.uint(s, "`status`", 200, 599)? as u16,
            None => 200,
        };
        let body_text = match rf.get("body") {
            Some(b) => self.string(b, "`body`")?,
            None => String::new(),
        };
        let headers = rf
            .get("headers")
            .map(|h| self.header_map(h, "`headers`"))
            .unwrap_or_default();
        Some(Respond {
            status,
            body: body_text,
            headers,
        })
    }

    /// The `redirect: { to, status }` action (302 by default).
    fn redirect(&mut self, body: &Node) -> Option<Redirect> {
        let rf = self.fields(body, "`redirect`", &["to", "status"])?;
        let Some(to_node) = rf.get("to") else {
            self.error(
                rf.pos,
                "`redirect` needs `to`, e.g. to: \"https://example.com/\"",
            );
            return None;
        };
        let to = self.string(to_node, "`to`")?;
        if !is_header_value(&to) || to.is_empty() {
            self.error(
                to_node.pos,
                "`to` must be a non-empty URL without control characters",
            );
        }
        let status = match rf.get("status") {
            Some(s) => {
                let n = self.uint(s, "`status`", 300, 399)? as u16;
                if ![301, 302, 303, 307, 308].contains(&n) {
                    self.error(
                        s.pos,
                        format!(
                            "redirect status must be one of 301, 302, 303, 307, 308, found {n}"
                        ),
                    );
                }
                n
            }
            None => 302,
        };
        Some(Redirect { to, status })
    }

    fn static_files(&mut self, node: &Node) -> Option<StaticFiles> {
        const KEYS: &[&str] = &[
            "root",
            "index",
            "precompressed",
            "autoindex",
            "follow_symlinks",
            "dotfiles",
            "cache_control",
            "not_found",
        ];
        let f = self.fields(node, "`static`", KEYS)?;
        let Some(root_node) = f.get("root") else {
            self.error(f.pos, "`static` needs `root`, the folder to serve");
            return None;
        };
        let root_text = self.string(root_node, "`root`")?;
        let root = self.base.join(root_text);
        if !root.is_dir() {
            self.error(
                root_node.pos,
                format!("`root` {} is not a readable folder", root.display()),
            );
        }
        let index = match f.get("index") {
            Some(list) => {
                let names = self.string_list(list, "`index`");
                for (name, pos) in &names {
                    if name.is_empty() || name.contains('/') || name.starts_with('.') {
                        self.error(*pos, format!("index `{name}` must be a plain file name"));
                    }
                }
                names.into_iter().map(|(n, _)| n).collect()
            }
            None => vec!["index.html".to_string()],
        };
        let mut flag = |key: &str, default: bool| {
            f.get(key)
                .and_then(|n| self.boolean(n, &format!("`{key}`")))
                .unwrap_or(default)
        };
        let precompressed = flag("precompressed", true);
        let autoindex = flag("autoindex", false);
        let follow_symlinks = flag("follow_symlinks", false);
        let dotfiles = flag("dotfiles", false);
        let cache_control = match f.get("cache_control") {
            Some(n) => {
                let value = self.string(n, "`cache_control`")?;
                if !is_header_value(&value) {
                    self.error(n.pos, "`cache_control` must be a header value");
                }
                Some(value)
            }
            None => None,
        };
        let not_found = match f.get("not_found") {
            Some(n) => {
                let path = self.string(n, "`not_found`")?;
                let file = root.join(path.trim_start_matches('/'));
                if path.split('/').any(|seg| seg == "..") || !file.is_file() {
                    self.error(
                        n.pos,
                        format!("`not_found` {} is not a file under `root`", file.display()),
                    );
                }
                Some(path.trim_start_matches('/').to_string())
            }
            None => None,
        };
        Some(StaticFiles {
            root,
            index,
            precompressed,
            autoindex,
            follow_symlinks,
            dotfiles,
            cache_control,
            not_found,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    #[test]
    fn minimal_config_loads() {
        let cfg = load_str(
            &format!(
                "{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    respond: {{ body: hi }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.routers[0].priority, 9);
        assert!(matches!(cfg.routers[0].action, Action::Respond(_)));
    }

    #[test]
    fn missing_references_are_named() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    entrypoints: [websecure]\n    rule: \"Path(`/`)\"\n    middlewares: [nope]\n    service: api\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert_eq!(errs[0], "t.yaml:5:19: router `r` names entrypoint `websecure`, which is not defined; defined: web");
        assert_eq!(
            errs[1],
            "t.yaml:7:19: router `r` names middleware `nope`, which is not defined; defined: none"
        );
        assert_eq!(
            errs[2],
            "t.yaml:8:14: router `r` names service `api`, which is not defined; defined: none"
        );
    }

    #[test]
    fn rule_errors_point_inside_the_rule() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    rule: \"Host(`a`) && Paht(`/`)\"\n    respond: {{}}\n"
        ));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with(
                "t.yaml:5:25: invalid rule: unknown matcher `Paht` (did you mean `Path`?)"
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn exactly_one_action() {
        let errs = errors(&format!("{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    respond: {{}}\n    redirect: {{ to: /x }}\n"));
        assert!(
            errs[0].starts_with("t.yaml:7:15: router `r` must have exactly one action"),
            "{errs:?}"
        );
        let errs = errors(&format!("{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n"));
        assert!(errs[0].contains("exactly one action"));
    }
}
