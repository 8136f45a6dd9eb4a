//! The `lua` middleware's phases (lua-nginx-module's `rewrite_by_lua`, `access_by_lua`,
//! `header_filter_by_lua`, `body_filter_by_lua` and `log_by_lua`): each script runs on the
//! request or answer as it stands there, and what it changed is written back; a request phase
//! that answers ends the request, its answer through the same middleware's filters;
//! `body_filter` is installed here and runs in `body_filter.rs`; `log` runs once the answer is
//! sent.

use super::carried;
use super::ngx_worker::RequestPhase;
use super::request::{decoded_path, ReadBody, RequestState};
use super::{vm, LuaProgram, LuaScript};
use crate::http::codec::{Framing, RequestHead, ResponseHead};
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use weir_config::LuaPhases;

/// A `lua` middleware's scripts, compiled with the rest of its configuration's.
pub struct PhaseScripts {
    rewrite: Option<LuaScript>,
    access: Option<LuaScript>,
    header_filter: Option<LuaScript>,
    body_filter: Option<LuaScript>,
    log: Option<LuaScript>,
}

/// How an exchange ended, as the `log` phase sees it (`ngx.var.status`, `upstream_addr`,
/// `body_bytes_sent`).
pub struct Finished {
    pub status: u16,
    pub body_bytes: u64,
    /// The server that answered (`ADDRESS:PORT`), for a proxied request.
    pub upstream_addr: Option<String>,
}

impl LuaProgram {
    /// Middleware `name`'s scripts (`None` when its phases are not in the program).
    pub fn phase_scripts(self: &Arc<Self>, name: &str, phases: &LuaPhases) -> PhaseScripts {
        let script = |phase: &str, code: &Option<weir_config::LuaCode>| {
            code.as_ref()?;
            let key = phase_key(name, phase);
            let index = self.scripts.iter().position(|(n, _)| *n == key)?;
            Some(LuaScript {
                program: self.clone(),
                index,
            })
        };
        PhaseScripts {
            rewrite: script("rewrite", &phases.rewrite),
            access: script("access", &phases.access),
            header_filter: script("header_filter", &phases.header_filter),
            body_filter: script("body_filter", &phases.body_filter),
            log: script("log", &phases.log),
        }
    }
}

/// The name a phase's script goes by in a program (and in its errors).
pub(super) fn phase_key(middleware: &str, phase: &str) -> String {
    format!("middleware `{middleware}` ({phase})")
}

impl std::fmt::Debug for PhaseScripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhaseScripts")
            .field("rewrite", &self.rewrite.is_some())
            .field("access", &self.access.is_some())
            .field("header_filter", &self.header_filter.is_some())
            .field("body_filter", &self.body_filter.is_some())
            .field("log", &self.log.is_some())
            .finish()
    }
}

impl PhaseScripts {
    pub fn has_request_phase(&self) -> bool {
        self.rewrite.is_some() || self.access.is_some()
    }

    pub fn has_header_filter(&self) -> bool {
        self.header_filter.is_some()
    }

    pub fn has_log(&self) -> bool {
        self.log.is_some()
    }

