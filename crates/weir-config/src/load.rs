//! Turns a positioned YAML tree into the validated [`Config`], collecting every error it finds
//! (not just the first) as `FILE:LINE:COLUMN: message`, each saying what was expected.

mod acme;
mod cache;
mod document;
mod elasticsearch;
mod entrypoints;
mod error_pages;
mod forward_auth;
mod health;
mod http3;
pub(crate) use http3::fill_http3;
mod jwt;
mod lua;
mod middlewares;
mod providers;
mod retry_expression;
mod routers;
mod server;
mod services;
mod stores;
pub(crate) mod suggest;
mod tcp;
mod tracing;
mod upstream;
mod values;

use crate::model::*;
use crate::yaml::{self, Node, Pos, Value};
pub use acme::acme_warnings;
pub use document::{load_file_with, load_str_with, Document, Sources};
pub use jwt::parse_jwk_set;
use routers::Known;
pub use server::DEFAULT_ADMIN_ADDRESS;
use std::fmt;
pub use values::{expand_env, is_header_name, is_header_value, parse_duration, parse_size};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.column, self.message
        )
    }
}

/// An error about a config file for the user: one about a place in it (it starts with
/// `LINE:COLUMN:`, as compile errors do) becomes `FILE:LINE:COLUMN: message`, like every other
/// config error.
pub fn located(file: &str, error: &str) -> String {
    if error.starts_with(|c: char| c.is_ascii_digit()) {
        format!("{file}:{error}")
    } else {
        format!("{file}: {error}")
    }
}

/// Reads and validates a config file.
pub fn load_file(path: &str) -> Result<Config, Vec<ConfigError>> {
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, path),
        Err(e) => Err(vec![ConfigError {
            file: path.to_string(),
            pos: Pos { line: 1, column: 1 },
            message: format!("cannot read config file: {e}"),
        }]),
    }
}

/// Validates config text; `file` is only used to label errors.
pub fn load_str(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    load_str_with_env(text, file, &|name| std::env::var(name).ok())
}

/// `load_str` with `${NAME}` read from `env` rather than the process's environment.
pub fn load_str_with_env(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<ConfigError>> {
    let root = yaml::parse(text).map_err(|e| {
        vec![ConfigError {
            file: file.to_string(),
            pos: e.pos,
            message: format!("invalid YAML: {}", e.message),
        }]
    })?;
    load_root_with_env(&root, file, env).map_err(|errors| {
        errors
            .into_iter()
            .map(|(pos, message)| ConfigError {
                file: file.to_string(),
                pos,
                message,
            })
            .collect()
    })
}

/// Validates a parsed config; relative paths in it are taken from `file`'s folder. Every
/// error, in the order of their positions.
fn load_root(root: &Node, file: &str) -> Result<Config, Vec<(Pos, String)>> {
    load_root_with_env(root, file, &|name| std::env::var(name).ok())
}

/// `load_root` with `${NAME}` read from `env`.
fn load_root_with_env(
    root: &Node,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<(Pos, String)>> {
    let mut loader = Loader {
        errors: Vec::new(),
        env,
        base: std::path::Path::new(file)
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default(),
        file_name: file.to_string(),
    };
    let config = loader.config(root);
    if loader.errors.is_empty() {
        Ok(config)
    } else {
        loader.errors.sort_by_key(|(pos, _)| (pos.line, pos.column));
        Err(loader.errors)
    }
}

struct Loader<'e> {
    errors: Vec<(Pos, String)>,
    env: &'e dyn Fn(&str) -> Option<String>,
    /// The config file's folder: relative file paths in the config are resolved against it.
    base: std::path::PathBuf,
    /// The config file as errors name it (Lua's name for inline scripts).
    file_name: String,
}

/// The entries of a mapping whose keys have been checked against the allowed set.
struct Fields<'n> {
    pos: Pos,
    entries: Vec<(&'n str, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, v)| *k == key && !matches!(v.value, Value::Null))
            .map(|(_, v)| *v)
    }
}

