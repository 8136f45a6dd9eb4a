//! Lua scripts as lua-nginx-module runs them (docs/lua.md): the scripts of one compiled
//! configuration ([`LuaProgram`]), each worker's LuaJIT VM made from it on first use, and the
//! `content` action, which runs a script in a coroutine per request and turns what it wrote
//! into a reply (streamed once it flushes: `stream.rs`). The middleware's phases live in `phases.rs`, the `ngx` API in the `ngx_*`
//! modules, `ngx.shared` in `shared_dict.rs`, `cjson` in `cjson.rs`.

mod body_filter;
mod carried;
mod cjson;
mod cosocket;
mod cosocket_udp;
mod init_once;
mod ngx_output;
mod ngx_re;
mod ngx_req;
mod ngx_util;
mod ngx_worker;
mod phases;
mod raw;
mod request;
mod shared_dict;
mod stream;
mod timer;
mod vm;
mod watchdog;

use crate::http::codec::{Framing, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::local::LocalResponse;
use crate::reply::client::ClientSide;
use crate::reply::Reply;
use crate::worker::Worker;
pub use carried::{take_exec, Exec, PhaseScope};
pub use ngx_worker::enter_worker;
pub use phases::{Finished, PhaseScripts};
pub use request::ReadBody;
use request::RequestState;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
pub use timer::unfinished as unfinished_timers;
pub use vm::apply_program;
use weir_config::{Action, Config, LuaCode, LuaSettings, MiddlewareKind};

/// The most request body a script reads (`ngx.req.read_body`), as nginx's default
/// `client_max_body_size`.
const MAX_BODY: u64 = 1 << 20;

/// Tells one configuration's Lua programs apart, so a worker remakes its VM after a reload.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// The Lua part of one compiled configuration, shared by every worker: the settings and
/// every script, which each worker compiles into its own VM the first time one runs.
pub struct LuaProgram {
    generation: u64,
    settings: LuaSettings,
    /// Each script with the name its errors carry (`router NAME`).
    scripts: Vec<(String, LuaCode)>,
    dicts: Vec<(String, Arc<shared_dict::SharedDict>)>,
}

/// One script of a program: what a route's action holds.
pub struct LuaScript {
    program: Arc<LuaProgram>,
    index: usize,
}

impl LuaProgram {
    /// The program of `config`, when it has Lua; its shared dictionaries are kept over a
    /// reload that keeps their name and size.
    pub fn compile(config: &Config) -> Option<Arc<LuaProgram>> {
        let settings = config.lua.clone()?;
        let mut scripts: Vec<(String, LuaCode)> = config
            .routers
            .iter()
            .filter_map(|r| match &r.action {
                Action::Lua(code) => Some((format!("router `{}`", r.name), code.clone())),
                _ => None,
            })
            .collect();
        for m in &config.middlewares {
            let MiddlewareKind::Lua(phases) = &m.kind else {
                continue;
            };
            let each = [
                ("rewrite", &phases.rewrite),
                ("access", &phases.access),
                ("header_filter", &phases.header_filter),
                ("body_filter", &phases.body_filter),
                ("log", &phases.log),
            ];
            for (phase, code) in each {
                if let Some(code) = code {
                    scripts.push((phases::phase_key(&m.name, phase), code.clone()));
                }
            }
        }
        let dicts = settings
            .shared_dicts
            .iter()
            .map(|(name, size)| (name.clone(), shared_dict::SharedDict::named(name, *size)))
            .collect();
        Some(Arc::new(LuaProgram {
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            settings,
            scripts,
            dicts,
        }))
    }

    /// The script a router's `lua` action runs.
    pub fn content_script(self: &Arc<Self>, router: &str) -> Option<LuaScript> {
        let name = format!("router `{router}`");
        let index = self.scripts.iter().position(|(n, _)| *n == name)?;
        Some(LuaScript {
            program: self.clone(),
            index,
        })
    }
}

impl LuaScript {
    pub fn describe(&self) -> String {
        let code = &self.program.scripts[self.index].1;
        format!("run Lua from {}", code.chunk_name.trim_start_matches('@'))
    }
}

/// The `content` action: runs the script for this request and answers with what it wrote
/// (content_by_lua). A script error is a 500 and an error-log line with its traceback.
pub(crate) async fn serve_content<C: ClientSide>(
    script: &LuaScript,
    worker: &Worker,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'static> {
    let (name, _) = &script.program.scripts[script.index];
    let vm = match vm::worker_vm(&script.program) {
        Ok(vm) => vm,
        Err(e) => return script_failed(name, &e),
    };
    let body = if head.framing == Framing::None {
        None
    } else {
        match client.read_body(worker, head, MAX_BODY).await {
            Ok(body) => Some(body),
            Err(_) => {
                let refusal = LocalError::new(413, ErrorKind::Script, "Request Entity Too Large");
                return Reply::error(refusal);
            }
        }
    };
    let scheme = client.scheme();
    let state = RequestState::lent(head, client.ip_text(), scheme, body);
    state.state().borrow_mut().output = vm.output_buffer();
    match vm.run(script.index, state.state()).await {
        Err(e) => return script_failed(name, &e.to_string()),
        // It flushed: the rest streams.
        Ok(true) => {
            if let Some(thread) = vm.take_flushing() {
                return stream::streamed(vm, thread, state.keep(), name);
            }
        }
        Ok(false) => {}
    }
    let state = state.release();
    let reply = vm.reply(script.index, &mut state.borrow_mut());
    reply
}

/// A script's failure: an error-log line naming it, and a 500.
fn script_failed(name: &str, error: &str) -> Reply<'static> {
    log_failure(name, error);
    Reply::error(LocalError::new(
        500,
        ErrorKind::Script,
        "Internal Server Error",
    ))
}

/// An answer the script made: its status, headers and body.
fn answer(status: u16, headers: Vec<(String, String)>, body: Vec<u8>) -> Reply<'static> {
    Reply::local(Cow::Owned(LocalResponse::new(status, headers, body)))
}

/// The error-log line of a script's failure.
fn log_failure(name: &str, error: &str) {
    // The script's own traceback comes first; the one mlua adds after it only shows weir's
    // wrapper rethrowing.
    let error = match error.match_indices("\nstack traceback:").nth(1) {
        Some((at, _)) => &error[..at],
        None => error,
    };
    crate::log_error!("lua: {name}: {error}");
}
