//! `middlewares.NAME.errors`: the statuses caught (`"500-599"`, `"404"`), the service asked
//! for the page, its `query`, and `status_rewrites`; the service's name is checked once every
//! service is read ([`Loader::check_error_page_services`]).

use super::Loader;
use crate::model::*;
use crate::yaml::{Node, Value};

/// A status range as Traefik writes one: `"500-599"`, or one status `"404"`; both ends from
/// 100 to 599, the first not above the second.
fn parse_status_range(text: &str) -> Option<(u16, u16)> {
    let (low, high) = text.split_once('-').unwrap_or((text, text));
    let status = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|s| (100..=599).contains(s))
    };
    let (low, high) = (status(low)?, status(high)?);
    (low <= high).then_some((low, high))
}

const RANGE_EXPECTED: &str = "a status like `404` or a range like `500-599` (from 100 to 599)";

impl Loader<'_> {
    /// `errors: { status, service, query, status_rewrites }`; `status` and `service` needed.
    pub(super) fn error_pages(&mut self, node: &Node) -> Option<ErrorPages> {
        const KEYS: &[&str] = &["status", "service", "query", "status_rewrites"];
        let f = self.fields(node, "`errors`", KEYS)?;
        let (Some(status_node), Some(service_node)) = (f.get("status"), f.get("service")) else {
            self.error(f.pos, "`errors` needs `status` and `service`");
            return None;
        };
        let listed = self.string_list(status_node, "`status`");
        if listed.is_empty() {
            self.error(status_node.pos, "`status` must list at least one status");
        }
        let mut status = Vec::new();
        for (text, pos) in listed {
            match parse_status_range(&text) {
                Some(range) => status.push(range),
                None => self.error(pos, format!("`{text}` is not {RANGE_EXPECTED}")),
            }
        }
        let service = self.string(service_node, "`service`")?;
        let query = self.text_key(&f, "query");
        let mut status_rewrites = Vec::new();
        if let Some(rewrites) = f.get("status_rewrites") {
            self.status_rewrites(rewrites, &mut status_rewrites);
        }
        Some(ErrorPages {
            status,
            service,
            service_pos: service_node.pos,
            // As Traefik: one `/` in front, whatever the query starts with.
            query: format!("/{}", query.trim_start_matches('/')),
            status_rewrites,
        })
    }

    /// `status_rewrites: { RANGE: STATUS }`, in the order written.
    fn status_rewrites(&mut self, node: &Node, out: &mut Vec<((u16, u16), u16)>) {
        let Value::Map(entries) = &node.value else {
            let found = node.kind_name();
            let message = format!(
                "`status_rewrites` must be a mapping of a status range to a status, found {found}"
            );
            self.error(node.pos, message);
            return;
        };
        for (key, value) in entries {
            let Some(text) = self.string(key, "a status range") else {
                continue;
            };
            let Some(range) = parse_status_range(&text) else {
                self.error(key.pos, format!("`{text}` is not {RANGE_EXPECTED}"));
                continue;
            };
            if let Some(to) = self.uint(value, "a rewritten status", 100, 599) {
                out.push((range, to as u16));
            }
        }
    }

    /// Says where an `errors` middleware names a service that is not defined.
    pub(super) fn check_error_page_services(
        &mut self,
        middlewares: &[Middleware],
        services: &[Service],
    ) {
        for m in middlewares {
            if let MiddlewareKind::Errors(pages) = &m.kind {
                let what = format!("middleware `{}`", m.name);
                let defined = services.iter().map(|s| s.name.as_str());
                self.is_defined(
                    pages.service_pos,
                    (&what, "service", &pages.service),
                    defined,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};

    const PAGES: &str = "services:\n  pages:\n    servers: [{ url: \"http://127.0.0.1:9\" }]\n";

    fn config(body: &str) -> String {
        format!("{BASE}{PAGES}middlewares:\n  oops:\n    errors: {body}\n")
    }

    fn pages(body: &str) -> ErrorPages {
        let cfg = load_str(&config(body), "t.yaml").unwrap();
        match &cfg.middlewares[0].kind {
            MiddlewareKind::Errors(pages) => (**pages).clone(),
            other => panic!("not errors: {other:?}"),
        }
    }

    #[test]
    fn ranges_single_statuses_query_and_rewrites_are_read() {
        let p = pages(
            "{ status: [\"500-599\", \"404\", 418], service: pages, query: \"{status}.html\", status_rewrites: { \"500-503\": 500, \"404\": 410 } }",
        );
        assert_eq!(p.status, vec![(500, 599), (404, 404), (418, 418)]);
        assert_eq!(p.service, "pages");
        assert_eq!(p.query, "/{status}.html");
        assert_eq!(
            p.status_rewrites,
            vec![((500, 503), 500), ((404, 404), 410)]
        );
        let p = pages("{ status: [\"500\"], service: pages }");
        assert_eq!((p.query.as_str(), p.status_rewrites.len()), ("/", 0));
        assert_eq!(
            pages("{ status: [\"500\"], service: pages, query: \"//x\" }").query,
            "/x"
        );
    }

    #[test]
    fn bad_settings_are_told_where_they_are() {
        assert_eq!(
            errors(&config("{ status: [\"500-599\"] }")),
            vec!["t.yaml:8:13: `errors` needs `status` and `service`"]
        );
        assert_eq!(
            errors(&config("{ status: [\"5xx\", \"600\", \"599-500\"], service: pages }")),
            vec![
                "t.yaml:8:24: `5xx` is not a status like `404` or a range like `500-599` (from 100 to 599)",
                "t.yaml:8:31: `600` is not a status like `404` or a range like `500-599` (from 100 to 599)",
                "t.yaml:8:38: `599-500` is not a status like `404` or a range like `500-599` (from 100 to 599)",
            ]
        );
        assert_eq!(
            errors(&config("{ status: [], service: pages }")),
            vec!["t.yaml:8:23: `status` must list at least one status"]
        );
        assert_eq!(
            errors(&config(
                "{ status: [\"404\"], service: pages, status_rewrites: { \"4x\": 400, \"404\": 7 } }"
            )),
            vec![
                "t.yaml:8:67: `4x` is not a status like `404` or a range like `500-599` (from 100 to 599)",
                "t.yaml:8:85: a rewritten status must be a whole number from 100 to 599, found `7`",
            ]
        );
        assert_eq!(
            errors(&config("{ status: [\"404\"], service: pages, status_rewrites: [1] }")),
            vec!["t.yaml:8:65: `status_rewrites` must be a mapping of a status range to a status, found a list"]
        );
        assert_eq!(
            errors(&config("{ status: [\"404\"], service: pagez, colour: red }")),
            vec![
                "t.yaml:8:41: middleware `oops` names service `pagez`, which is not defined (did you mean `pages`?); defined: pages",
                "t.yaml:8:48: unknown key `colour` in `errors`; expected one of: status, service, query, status_rewrites",
            ]
        );
    }
}