impl Loader<'_> {
    fn config(&mut self, root: &Node) -> Config {
        // Once per file, at its first Traefik key, beside the unknown-key errors.
        if let Value::Map(entries) = &root.value {
            let traefik = entries
                .iter()
                .find_map(|(key, _)| Some((key.pos, suggest::traefik_hint(key.as_str()?)?)));
            if let Some((pos, hint)) = traefik {
                self.error(pos, hint);
            }
        }
        let top = self
            .fields(
                root,
                "the top level",
                &[
                    "server",
                    "entrypoints",
                    "routers",
                    "services",
                    "middlewares",
                    "tcp",
                    "udp",
                    "caches",
                    "providers",
                    "lua",
                ],
            )
            .unwrap_or(Fields {
                pos: root.pos,
                entries: Vec::new(),
            });
        let server = self.server(top.get("server"));
        let entrypoints: Vec<Entrypoint> = self
            .named(top.get("entrypoints"), "entrypoints")
            .into_iter()
            .filter_map(|(name, node)| self.entrypoint(name, node))
            .collect();
        self.check_addresses_unique(&entrypoints);
        self.check_acme_entrypoints(&entrypoints);
        if top.get("entrypoints").is_none() {
            self.error(
                top.pos,
                "missing `entrypoints`: at least one is needed, e.g. `entrypoints: { web: { address: \":8080\" } }`",
            );
        }
        let services: Vec<Service> = self
            .named(top.get("services"), "services")
            .into_iter()
            .filter_map(|(name, node)| self.service(name, node))
            .collect();
        let middlewares: Vec<Middleware> = self
            .named(top.get("middlewares"), "middlewares")
            .into_iter()
            .filter_map(|(name, node)| self.middleware(name, node))
            .collect();
        let chains = self.resolve_chains(&middlewares);
        self.check_error_page_services(&middlewares, &services);
        let caches: Vec<Cache> = self
            .named(top.get("caches"), "caches")
            .into_iter()
            .filter_map(|(name, node)| self.cache(name, node))
            .collect();
        let mut routers = Vec::new();
        for (name, node) in self.named(top.get("routers"), "routers") {
            let known = Known {
                entrypoints: &entrypoints,
                services: &services,
                middlewares: &middlewares,
                chains: &chains,
                caches: &caches,
                tracing: server.tracing.is_some(),
            };
            if let Some(router) = self.router(name, node, &known) {
                routers.push(router);
            }
        }
        let tcp = self.tcp(top.get("tcp"), &entrypoints);
        let udp = self.udp(top.get("udp"), &entrypoints);
        for r in &routers {
            self.check_tcp_entrypoints(&r.name, r.pos, &r.entrypoints, &entrypoints, "router");
        }
        let providers = self.providers(top.get("providers"));
        // lua: begin
        let uses_lua = routers.iter().any(|r| matches!(r.action, Action::Lua(_)))
            || middlewares
                .iter()
                .any(|m| matches!(m.kind, MiddlewareKind::Lua(_)));
        let lua = match top.get("lua") {
            Some(node) => self.lua_settings(node),
            None => uses_lua.then(LuaSettings::default),
        };
        // lua: end
        Config {
            server,
            entrypoints,
            routers,
            services,
            middlewares,
            tcp,
            udp,
            caches,
            providers,
            lua,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn errors(text: &str) -> Vec<String> {
        load_str(text, "t.yaml")
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    pub(super) const BASE: &str = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n";

    #[test]
    fn unknown_key_names_key_and_allowed_keys() {
        let errs = errors(&format!("{BASE}servr: {{}}\n"));
        assert_eq!(
            errs,
            vec!["t.yaml:3:1: unknown key `servr` in the top level (did you mean `server`?); expected one of: server, entrypoints, routers, services, middlewares, tcp, udp, caches, providers, lua"]
        );
        let errs = errors(&format!(
            "{BASE}services:\n  s:\n    servers: []\n    lb: x\n"
        ));
        assert!(
            errs[0].starts_with(
                "t.yaml:6:5: unknown key `lb` in service `s`; expected one of: servers,"
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn a_misspelt_key_or_name_gets_a_suggestion() {
        let errs = errors(&format!("{BASE}servr: {{}}\n"));
        assert_eq!(
            errs,
            vec!["t.yaml:3:1: unknown key `servr` in the top level (did you mean `server`?); expected one of: server, entrypoints, routers, services, middlewares, tcp, udp, caches, providers, lua"]
        );
        let errs = errors(&format!(
            "{BASE}routers:\n  r: {{ rule: \"PathPrefix(`/`)\", service: backnd }}\nservices:\n  backend: {{ servers: [{{ url: \"http://127.0.0.1:1\" }}] }}\n"
        ));
        assert_eq!(
            errs,
            vec!["t.yaml:4:42: router `r` names service `backnd`, which is not defined (did you mean `backend`?); defined: backend"]
        );
    }

    #[test]
    fn a_misspelt_value_from_a_list_gets_a_suggestion() {
        let errs = errors(&format!(
            "{BASE}services:\n  s: {{ servers: [{{ url: \"http://127.0.0.1:1\" }}], load_balancer: round_robbin }}\n"
        ));
        assert_eq!(
            errs,
            vec!["t.yaml:4:65: unknown load balancer `round_robbin` (did you mean `round_robin`?); expected one of: round_robin, least_conn, random, p2c, consistent_hash"]
        );
        let errs = errors(&format!(
            "{BASE}middlewares:\n  j: {{ jwt: {{ keys: [{{ kty: oct, k: c2VjcmV0 }}], algorithms: [RS265] }} }}\n"
        ));
        assert!(
            errs[1].starts_with(
                "t.yaml:4:63: unknown algorithm `RS265` (did you mean `RS256`?); expected one of: HS256,"
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn a_traefik_file_gets_a_hint() {
        let errs = errors(
            "entryPoints:\n  web: { address: \":80\" }\nhttp:\n  routers:\n    r: { rule: \"Host(`a`)\", service: s }\n",
        );
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(
            errs[0].starts_with("t.yaml:1:1: this looks like a Traefik configuration;"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:1:1: unknown key `entryPoints` in the top level (did you mean `entrypoints`?);"),
            "{errs:?}"
        );
        assert!(
            errs[3].starts_with("t.yaml:3:1: unknown key `http`"),
            "{errs:?}"
        );
        assert!(errs[2].contains("missing `entrypoints`"), "{errs:?}");
    }

    #[test]
    fn every_error_is_reported() {
        let errs = errors(&format!(
            "{BASE}server:\n  workers: many\n  graceful_timeout: soon\nservices:\n  s:\n    servers: [{{ url: \"ftp://x\" }}]\n    load_balancer: fastest\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:4:12:"));
        assert!(errs[1].starts_with("t.yaml:5:21:"));
        assert!(errs[2].contains("ftp://x"));
        assert!(errs[3].contains("unknown load balancer `fastest`"));
    }

    #[test]
    fn yaml_syntax_errors_have_positions() {
        let errs = errors("entrypoints:\n  web: [\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("t.yaml:3:"), "{errs:?}");
    }
}