    /// `rewrite`, then `access`: the answer when one of them ends the request, else their
    /// changes to the path, query, method and header fields made on `req`, and the body
    /// when one of them read it (`ngx.req.read_body`, through `reader`) or replaced it
    /// (`set_body_data`): the action gets that body, its length declared.
    pub async fn on_request(
        &self,
        req: &mut RequestHead,
        remote_addr: &str,
        scheme: Scheme,
        reader: &mut dyn ReadBody,
    ) -> Result<Option<Bytes>, LocalResponse> {
        let mut body: Option<Bytes> = None;
        let phases = [
            (RequestPhase::Rewrite, &self.rewrite),
            (RequestPhase::Access, &self.access),
        ];
        for (phase, script) in phases {
            let Some(script) = script else { continue };
            let (name, _) = &script.program.scripts[script.index];
            let vm = match vm::worker_vm(&script.program) {
                Ok(vm) => vm,
                Err(e) => return Err(failed(name, &e)),
            };
            let lending = RequestState::lent(req, remote_addr, scheme, body.clone());
            {
                let mut state = lending.state().borrow_mut();
                state.body_pending = body.is_none() && req.framing != Framing::None;
                // Read by an earlier phase: there already.
                state.body_read = body.is_some();
                state.phase = phase;
            }
            let ran = vm.run_reading(script.index, lending.state(), (req, reader));
            if let Err(e) = ran.await {
                return Err(failed(name, &e.to_string()));
            }
            let state = lending.release();
            let mut state = state.borrow_mut();
            if let Some(read) = state.body.take().filter(|_| state.body_read) {
                hand_on_body(req, &read, state.body_set);
                body = Some(read);
            }
            // What the script changed, unless it set what was there.
            if let Some(uri) = state.uri.take().filter(|uri| *uri != decoded_path(req)) {
                req.set_path(&escape_path(&uri));
            }
            if let Some(args) = state.args.take().filter(|args| args != req.query()) {
                req.set_query(&args);
            }
            if let Some(method) = state.method.take().filter(|m| m != req.method()) {
                req.set_method(&method);
            }
            for edited in &state.request_edits {
                req.head.remove(edited);
                let values = state
                    .headers
                    .iter()
                    .flatten()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(edited));
                for (name, value) in values {
                    req.head.append(name, value);
                }
            }
            if let Some(answer) = state.phase_answer() {
                return Err(self.filter_phase_answer(req, scheme, answer));
            }
        }
        Ok(body)
    }

    /// `header_filter`: the script sees the answer's status and fields and may change them;
    /// it cannot wait (`ngx.sleep` is an error there, as in nginx).
    pub fn on_response_head(&self, req: &RequestHead, scheme: Scheme, resp: &mut ResponseHead) {
        let Some(script) = &self.header_filter else {
            return;
        };
        let (name, _) = &script.program.scripts[script.index];
        let vm = match vm::worker_vm(&script.program) {
            Ok(vm) => vm,
            Err(e) => {
                crate::log_error!("lua: {name}: {e}");
                return;
            }
        };
        let lending = RequestState::lent(req, "", scheme, None);
        let mut state = lending.state().borrow_mut();
        state.remote_addr = carried::with(state.key, |c| c.remote_addr.clone());
        state.status = resp.status;
        state.response_headers = resp
            .head
            .iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        drop(state);
        if let Err(e) = vm.run_now(script.index, lending.state(), "header_filter_by_lua*") {
            crate::log_error!("lua: {name}: {e}");
            return;
        }
        let state = lending.release();
        let state = state.borrow();
        if state.status != resp.status && (100..1000).contains(&state.status) {
            resp.status = state.status;
        }
        for edited in &state.response_edits {
            resp.head.remove(edited);
            let values = state
                .response_headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(edited));
            for (name, value) in values {
                resp.head.append(name, value.as_bytes());
            }
        }
    }
}

impl PhaseScripts {
    pub fn has_body_filter(&self) -> bool {
        self.body_filter.is_some()
    }

    /// `body_filter`'s filter for the answer whose head is `resp` (none when no body follows,
    /// as nginx runs no body filter for a HEAD request, a 1xx, 204 or 304). The length the
    /// filter may change is no longer declared: a body in memory gets its filtered length, a
    /// streamed one goes out chunked, as in nginx once a `header_filter` clears it.
    pub fn body_filter(
        &self,
        req: &RequestHead,
        scheme: Scheme,
        resp: &mut ResponseHead,
    ) -> Option<crate::reply::body_filter::BodyFilter> {
        let script = self.body_filter.as_ref()?;
        if req.is_head() || matches!(resp.status, 100..=199 | 204 | 304) {
            return None;
        }
        let (name, _) = &script.program.scripts[script.index];
        let vm = match vm::worker_vm(&script.program) {
            Ok(vm) => vm,
            Err(e) => {
                crate::log_error!("lua: {name}: {e}");
                return None;
            }
        };
        resp.head.remove("content-length");
        let key = carried::key(req);
        let remote_addr = carried::with(key, |c| c.remote_addr.clone()).unwrap_or_default();
        let mut state = RequestState::copied(req, remote_addr, scheme);
        state.status = resp.status;
        // The head is out by the time the body is.
        state.headers_sent = true;
        let filter = super::body_filter::LuaBodyFilter {
            vm,
            index: script.index,
            name: name.clone(),
            state: Rc::new(RefCell::new(state)),
            out: Vec::new(),
            ended: false,
        };
        Some(crate::reply::body_filter::BodyFilter::pieces(Box::new(
            filter,
        )))
    }

