//! Debian's nginx with `libnginx-mod-http-lua` (lua-nginx-module and lua-resty-core), each
//! location running one Lua script file by `content_by_lua_file`: the peer weir's `lua`
//! action is compared with.

use super::*;

/// nginx with the Lua module; killed on drop.
pub struct NginxLua {
    pub child: Child,
    pub addr: SocketAddr,
    pub dir: std::path::PathBuf,
}

impl NginxLua {
    /// nginx serving `/case/NAME` from `scripts/NAME.lua` for each name, after the phases
    /// given with it (`access` for `access_by_lua_file scripts/NAME.access.lua`), with
    /// `http_extra` at the `http` level (a `lua_shared_dict`).
    pub fn start(
        scripts: &std::path::Path,
        names: &[(&str, &[&str])],
        http_extra: &str,
    ) -> NginxLua {
        for _ in 0..5 {
            if let Some(nginx) = NginxLua::try_start(scripts, names, http_extra) {
                return nginx;
            }
        }
        panic!(
            "nginx with the Lua module did not start (scripts/test installs libnginx-mod-http-lua)"
        );
    }

    fn try_start(
        scripts: &std::path::Path,
        names: &[(&str, &[&str])],
        http_extra: &str,
    ) -> Option<NginxLua> {
        let dir = temp_dir("nginx-lua");
        let port = free_port();
        // `set $myvar ''`: nginx writes only variables it knows (weir writes any).
        let locations: String = names
            .iter()
            .map(|(name, phases)| {
                let dir = scripts.display();
                let phases: String = phases
                    .iter()
                    .map(|phase| format!("{phase}_by_lua_file {dir}/{name}.{phase}.lua; "))
                    .collect();
                format!(
                    "    location = /case/{name} {{ set $myvar ''; {phases}content_by_lua_file {dir}/{name}.lua; }}\n"
                )
            })
            .collect();
        let conf = format!(
            "load_module /usr/lib/nginx/modules/ndk_http_module.so;\n\
             load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;\n\
             daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  default_type text/plain;\n  absolute_redirect off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n  {http_extra}\n\
               server {{\n    listen 127.0.0.1:{port};\n{locations}  }}\n}}\n",
            dir = dir.display()
        );
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let Some(child) = spawn_nginx(&dir, &conf, addr) else {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            assert!(
                !log.contains("[emerg]"),
                "nginx with the Lua module refused its config: {log}"
            );
            return None;
        };
        Some(NginxLua { child, addr, dir })
    }

    /// What nginx wrote to its error log.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for NginxLua {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// weir's side of [`NginxLua::start`]: `/case/NAME` runs `scripts/NAME.lua`, after a `lua`
/// middleware with the phases given with it (`scripts/NAME.PHASE.lua`); `workers` workers,
/// `lua_keys` the `lua:` block's keys (each line indented by two).
pub fn weir_lua_cases(
    scripts: &std::path::Path,
    names: &[(&str, &[&str])],
    workers: usize,
    lua_keys: &str,
) -> String {
    let dir = scripts.display();
    let mut yaml = format!(
        "server: {{ workers: {workers} }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         lua:\n{lua_keys}routers:\n"
    );
    let mut middlewares = String::new();
    for (name, phases) in names {
        let chain = if phases.is_empty() {
            String::new()
        } else {
            let files: Vec<String> = phases
                .iter()
                .map(|phase| format!("{phase}_file: \"{dir}/{name}.{phase}.lua\""))
                .collect();
            middlewares.push_str(&format!(
                "  m_{name}: {{ lua: {{ {} }} }}\n",
                files.join(", ")
            ));
            format!("    middlewares: [m_{name}]\n")
        };
        yaml.push_str(&format!(
            "  {name}:\n    rule: \"Path(`/case/{name}`)\"\n{chain}    lua: {{ content_file: \"{dir}/{name}.lua\" }}\n"
        ));
    }
    if !middlewares.is_empty() {
        yaml.push_str("middlewares:\n");
        yaml.push_str(&middlewares);
    }
    yaml
}

/// A config with one `lua` route at `/` running `script`, `lua_keys` the `lua:` block's keys
/// (each line indented by two) and `routers` more routers (YAML under `routers:`).
pub fn weir_one_script(workers: usize, lua_keys: &str, routers: &str, script: &str) -> String {
    format!(
        "server: {{ workers: {workers} }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         lua:\n{lua_keys}routers:\n{routers}  \
         script:\n    rule: \"PathPrefix(`/`)\"\n    lua:\n      content: |\n{}",
        script
            .lines()
            .map(|l| format!("        {l}\n"))
            .collect::<String>()
    )
}

/// Fails listing the cases whose answers differ between nginx and weir, with nginx's error
/// log (or its end).
pub fn assert_same_answers(differences: &[String], cases: usize, nginx_log: &str) {
    assert!(
        differences.is_empty(),
        "{} of {cases} cases differ:\n{}\nnginx's error log:\n{nginx_log}",
        differences.len(),
        differences.join("\n"),
    );
}
