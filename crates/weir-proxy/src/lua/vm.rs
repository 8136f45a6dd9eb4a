//! Each worker's LuaJIT VM: made from a [`LuaProgram`] the first time one of its scripts
//! runs on the worker, or as the worker starts when there is an `init_worker` script (again
//! after a reload, which retires the old VM), with the `ngx` API, `cjson`, the package path,
//! the memory bound and the run-time hook installed, `init` and `init_worker` run, and every
//! script compiled once into a function.

use super::request::{self, RequestState};
use super::watchdog::Watch;
use super::{
    cjson, cosocket, cosocket_udp, ngx_output, ngx_re, ngx_req, ngx_util, ngx_worker, shared_dict,
    timer, LuaProgram,
};
use crate::http::local::LocalResponse;
use mlua::{Function, Lua, Thread};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// How many finished coroutines a VM keeps for the next requests.
const IDLE_THREADS: usize = 64;

/// The largest output buffer a VM keeps for the next script.
const MAX_SPARE_OUTPUT: usize = 16 * 1024;

/// What a coroutine yields when its script ended: it waits there, under [`TRACED`], for the
/// next script (its address, as a light userdata no script can come by).
static ENDED: u8 = 0;

/// Whether a coroutine's yield is [`ENDED`]'s: its script ended, and it is ready for another.
pub(super) fn ended(value: &mlua::Value) -> bool {
    matches!(value, mlua::Value::LightUserData(p) if std::ptr::eq(p.0.cast_const().cast::<u8>(), &ENDED))
}

/// A worker's VM and the program's scripts compiled in it.
pub(super) struct WorkerVm {
    generation: u64,
    lua: Lua,
    /// A coroutine's body ([`TRACED`]): runs the scripts (which it holds) one after another,
    /// so that a coroutine serves request after request.
    traced: Function,
    /// Coroutines whose script ended, waiting for another: making one costs a protected call
    /// and garbage to collect, about a fifth of what `ngx.say('hello')` costs a request; and
    /// one that waits in [`TRACED`]'s loop needs no reset.
    idle_threads: RefCell<Vec<Thread>>,
    /// Each `content` script's last answer, to send again when the next is the same.
    last_answers: RefCell<Vec<Option<Rc<LocalResponse>>>>,
    /// The output buffer of an answer sent as the last one was, for the next script to write.
    spare_output: RefCell<Vec<u8>>,
    /// The coroutine of a script that stopped at a flush, for its caller to take: kept here
    /// so that `run` answers a flag, as cheap to pass back as nothing.
    flushing: RefCell<Option<Thread>>,
    max_run_time: std::time::Duration,
    /// The running script's deadline, for the watchdog that stops it.
    watch: Arc<Watch>,
    /// The shared dictionaries, which the VM's `get` functions reach by address: dropped
    /// after the VM.
    _dicts: Vec<Arc<shared_dict::SharedDict>>,
    /// Set when a reload replaces this VM: its waiting timers run early.
    retirement: Rc<ngx_worker::Retirement>,
}

impl Drop for WorkerVm {
    fn drop(&mut self) {
        // Before the VM closes: the watchdog must not set a hook on it any more.
        self.watch.forget_vm();
    }
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
    let replaced = WORKER_VM.with_borrow_mut(|slot| slot.replace(vm.clone()));
    if let Some(old) = replaced {
        old.retirement.retire();
    }
    Ok(vm)
}

