//! Each worker's LuaJIT VM: made from a [`LuaProgram`] the first time one of its scripts
//! runs on the worker (again after a reload), with the `ngx` API, `cjson`, the package path,
//! the memory bound and the run-time hook installed, `init` and `init_worker` run, and every
//! script compiled once into a function.

use super::request::{self, RequestState};
use super::{cjson, ngx_output, ngx_re, ngx_req, ngx_util, shared_dict, LuaProgram};
use mlua::{Function, Lua};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

/// How often (in VM instructions) the hook checks the running script's deadline: at a few
/// nanoseconds an instruction, well under a millisecond between checks.
const DEADLINE_CHECK_EVERY: std::ffi::c_int = 10_000;

/// A worker's VM and the program's scripts compiled in it.
pub(super) struct WorkerVm {
    generation: u64,
    lua: Lua,
    /// Runs a script function under `xpcall`, so its error carries a traceback.
    traced: Function,
    functions: Vec<Function>,
    max_run_time: std::time::Duration,
}

thread_local! {
    /// This worker thread's VM (workers are single-threaded: one VM each).
    static WORKER_VM: RefCell<Option<Rc<WorkerVm>>> = const { RefCell::new(None) };
}

/// This worker's VM for `program`, made now if the worker has none for it yet.
pub(super) fn worker_vm(program: &LuaProgram) -> Result<Rc<WorkerVm>, String> {
    let current = WORKER_VM.with_borrow(|vm| vm.clone());
    if let Some(vm) = current.filter(|vm| vm.generation == program.generation) {
        return Ok(vm);
    }
    let vm = Rc::new(WorkerVm::new(program).map_err(|e| e.to_string())?);
    WORKER_VM.with_borrow_mut(|slot| *slot = Some(vm.clone()));
    Ok(vm)
}

impl WorkerVm {
    fn new(program: &LuaProgram) -> mlua::Result<WorkerVm> {
        let settings = &program.settings;
        let lua = all_libraries();
        if let Err(e) = lua.set_memory_limit(settings.max_memory as usize) {
            crate::log_warn!("lua: no memory bound for the worker's VM: {e}");
        }
        let ngx = lua.create_table()?;
        ngx_util::install(&lua, &ngx)?;
        ngx_output::install(&lua, &ngx)?;
        ngx_req::install(&lua, &ngx)?;
        ngx_re::install(&lua, &ngx)?;
        shared_dict::install(&lua, &ngx, &program.dicts)?;
        lua.globals().set("ngx", ngx)?;
        cjson::install(&lua)?;
        lua.load(PRELUDE).set_name("=weir").exec()?;
        if let Some(path) = &settings.package_path {
            let package: mlua::Table = lua.globals().get("package")?;
            let default: String = package.get("path")?;
            package.set("path", path.replace(";;", &format!(";{default};")))?;
        }
        let max_run_time = settings.max_run_time;
        install_deadline_hook(&lua)?;
        for code in [&settings.init, &settings.init_worker]
            .into_iter()
            .flatten()
        {
            let _slice = request::Slice::start(None, max_run_time);
            lua.load(code.source.as_str())
                .set_name(code.chunk_name.as_str())
                .exec()?;
        }
        let functions = program
            .scripts
            .iter()
            .map(|(_, code)| {
                lua.load(code.source.as_str())
                    .set_name(code.chunk_name.as_str())
                    .into_function()
            })
            .collect::<mlua::Result<Vec<_>>>()?;
        let traced = lua.load(TRACED).set_name("=weir").eval::<Function>()?;
        Ok(WorkerVm {
            generation: program.generation,
            lua,
            traced,
            functions,
            max_run_time,
        })
    }

    /// Runs script `index` for the request in `state`, in a coroutine of its own: the
    /// request's answer is left in `state`.
    pub(super) async fn run(
        &self,
        index: usize,
        state: &Rc<RefCell<RequestState>>,
    ) -> mlua::Result<()> {
        let thread = self.lua.create_thread(self.traced.clone())?;
        let function = self.functions[index].clone();
        request::drive(thread, function, state, self.max_run_time).await
    }
}

/// Stops a script that runs past its deadline without yielding. LuaJIT's hooks are the VM's,
/// not a coroutine's, so one covers every request (mlua's own hook is for one coroutine and
/// removes itself in any other). Compiled traces never call hooks, so the JIT compiler is
/// turned off: a loop would otherwise run as machine code past any deadline.
#[allow(unsafe_code)]
fn install_deadline_hook(lua: &Lua) -> mlua::Result<()> {
    lua.load("jit.off()").set_name("=weir").exec()?;
    // SAFETY: sets a hook function on the VM's main state, which mlua holds for the call.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            mlua::ffi::lua_sethook(
                state,
                Some(deadline_hook),
                mlua::ffi::LUA_MASKCOUNT,
                DEADLINE_CHECK_EVERY,
            );
        })
    }
}