    /// `log`, once the answer to `req` is sent: the script sees how it ended; what it does is
    /// seen only through its effects (`ngx.shared`, the error log). It cannot wait, as in nginx.
    pub fn on_log(&self, req: &RequestHead, finished: &Finished) {
        let Some(script) = &self.log else {
            return;
        };
        let (name, _) = &script.program.scripts[script.index];
        let vm = match vm::worker_vm(&script.program) {
            Ok(vm) => vm,
            Err(e) => return crate::log_error!("lua: {name}: {e}"),
        };
        let key = carried::key(req);
        let carried = carried::with(key, |c| (c.remote_addr.clone(), c.scheme, c.started));
        let Some((remote_addr, scheme, started)) = carried else {
            return;
        };
        let lending = RequestState::lent(req, &remote_addr, scheme, None);
        let mut state = lending.state().borrow_mut();
        state.status = finished.status;
        // `$request_time` as nginx formats it: seconds with milliseconds.
        let took = started.elapsed().as_millis();
        let variables = [
            (
                "request_time",
                format!("{}.{:03}", took / 1000, took % 1000),
            ),
            ("body_bytes_sent", finished.body_bytes.to_string()),
            ("bytes_sent", finished.body_bytes.to_string()),
        ];
        let vars = state.vars.get_or_insert_with(Default::default);
        for (variable, value) in variables {
            vars.insert(variable.to_string(), value);
        }
        if let Some(addr) = &finished.upstream_addr {
            vars.insert("upstream_addr".to_string(), addr.clone());
        }
        // Nothing is sent any more: the head is out.
        state.headers_sent = true;
        drop(state);
        if let Err(e) = vm.run_now(script.index, lending.state(), "log_by_lua*") {
            super::log_failure(name, &e.to_string());
        }
    }
}

impl PhaseScripts {
    /// An answer `rewrite` or `access` made, through the same middleware's `header_filter`
    /// and `body_filter`, as nginx sends every answer through its filters.
    fn filter_phase_answer(
        &self,
        req: &RequestHead,
        scheme: Scheme,
        answer: LocalResponse,
    ) -> LocalResponse {
        if self.header_filter.is_none() && self.body_filter.is_none() {
            return answer;
        }
        let mut head = ResponseHead::local(answer.status, &answer.headers, answer.body.len());
        self.on_response_head(req, scheme, &mut head);
        let mut body = answer.body.to_vec();
        if let Some(mut filter) = self.body_filter(req, scheme, &mut head) {
            let mut filtered = Vec::new();
            let pieces = filter
                .write(&body)
                .map(|piece| filtered.extend_from_slice(piece))
                .and_then(|()| {
                    filter
                        .finish()
                        .map(|piece| filtered.extend_from_slice(piece))
                });
            if pieces.is_err() {
                // Logged by the filter.
                return crate::http::error::LocalError::new(
                    500,
                    crate::http::error::ErrorKind::Script,
                    "Internal Server Error",
                )
                .into_plain();
            }
            body = filtered;
        }
        let headers = head
            .head
            .iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case(b"content-length"))
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        LocalResponse::new(head.status, headers, body)
    }
}

/// A body a phase read (`replaced`: or set) is what the action gets: its length declared.
fn hand_on_body(req: &mut RequestHead, body: &Bytes, replaced: bool) {
    req.framing = match body.len() {
        0 => Framing::None,
        n => Framing::Length(n as u64),
    };
    if replaced || req.head.get("transfer-encoding").is_some() {
        req.head.remove("transfer-encoding");
        req.head
            .set("content-length", body.len().to_string().as_bytes());
    }
}

/// A phase's failure: logged, and a 500.
fn failed(name: &str, error: &str) -> LocalResponse {
    super::log_failure(name, error);
    crate::http::error::LocalError::new(
        500,
        crate::http::error::ErrorKind::Script,
        "Internal Server Error",
    )
    .into_plain()
}

/// A path set by `ngx.req.set_uri` (decoded) as a request target carries it.
fn escape_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
