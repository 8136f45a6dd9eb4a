//! The Lua keys: the instance-wide `lua:` block, a router's `lua: { content }` action and the
//! `lua` middleware's phases; every script read (inline or from its file) and compiled here,
//! so `weir check` reports a syntax error at its line (docs/lua.md).

use super::{Fields, Loader};
use crate::model::{LuaCode, LuaPhases, LuaSettings};
use crate::yaml::Node;

/// The `lua` middleware's phases, each also as `PHASE_file`.
const PHASES: &[&str] = &["rewrite", "access", "header_filter", "body_filter", "log"];

impl Loader<'_> {
    /// The top-level `lua:` block.
    pub(super) fn lua_settings(&mut self, node: &Node) -> Option<LuaSettings> {
        let f = self.fields(
            node,
            "`lua`",
            &[
                "package_path",
                "shared_dicts",
                "init",
                "init_file",
                "init_worker",
                "init_worker_file",
                "max_run_time",
                "max_memory",
            ],
        )?;
        let mut settings = LuaSettings {
            prefix: self.prefix(),
            ..LuaSettings::default()
        };
        if let Some(n) = f.get("package_path") {
            let path = self.string(n, "`package_path`")?;
            settings.package_path = Some(self.resolve_package_path(&path));
        }
        if let Some(n) = f.get("shared_dicts") {
            for (name, size_node) in self.named(Some(n), "`shared_dicts`") {
                match self.size(size_node, &format!("shared dict `{name}`")) {
                    Some(0) => {
                        let message = format!("shared dict `{name}` must not be empty");
                        self.error(size_node.pos, message);
                    }
                    Some(size) => settings.shared_dicts.push((name, size)),
                    None => {}
                }
            }
        }
        settings.init = self.lua_script(&f, "init")?;
        settings.init_worker = self.lua_script(&f, "init_worker")?;
        self.duration_field(&f, "max_run_time", &mut settings.max_run_time);
        if settings.max_run_time.is_zero() {
            let pos = f.get("max_run_time").map_or(f.pos, |n| n.pos);
            self.error(pos, "`max_run_time` must be longer than 0s");
        }
        if let Some(n) = f.get("max_memory") {
            match self.size(n, "`max_memory`") {
                Some(bytes) if bytes < 1 << 20 => {
                    self.error(n.pos, "`max_memory` must be at least 1MiB")
                }
                Some(bytes) => settings.max_memory = bytes,
                None => {}
            }
        }
        Some(settings)
    }

    /// A router's `lua: { content | content_file }`.
    pub(super) fn lua_content(&mut self, node: &Node) -> Option<LuaCode> {
        let f = self.fields(node, "router `lua`", &["content", "content_file"])?;
        let code = self.lua_script(&f, "content")?;
        if code.is_none() {
            self.error(
                f.pos,
                "`lua` needs `content` (inline code) or `content_file`",
            );
        }
        code
    }

    /// The `lua` middleware: at least one phase.
    pub(super) fn lua_phases(&mut self, node: &Node) -> Option<LuaPhases> {
        let keys: Vec<String> = PHASES
            .iter()
            .flat_map(|p| [p.to_string(), format!("{p}_file")])
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let f = self.fields(node, "middleware `lua`", &keys)?;
        let phases = LuaPhases {
            rewrite: self.lua_script(&f, "rewrite")?,
            access: self.lua_script(&f, "access")?,
            header_filter: self.lua_script(&f, "header_filter")?,
            body_filter: self.lua_script(&f, "body_filter")?,
            log: self.lua_script(&f, "log")?,
        };
        if phases == LuaPhases::default() {
            self.error(
                f.pos,
                format!(
                    "the `lua` middleware needs at least one of: {}",
                    keys.join(", ")
                ),
            );
            return None;
        }
        Some(phases)
    }

    /// `key` (inline code) or `key_file` (a script, relative to the config file), compiled:
    /// `Some(None)` when neither is there, `None` after an error.
    fn lua_script(&mut self, f: &Fields<'_>, key: &str) -> Option<Option<LuaCode>> {
        let file_key = format!("{key}_file");
        let (inline, file) = (f.get(key), f.get(&file_key));
        if let (Some(_), Some(n)) = (inline, file) {
            self.error(n.pos, format!("give `{key}` or `{file_key}`, not both"));
            return None;
        }
        let code = if let Some(n) = inline {
            let text = self.string(n, &format!("`{key}`"))?;
            // The node's line is its text's first (a block scalar's too): padding makes
            // Lua count the config file's lines.
            LuaCode {
                chunk_name: format!("@{}", self.file_name),
                source: "\n".repeat(n.pos.line.saturating_sub(1)) + &text,
            }
        } else if let Some(n) = file {
            let name = self.string(n, &format!("`{file_key}`"))?;
            let path = self.base.join(&name);
            match std::fs::read_to_string(&path) {
                Ok(source) => LuaCode {
                    chunk_name: format!("@{}", path.display()),
                    source,
                },
                Err(e) => {
                    let shown = path.display();
                    self.error(n.pos, format!("cannot read Lua script `{shown}`: {e}"));
                    return None;
                }
            }
        } else {
            return Some(None);
        };
        let pos = inline.or(file).map_or(f.pos, |n| n.pos);
        if let Err(message) = compile(&code) {
            let pos = match (inline, syntax_error_line(&message)) {
                // Inline code: the line Lua names is the config file's.
                (Some(_), Some(line)) => crate::yaml::Pos {
                    line,
                    column: if line == pos.line { pos.column } else { 1 },
                },
                _ => pos,
            };
            self.error(pos, format!("Lua syntax error: {message}"));
            return None;
        }
        Some(Some(code))
    }

    /// The config file's folder as nginx's `-p` prefix reads: absolute, ending in `/`.
    fn prefix(&self) -> String {
        let dir = match self.base.as_os_str().is_empty() {
            true => std::env::current_dir().unwrap_or_default(),
            false => std::path::absolute(&self.base).unwrap_or_else(|_| self.base.clone()),
        };
        let dir = dir.display().to_string();
        match dir.ends_with('/') {
            true => dir,
            false => format!("{dir}/"),
        }
    }

    /// `package_path`'s templates, each relative one made absolute against the config
    /// file's folder (`;;`, LuaJIT's default path, is kept).
    fn resolve_package_path(&self, path: &str) -> String {
        path.split(';')
            .map(|template| {
                if template.is_empty() || template.starts_with('/') {
                    template.to_string()
                } else {
                    self.base.join(template).display().to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// Compiles `code` in a VM without libraries, as each worker will: LuaJIT's message on a
/// syntax error (`FILE:LINE: message`).
fn compile(code: &LuaCode) -> Result<(), String> {
    let lua = mlua::Lua::new_with(mlua::StdLib::NONE, mlua::LuaOptions::new())
        .map_err(|e| e.to_string())?;
    match lua
        .load(code.source.as_str())
        .set_name(code.chunk_name.as_str())
        .into_function()
    {
        Ok(_) => Ok(()),
        Err(mlua::Error::SyntaxError { message, .. }) => Err(message),
        Err(e) => Err(e.to_string()),
    }
}

/// The line a LuaJIT syntax error names (`FILE:LINE: message`).
fn syntax_error_line(message: &str) -> Option<usize> {
    let mut parts = message.splitn(3, ':');
    let _file = parts.next()?;
    parts.next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{errors, BASE};
    use crate::load::load_str;
    use crate::model::{Action, MiddlewareKind};

    fn config(text: &str) -> crate::model::Config {
        load_str(&format!("{BASE}{text}"), "t.yaml").expect("a valid config")
    }

    #[test]
    fn an_inline_content_script_is_an_action_counted_in_config_lines() {
        let cfg =
            config("routers:\n  r: { rule: \"Path(`/`)\", lua: { content: \"ngx.say('hi')\" } }\n");
        let Action::Lua(code) = &cfg.routers[0].action else {
            panic!("a lua action");
        };
        assert_eq!(code.chunk_name, "@t.yaml");
        assert_eq!(code.source, "\n\n\nngx.say('hi')");
        let lua = cfg.lua.expect("defaults when a route uses Lua");
        assert_eq!(lua.max_run_time, std::time::Duration::from_secs(1));
        assert_eq!(lua.max_memory, 64 << 20);
    }

    #[test]
    fn a_syntax_error_in_inline_code_is_at_its_config_line() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    lua:\n      content: |\n        local x = 1\n        x = = 2\n        ngx.say(x)\n"
        ));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0]
                .starts_with("t.yaml:9:1: Lua syntax error: t.yaml:9: unexpected symbol near '='"),
            "{errs:?}"
        );
        let errs = errors(&format!(
            "{BASE}routers:\n  r: {{ rule: \"Path(`/`)\", lua: {{ content: \"x =\" }} }}\n"
        ));
        assert!(
            errs[0].starts_with("t.yaml:4:43: Lua syntax error: t.yaml:4: unexpected symbol"),
            "{errs:?}"
        );
    }

    #[test]
    fn a_syntax_error_in_a_script_file_names_the_file_and_its_line() {
        let dir = std::env::temp_dir().join(format!("weir-lua-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        std::fs::write(dir.join("bad.lua"), "local a = 1\n\nif a then\n").expect("a script");
        let file = dir.join("w.yaml");
        let text = format!(
            "{BASE}routers:\n  r: {{ rule: \"Path(`/`)\", lua: {{ content_file: bad.lua }} }}\n"
        );
        let errs: Vec<String> = load_str(&text, &file.display().to_string())
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        let script = dir.join("bad.lua").display().to_string();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains(&format!(
                ":4:48: Lua syntax error: {script}:4: 'end' expected"
            )),
            "{errs:?}"
        );
        let text = format!(
            "{BASE}routers:\n  r: {{ rule: \"Path(`/`)\", lua: {{ content_file: none.lua }} }}\n"
        );
        let errs = load_str(&text, &file.display().to_string()).unwrap_err();
        assert!(
            errs[0].message.starts_with("cannot read Lua script"),
            "{errs:?}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_lua_block_reads_its_keys() {
        let cfg = config(
            "lua:\n  package_path: \"lib/?.lua;/usr/share/lua/5.1/?.lua;;\"\n  shared_dicts: { counters: 1MiB }\n  init: \"x = 1\"\n  max_run_time: 250ms\n  max_memory: 16MiB\n",
        );
        let lua = cfg.lua.expect("the block");
        assert_eq!(
            lua.package_path.as_deref(),
            Some("lib/?.lua;/usr/share/lua/5.1/?.lua;;")
        );
        assert_eq!(lua.shared_dicts, vec![("counters".to_string(), 1 << 20)]);
        assert_eq!(lua.init.map(|c| c.source), Some("\n\n\n\n\nx = 1".into()));
        assert_eq!(lua.max_run_time, std::time::Duration::from_millis(250));
        assert_eq!(lua.max_memory, 16 << 20);
    }

    #[test]
    fn bad_lua_settings_say_what_was_expected() {
        let errs = errors(&format!(
            "{BASE}lua:\n  shared_dicts: {{ c: lots }}\n  max_run_time: 0s\n  max_memory: 1KiB\n  jit: on\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        let empty = errors(&format!("{BASE}lua:\n  shared_dicts: {{ z: 0 }}\n"));
        assert_eq!(
            empty,
            vec!["t.yaml:4:22: shared dict `z` must not be empty"]
        );
        assert!(
            errs[0].starts_with("t.yaml:4:22: shared dict `c` must be a size"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:5:17: `max_run_time` must be longer"),
            "{errs:?}"
        );
        assert!(
            errs[2].starts_with("t.yaml:6:15: `max_memory` must be at least 1MiB"),
            "{errs:?}"
        );
        assert!(
            errs[3].starts_with("t.yaml:7:3: unknown key `jit` in `lua`"),
            "{errs:?}"
        );
    }

    #[test]
    fn the_lua_action_and_middleware_need_their_code() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r: {{ rule: \"Path(`/`)\", lua: {{}} }}\nmiddlewares:\n  m: {{ lua: {{ acces: \"x()\" }} }}\n  n: {{ lua: {{ access: \"x()\", access_file: a.lua }} }}\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(
            errs[0].starts_with("t.yaml:4:32: `lua` needs `content`"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:6:13: the `lua` middleware needs"),
            "{errs:?}"
        );
        assert!(
            errs[2].starts_with(
                "t.yaml:6:15: unknown key `acces` in middleware `lua` (did you mean `access`?)"
            ),
            "{errs:?}"
        );
        assert!(
            errs[3].starts_with("t.yaml:7:43: give `access` or `access_file`, not both"),
            "{errs:?}"
        );
    }

    #[test]
    fn a_lua_middleware_keeps_each_phase() {
        let cfg = config(
            "middlewares:\n  m: { lua: { access: \"ngx.var.x = 1\", log: \"ngx.log(ngx.ERR, 'x')\" } }\n",
        );
        let MiddlewareKind::Lua(phases) = &cfg.middlewares[0].kind else {
            panic!("a lua middleware");
        };
        assert!(phases.access.is_some() && phases.log.is_some());
        assert!(phases.rewrite.is_none() && phases.header_filter.is_none());
        assert!(phases.body_filter.is_none());
    }

    #[test]
    fn a_body_filter_is_a_phase_with_its_file_form() {
        let cfg = config(
            "middlewares:\n  m: { lua: { body_filter: \"ngx.arg[1] = string.upper(ngx.arg[1])\" } }\n",
        );
        let MiddlewareKind::Lua(phases) = &cfg.middlewares[0].kind else {
            panic!("a lua middleware");
        };
        assert!(phases.body_filter.is_some());
        let errs = errors(&format!(
            "{BASE}middlewares:\n  m: {{ lua: {{ body_filter: \"x()\", body_filter_file: b.lua }} }}\n  n: {{ lua: {{ body_filter: \"ngx.arg[1] = = 1\" }} }}\n  o: {{ lua: {{ body_fliter: \"x()\" }} }}\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(
            errs[0].starts_with("t.yaml:4:53: give `body_filter` or `body_filter_file`, not both"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:5:28: Lua syntax error: t.yaml:5: unexpected symbol"),
            "{errs:?}"
        );
        assert!(
            errs[3].starts_with("t.yaml:6:15: unknown key `body_fliter` in middleware `lua` (did you mean `body_filter`?)"),
            "{errs:?}"
        );
    }
}