#[allow(unsafe_code)]
unsafe extern "C-unwind" fn deadline_hook(
    state: *mut mlua::ffi::lua_State,
    _: *mut mlua::ffi::lua_Debug,
) {
    if request::deadline().is_some_and(|deadline| Instant::now() > deadline) {
        // SAFETY: nothing with a destructor is alive in this frame, so LuaJIT's error may
        // unwind through it (as mlua's own callbacks raise theirs).
        unsafe {
            mlua::ffi::luaL_error(
                state,
                c"ran longer than lua.max_run_time without yielding".as_ptr(),
            );
        }
    }
}

/// A VM with every library: OpenResty's scripts see `debug` and `ffi` too (mlua calls a VM
/// with them unsafe, as a script could then break memory safety; nginx's could as well).
#[allow(unsafe_code)]
fn all_libraries() -> Lua {
    // SAFETY: the scripts are the operator's own configuration, trusted as nginx's are.
    unsafe { Lua::unsafe_new() }
}

impl WorkerVm {
    /// Runs script `index` to its end at once, for a phase that cannot wait
    /// (`header_filter`): a script that tries to is stopped with an error.
    pub(super) fn run_now(
        &self,
        index: usize,
        state: &Rc<RefCell<RequestState>>,
    ) -> mlua::Result<()> {
        let thread = self.lua.create_thread(self.traced.clone())?;
        let _slice = request::Slice::start(Some(state.clone()), self.max_run_time);
        thread.resume::<mlua::MultiValue>(self.functions[index].clone())?;
        let exited = state.borrow().exit.is_some();
        if thread.status() == mlua::ThreadStatus::Resumable && !exited {
            return Err(mlua::Error::runtime(
                "a script cannot wait (ngx.sleep) in header_filter",
            ));
        }
        Ok(())
    }
}

/// `xpcall` around a script, so an error carries its traceback (yields pass through).
const TRACED: &str = r#"
local xpcall, traceback, error = xpcall, debug.traceback, error
return function(f)
  local ok, err = xpcall(f, traceback)
  if not ok then error(err, 0) end
end
"#;

/// The parts of `ngx` written in Lua: what weir does not have raises an error naming it.
const PRELUDE: &str = r#"
local function missing(name)
  return function() error(name .. " is not supported by weir", 2) end
end
for _, name in ipairs({"exec", "on_abort", "get_phase"}) do
  if ngx[name] == nil then ngx[name] = missing("ngx." .. name) end
end
ngx.location = { capture = missing("ngx.location.capture"),
                 capture_multi = missing("ngx.location.capture_multi") }
ngx.socket = { tcp = missing("ngx.socket.tcp"), udp = missing("ngx.socket.udp"),
               connect = missing("ngx.socket.connect"), stream = missing("ngx.socket.stream") }
ngx.timer = { at = missing("ngx.timer.at"), every = missing("ngx.timer.every") }
ngx.thread = { spawn = missing("ngx.thread.spawn"), wait = missing("ngx.thread.wait"),
               kill = missing("ngx.thread.kill") }
ngx.req.socket = missing("ngx.req.socket")
ngx.req.set_body_data = missing("ngx.req.set_body_data")
ngx.req.set_body_file = missing("ngx.req.set_body_file")
ngx.req.get_body_file = function() return nil end
local exit_request = ngx.exit
ngx.exit = function(status)
  exit_request(status)
  coroutine.yield()
end
local redirect = ngx.redirect
ngx.redirect = function(uri, status)
  redirect(uri, status)
  coroutine.yield()
end
print = function(...) ngx.log(ngx.NOTICE, ...) end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runaway_loop_is_stopped() {
        let lua = all_libraries();
        install_deadline_hook(&lua).expect("a hook");
        let _slice = request::Slice::start(None, std::time::Duration::from_millis(50));
        let started = Instant::now();
        let result = lua.load("while true do end").exec();
        assert!(result.is_err(), "{result:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let thread = lua
            .create_thread(
                lua.load("local n = 0 while true do n = n + 1 end")
                    .into_function()
                    .expect("f"),
            )
            .expect("thread");
        let _slice = request::Slice::start(None, std::time::Duration::from_millis(50));
        let result = thread.resume::<()>(());
        assert!(result.is_err(), "{result:?}");
    }
}