/// At a worker's start and after each reload: the VM of an older configuration is retired
/// (its waiting timers run early, as an nginx worker's do when a reload ends it), and with an
/// `init_worker` script the new VM is made at once, as nginx's new workers run
/// `init_worker_by_lua` when they start, so its timers begin without waiting for a request.
pub fn apply_program(program: Option<&Arc<LuaProgram>>) {
    let current = WORKER_VM.with_borrow(|vm| vm.clone());
    if let Some(vm) = current {
        if program.is_none_or(|p| p.generation != vm.generation) {
            WORKER_VM.with_borrow_mut(|slot| *slot = None);
            vm.retirement.retire();
        }
    }
    if let Some(program) = program.filter(|p| p.settings.init_worker.is_some()) {
        if let Err(e) = worker_vm(program) {
            crate::log_error!("lua: the worker's VM: {e}");
        }
    }
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
        cosocket::install(&lua, &ngx)?;
        cosocket_udp::install(&lua, &ngx)?;
        let retirement = Rc::new(ngx_worker::Retirement::default());
        ngx_worker::install(&lua, &ngx, settings, &retirement)?;
        lua.globals().set("ngx", ngx)?;
        cjson::install(&lua)?;
        lua.load(PRELUDE).set_name("=weir").exec()?;
        if let Some(path) = &settings.package_path {
            let package: mlua::Table = lua.globals().get("package")?;
            let default: String = package.get("path")?;
            package.set("path", path.replace(";;", &format!(";{default};")))?;
        }
        let max_run_time = settings.max_run_time;
        let watch = watch_vm(&lua)?;
        timer::install(&lua, max_run_time, &watch, &retirement)?;
        let first = [
            (&settings.init, "init_by_lua*"),
            (&settings.init_worker, "init_worker_by_lua*"),
        ];
        for (code, context) in first {
            let Some(code) = code else { continue };
            let _no_cosockets = cosocket::CosocketsDisabled::enter(context);
            let _slice = request::Slice::start(None, max_run_time, &watch);
            // Only the first VM's `init` writes to `ngx.shared` (init_once.rs).
            let is_init = settings
                .init
                .as_ref()
                .is_some_and(|init| std::ptr::eq(init, code));
            let real_shared = match is_init {
                true => super::init_once::before_init(&lua, program.generation)?,
                false => None,
            };
            lua.load(code.source.as_str())
                .set_name(code.chunk_name.as_str())
                .exec()?;
            super::init_once::restore(&lua, real_shared)?;
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
        let ended = mlua::Value::LightUserData(mlua::LightUserData(
            std::ptr::addr_of!(ENDED).cast_mut().cast(),
        ));
        let scripts = lua.create_sequence_from(functions.iter().cloned())?;
        let traced = lua
            .load(TRACED)
            .set_name("=weir")
            .call::<Function>((ended, scripts))?;
        Ok(WorkerVm {
            generation: program.generation,
            lua,
            traced,
            idle_threads: RefCell::new(Vec::new()),
            last_answers: RefCell::new(vec![None; program.scripts.len()]),
            spare_output: RefCell::new(Vec::new()),
            flushing: RefCell::new(None),
            max_run_time,
            watch,
            _dicts: program.dicts.iter().map(|(_, dict)| dict.clone()).collect(),
            retirement,
        })
    }

    /// Runs script `index` for the request in `state`, in a coroutine of its own: the
    /// request's answer is left in `state`. `true`: the script waits for a flush (only a
    /// `content` script's may: `RequestState::streams`), its coroutine kept for
    /// [`Self::take_flushing`], to be resumed once its output is written (`stream.rs`).
    pub(super) async fn run(
        &self,
        index: usize,
        state: &Rc<RefCell<RequestState>>,
    ) -> mlua::Result<bool> {
        self.run_with(index, state, None).await
    }

    /// [`Self::run`], or [`Self::run_reading`] with the body's reader.
    async fn run_with(
        &self,
        index: usize,
        state: &Rc<RefCell<RequestState>>,
        reader: Option<request::BodyRead<'_>>,
    ) -> mlua::Result<bool> {
        let thread = self.thread()?;
        let ended = {
            let _slice = request::Slice::start(Some(state.clone()), self.max_run_time, &self.watch);
            self.start(&thread, index)?
        };
        // A script that does not wait (most) ends there, with no future around its coroutine.
        if ended {
            self.keep(thread);
            return Ok(false);
        }
        if state.borrow().flush == request::Flush::Asked {
            *self.flushing.borrow_mut() = Some(thread);
            return Ok(true);
        }
        let (max_run_time, watch) = (self.max_run_time, &*self.watch);
        let ran = request::drive_on(&thread, state, max_run_time, watch, reader);
        // One stopped by `ngx.exit`, an error or the watchdog is suspended in its script or
        // dead: left to the collector.
        match ran.await? {
            request::Stop::Ended => self.keep(thread),
            request::Stop::Stopped => {}
            request::Stop::Flushing => {
                *self.flushing.borrow_mut() = Some(thread);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The coroutine of the script whose run just stopped at a flush ([`Self::run`]).
    pub(super) fn take_flushing(&self) -> Option<Thread> {
        self.flushing.borrow_mut().take()
    }

    /// Resumes `thread`, which waits for a flush, and drives its script on to its next stop.
    pub(super) fn resume_later(
        &self,
        thread: Thread,
        state: Rc<RefCell<RequestState>>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = (Thread, mlua::Result<request::Stop>)>>>
    {
        let (max_run_time, watch) = (self.max_run_time, self.watch.clone());
        Box::pin(async move {
            let stop = request::drive_on(&thread, &state, max_run_time, &watch, None).await;
            (thread, stop)
        })
    }

    /// Resumes `thread`, new or waiting in [`TRACED`]'s loop, with script `index`: `true` when
    /// the script ended (the coroutine waits for the next), `false` when it yielded (it waits
    /// for something, or ended the request: `ngx.exit`). Straight through the C API: mlua's
    /// `Thread::resume` moves the arguments and results between stacks and converts them,
    /// which cost more than the script `ngx.say('hello')`.
    #[allow(unsafe_code)]
    fn start(&self, thread: &Thread, index: usize) -> mlua::Result<bool> {
        use mlua::ffi;
        let co = thread.to_pointer().cast_mut().cast::<ffi::lua_State>();
        // SAFETY: a coroutine's pointer (LuaJIT's `lua_topointer`) is its state, alive while
        // `thread` holds it; it is new or suspended in `yield` (the pool and `thread()` hand
        // out only those), and nothing else resumes it meanwhile on this worker.
        unsafe {
            if ffi::lua_checkstack(co, 1) == 0 {
                return Err(mlua::Error::runtime("no room on the coroutine's stack"));
            }
            ffi::lua_pushinteger(co, (index + 1) as ffi::lua_Integer);
            match ffi::lua_resume_(co, 1) {
                ffi::LUA_YIELD => {
                    let marker = ffi::lua_touserdata(co, -1).cast_const().cast::<u8>();
                    let ended = ffi::lua_gettop(co) == 1 && std::ptr::eq(marker, &ENDED);
                    // As mlua leaves a coroutine it resumed: what it yielded taken off.
                    ffi::lua_settop(co, 0);
                    Ok(ended)
                }
                ffi::LUA_OK => Ok(false),
                status => Err(self.error_of(co, status)),
            }
        }
    }

    /// The error that ended coroutine `co` (`status`), as mlua makes it: a string error with
    /// the traceback of the script's frames, still on the dead coroutine's stack.
    #[allow(unsafe_code)]
    unsafe fn error_of(&self, co: *mut mlua::ffi::lua_State, status: i32) -> mlua::Error {
        use mlua::ffi;
        // SAFETY: the error is on top of the dead coroutine's stack, where it stays (a string's
        // bytes with it) while the traceback is made in a protected call on the main state.
        unsafe {
            if ffi::lua_type(co, -1) == ffi::LUA_TSTRING {
                let mut len = 0;
                let message = ffi::lua_tolstring(co, -1, &mut len);
                if status == ffi::LUA_ERRMEM {
                    // No memory for a traceback.
                    let text = std::slice::from_raw_parts(message.cast::<u8>(), len);
                    return mlua::Error::MemoryError(String::from_utf8_lossy(text).into_owned());
                }
                let traced = self.lua.exec_raw::<mlua::String>((), |state| {
                    ffi::luaL_traceback(state, co, message, 0);
                });
                return match traced {
                    Ok(text) => mlua::Error::RuntimeError(text.to_string_lossy()),
                    Err(e) => e,
                };
            }
            // A Rust function's error (mlua's userdata, whose `__tostring` is the error's
            // text) or another value: `tostring` in a protected call on the main state.
            let text = self.lua.exec_raw::<String>((), |state| {
                ffi::lua_xmove(co, state, 1);
                ffi::luaL_tolstring(state, -1, std::ptr::null_mut());
                ffi::lua_remove(state, -2);
            });
            match text {
                Ok(text) => mlua::Error::external(text),
                Err(e) => e,
            }
        }
    }

    /// The answer of script `index`'s run that left `state`: its last one again when the same.
    pub(super) fn reply(
        &self,
        index: usize,
        state: &mut RequestState,
    ) -> crate::reply::Reply<'static> {
        let mut last = self.last_answers.borrow_mut();
        let reply = match last.get_mut(index) {
            Some(last) => state.take_reply_as(Some(last)),
            None => state.take_reply(),
        };
        // Left with the state when the answer was the last one again: kept for the next.
        if (1..=MAX_SPARE_OUTPUT).contains(&state.output.capacity()) {
            let mut output = std::mem::take(&mut state.output);
            output.clear();
            *self.spare_output.borrow_mut() = output;
        }
        reply
    }

    /// A buffer for a `content` script's output: the one an earlier answer left, if any.
    pub(super) fn output_buffer(&self) -> Vec<u8> {
        std::mem::take(&mut self.spare_output.borrow_mut())
    }

    /// A coroutine ready to run a script under [`TRACED`] (resumed with the script): an idle
    /// one, or a new one.
    fn thread(&self) -> mlua::Result<Thread> {
        let idle = self.idle_threads.borrow_mut().pop();
        match idle {
            Some(thread) => Ok(thread),
            None => self.lua.create_thread(self.traced.clone()),
        }
    }

    /// Keeps `thread`, whose script ended, for another request.
    pub(super) fn keep(&self, thread: Thread) {
        let mut idle = self.idle_threads.borrow_mut();
        if idle.len() < IDLE_THREADS {
            idle.push(thread);
        }
    }
}

/// Watches `lua` for scripts that run past their deadline without yielding (the watchdog
/// then sets [`deadline_hook`] on it), with LuaJIT's JIT compiler on.
#[allow(unsafe_code)]
fn watch_vm(lua: &Lua) -> mlua::Result<Arc<Watch>> {
    let mut main_state = std::ptr::null_mut();
    // SAFETY: only reads the pointer of the VM's main state, which lives as long as `lua`
    // (LuaJIT's hooks are the VM's, so this state stands for all of its coroutines).
    unsafe { lua.exec_raw::<()>((), |state| main_state = state)? };
    if !compiled_loops_see_hooks(lua, main_state)? {
        crate::log_error!(
            "lua: LuaJIT was built without LUAJIT_ENABLE_CHECKHOOK (a cargo target directory \
             older than .cargo/config.toml: `cargo clean -p mlua-sys`), so a compiled loop \
             could not be stopped: the JIT compiler is off"
        );
        lua.load("jit.off()").set_name("=weir").exec()?;
    }
    Ok(Watch::new(main_state, deadline_hook))
}

thread_local! {
    /// Calls of [`count_probe_calls`] on this thread.
    static PROBE_HOOK_CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[allow(unsafe_code)]
unsafe extern "C-unwind" fn count_probe_calls(
    _: *mut mlua::ffi::lua_State,
    _: *mut mlua::ffi::lua_Debug,
) {
    PROBE_HOOK_CALLS.set(PROBE_HOOK_CALLS.get() + 1);
}

/// Whether this LuaJIT's compiled loops leave for the interpreter when a hook is set: a loop
/// is compiled, then run with an every-instruction hook, which is called for each iteration
/// only if the trace gave way to the interpreter.
#[allow(unsafe_code)]
fn compiled_loops_see_hooks(
    lua: &Lua,
    main_state: *mut mlua::ffi::lua_State,
) -> mlua::Result<bool> {
    const ITERATIONS: u32 = 1000;
    let probe: Function = lua
        .load("return function(n) local s = 0 for i = 1, n do s = s + i end return s end")
        .set_name("=weir")
        .eval()?;
    probe.call::<()>(ITERATIONS)?;
    probe.call::<()>(ITERATIONS)?;
    PROBE_HOOK_CALLS.set(0);
    // SAFETY: sets, then removes, a hook that only counts, on the VM's main state.
    unsafe {
        mlua::ffi::lua_sethook(
            main_state,
            Some(count_probe_calls),
            mlua::ffi::LUA_MASKCOUNT,
            1,
        );
    }
    let run = probe.call::<()>(ITERATIONS);
    // SAFETY: as above.
    unsafe { mlua::ffi::lua_sethook(main_state, None, 0, 0) };
    run?;
    Ok(PROBE_HOOK_CALLS.get() >= ITERATIONS)
}

/// Set by the watchdog once the running script has passed its deadline: raises the error that
/// stops it (again at every instruction, should the script catch it), or removes itself when
/// no script is late (the one it was set for yielded or ended meanwhile).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn deadline_hook(
    state: *mut mlua::ffi::lua_State,
    _: *mut mlua::ffi::lua_Debug,
) {
    if request::deadline().is_some_and(|deadline| super::watchdog::monotonic_nanos() > deadline) {
        // SAFETY: nothing with a destructor is alive in this frame, so LuaJIT's error may
        // unwind through it (as mlua's own callbacks raise theirs).
        unsafe {
            mlua::ffi::luaL_error(
                state,
                c"ran longer than lua.max_run_time without yielding".as_ptr(),
            );
        }
    } else {
        // SAFETY: removing the hook from inside it is what `lua_sethook` allows any time.
        unsafe { mlua::ffi::lua_sethook(state, None, 0, 0) };
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
    /// [`WorkerVm::run`] for a phase that may read the request's body (`ngx.req.read_body`)
    /// through `reader`.
    pub(super) async fn run_reading(
        &self,
        index: usize,
        state: &Rc<RefCell<RequestState>>,
        reader: request::BodyRead<'_>,
    ) -> mlua::Result<bool> {
        self.run_with(index, state, Some(reader)).await
    }

    /// Runs script `index` to its end at once, for a phase that cannot wait
    /// (`header_filter`, `body_filter`, `log`): a script that tries to is stopped with an error,
    /// and cosockets are refused as nginx refuses them in `context` (`log_by_lua*`, say).
    pub(super) fn run_now(
        &self,
        index: usize,
        state: &Rc<RefCell<RequestState>>,
        context: &'static str,
    ) -> mlua::Result<()> {
        let thread = self.thread()?;
        let _slice = request::Slice::start(Some(state.clone()), self.max_run_time, &self.watch);
        let _no_cosockets = cosocket::CosocketsDisabled::enter(context);
        if self.start(&thread, index)? {
            self.keep(thread);
            return Ok(());
        }
        let exited = state.borrow().exit.is_some();
        if !exited {
            return Err(mlua::Error::runtime(
                "a script cannot wait (ngx.sleep) in header_filter, body_filter or log",
            ));
        }
        Ok(())
    }
}

/// A coroutine's body: runs each script it is resumed with (its number in the program, from
/// 1), the script's yields passing through; once a script ended, it yields [`ENDED`]'s marker
/// and waits for the next. An error ends the coroutine with the script's frames left on its
/// stack, for the traceback (`WorkerVm::error_of`).
const TRACED: &str = r#"
local ended, scripts = ...
local yield = coroutine.yield
return function(i)
  while true do
    scripts[i]()
    i = yield(ended)
  end
end
"#;

/// The parts of `ngx` written in Lua: what weir does not have raises an error naming it.
const PRELUDE: &str = r#"
local function missing(name)
  return function() error(name .. " is not supported by weir", 2) end
end
for _, name in ipairs({"exec", "on_abort"}) do
  if ngx[name] == nil then ngx[name] = missing("ngx." .. name) end
end
ngx.location = { capture = missing("ngx.location.capture"),
                 capture_multi = missing("ngx.location.capture_multi") }
ngx.socket = ngx.socket or {}
for _, name in ipairs({"tcp", "connect", "stream"}) do
  if ngx.socket[name] == nil then ngx.socket[name] = missing("ngx.socket." .. name) end
end
ngx.timer = { at = missing("ngx.timer.at"), every = missing("ngx.timer.every") }
ngx.thread = { spawn = missing("ngx.thread.spawn"), wait = missing("ngx.thread.wait"),
               kill = missing("ngx.thread.kill") }
ngx.req.socket = missing("ngx.req.socket")
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
    use std::time::Instant;

    #[test]
    fn a_runaway_loop_is_stopped_with_the_jit_on() {
        let lua = all_libraries();
        let watch = watch_vm(&lua).expect("a watch");
        let jit_on: bool = lua.load("return jit.status()").eval().expect("jit.status");
        assert!(jit_on, "the JIT compiler is on");
        lua.load("traces = 0 jit.attach(function(what) if what == 'stop' then traces = traces + 1 end end, 'trace')")
            .exec()
            .expect("jit.attach");
        for runaway in [
            "while true do end",
            "local n = 0 while true do n = n + 1 end",
            "local t = {} for i = 1, math.huge do t[i % 64] = i * 2 end",
        ] {
            let _slice = request::Slice::start(None, std::time::Duration::from_millis(50), &watch);
            let started = Instant::now();
            let result = lua.load(runaway).exec();
            let message = format!("{result:?}");
            assert!(message.contains("lua.max_run_time"), "{runaway}: {message}");
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
        let traces: i64 = lua.load("return traces").eval().expect("traces");
        assert!(traces >= 3, "each loop was compiled: {traces} traces");
        let thread = lua
            .create_thread(
                lua.load("local n = 0 while true do n = n + 1 end")
                    .into_function()
                    .expect("f"),
            )
            .expect("thread");
        let slice = request::Slice::start(None, std::time::Duration::from_millis(50), &watch);
        let result = thread.resume::<()>(());
        assert!(result.is_err(), "{result:?}");
        drop(slice);
        // A script that is not late runs on: a hook left from the stopped one removes itself.
        let _slice = request::Slice::start(None, std::time::Duration::from_secs(30), &watch);
        let sum: i64 = lua
            .load("local n = 0 for i = 1, 1000000 do n = n + i end return n")
            .eval()
            .expect("a sum");
        assert_eq!(sum, 500_000_500_000);
        watch.forget_vm();
    }

    thread_local! {
        static GUARD_DROPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    struct SetsFlagOnDrop;

    impl Drop for SetsFlagOnDrop {
        fn drop(&mut self) {
            GUARD_DROPPED.set(true);
        }
    }

    #[allow(unsafe_code)]
    unsafe extern "C-unwind" fn raise_past_a_guard(state: *mut mlua::ffi::lua_State) -> i32 {
        let _guard = SetsFlagOnDrop;
        // SAFETY: a Lua error raised from a C function called by Lua.
        unsafe { mlua::ffi::luaL_error(state, c"raised".as_ptr()) }
    }

    /// LuaJIT built with LUAJIT_NO_UNWIND (`.cargo/config.toml`): a Lua error goes back to its
    /// `pcall` without the system unwinder, so it never unwinds Rust frames (which release
    /// builds, with `panic = "abort"`, answer by aborting). The unwinder would run the guard's
    /// `drop` on its way; LuaJIT's own unwinding does not.
    #[test]
    #[allow(unsafe_code)]
    fn lua_errors_do_not_unwind_rust_frames() {
        let lua = all_libraries();
        GUARD_DROPPED.set(false);
        // SAFETY: `raise_past_a_guard` is a C function raising a Lua error, called under pcall.
        let raised = unsafe {
            lua.exec_raw::<bool>((), |state| {
                mlua::ffi::lua_pushcfunction(state, raise_past_a_guard);
                let status = mlua::ffi::lua_pcall(state, 0, 0, 0);
                mlua::ffi::lua_pushboolean(state, i32::from(status != 0));
            })
        }
        .expect("pcall");
        assert!(raised, "the error reached pcall");
        assert!(
            !GUARD_DROPPED.get(),
            "LuaJIT unwound through a Rust frame: it was built without LUAJIT_NO_UNWIND \
             (`cargo clean -p mlua-sys`)"
        );
    }
}
