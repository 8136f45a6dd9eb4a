//! `ngx.timer.at`, `ngx.timer.every`, `ngx.timer.running_count` and `pending_count` as
//! lua-nginx-module has them: a timer runs its function later on the same worker, in a
//! coroutine of its own outside any request (so it may use cosockets and `ngx.sleep`), under
//! the same `max_run_time` watch as the worker's scripts. When the worker's stop begins, or a
//! reload replaces the timer's VM, every timer still waiting runs at once with `premature`
//! true (an `every` one for the last time), as nginx's do when its workers exit on a stop or a
//! reload; a stop's drain waits for them ([`unfinished`]).

use super::ngx_worker::Retirement;
use super::request::Slice;
use super::watchdog::Watch;
use crate::io::ticker::Ticker;
use mlua::{Function, Lua, MultiValue, Table, Thread, Value, Variadic};
use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// lua-nginx-module's `lua_max_pending_timers` default: more timers waiting is an error.
const MAX_PENDING: usize = 1024;
/// `lua_max_running_timers`' default: a timer due while this many run is dropped (logged).
const MAX_RUNNING: usize = 256;

thread_local! {
    /// This worker's timers waiting for their time, and those running their function.
    static PENDING: Cell<usize> = const { Cell::new(0) };
    static RUNNING: Cell<usize> = const { Cell::new(0) };
}

/// What a timer's run needs of its VM.
#[derive(Clone)]
struct TimerRuntime {
    /// Runs a function with its arguments under `xpcall`, so its error carries a traceback.
    traced: Function,
    max_run_time: Duration,
    watch: Arc<Watch>,
    /// Its VM's end: the worker's stop, or a reload that replaced the VM.
    retirement: Rc<Retirement>,
}

/// This worker's timers not done yet: waiting for their time, or running (a stop's drain waits
/// for them, up to its `graceful_timeout`).
pub fn unfinished() -> usize {
    PENDING.get() + RUNNING.get()
}

/// Puts `at`, `every`, `running_count` and `pending_count` in `ngx.timer` (made by the VM's
/// prelude), once the VM's watch exists.
pub(super) fn install(
    lua: &Lua,
    max_run_time: Duration,
    watch: &Arc<Watch>,
    retirement: &Rc<Retirement>,
) -> mlua::Result<()> {
    let ngx: Table = lua.globals().get("ngx")?;
    let timer: Table = match ngx.get::<Option<Table>>("timer")? {
        Some(timer) => timer,
        None => lua.create_table()?,
    };
    let runtime = TimerRuntime {
        traced: lua.load(TRACED).set_name("=ngx.timer").eval()?,
        max_run_time,
        watch: watch.clone(),
        retirement: retirement.clone(),
    };
    let at_runtime = runtime.clone();
    timer.set(
        "at",
        lua.create_function(
            move |lua, (delay, callback, args): (f64, Function, Variadic<Value>)| {
                start(lua, &at_runtime, delay, false, callback, args)
            },
        )?,
    )?;
    timer.set(
        "every",
        lua.create_function(
            move |lua, (interval, callback, args): (f64, Function, Variadic<Value>)| {
                // lua-nginx-module counts in milliseconds: less than one is zero.
                if interval < 0.001 || interval.is_nan() {
                    return Err(mlua::Error::runtime("delay cannot be zero"));
                }
                start(lua, &runtime, interval, true, callback, args)
            },
        )?,
    )?;
    timer.set(
        "running_count",
        lua.create_function(|_, ()| Ok(RUNNING.get()))?,
    )?;
    timer.set(
        "pending_count",
        lua.create_function(|_, ()| Ok(PENDING.get()))?,
    )?;
    ngx.set("timer", timer)?;
    Ok(())
}

/// Schedules `callback(false, args...)` after `delay` seconds (and every `delay` seconds
/// after that with `every`) on this worker, or `callback(true, args...)` as soon as the worker
/// stops: 1, or `nil` and why not.
fn start(
    lua: &Lua,
    runtime: &TimerRuntime,
    delay: f64,
    every: bool,
    callback: Function,
    args: Variadic<Value>,
) -> mlua::Result<(Option<i64>, Option<&'static str>)> {
    if delay < 0.0 || delay.is_nan() {
        return Err(mlua::Error::runtime(
            "bad argument #1 to 'at' (delay must not be negative)",
        ));
    }
    if runtime.retirement.exiting() {
        return Ok((None, Some("process exiting")));
    }
    if PENDING.get() >= MAX_PENDING {
        return Ok((None, Some("too many pending timers")));
    }
    let lua = lua.clone();
    let runtime = runtime.clone();
    let args: Vec<Value> = args.into_iter().collect();
    PENDING.set(PENDING.get() + 1);
    tokio::task::spawn_local(async move {
        let wait = Duration::from_secs_f64(delay);
        loop {
            let waited = wait_or_stop(wait, &runtime.retirement).await;
            PENDING.set(PENDING.get() - 1);
            let premature = match waited {
                Ok(premature) => premature,
                Err(e) => {
                    crate::log_error!("lua: ngx.timer: cannot wait: {e}");
                    return;
                }
            };
            if !every || premature {
                run_counted(&lua, &runtime, &callback, &args, premature).await;
                return;
            }
            // As lua-nginx-module: the next run is due an interval after this one starts,
            // whether or not this one has ended by then.
            PENDING.set(PENDING.get() + 1);
            let (lua, runtime) = (lua.clone(), runtime.clone());
            let (callback, args) = (callback.clone(), args.clone());
            tokio::task::spawn_local(async move {
                run_counted(&lua, &runtime, &callback, &args, false).await;
            });
        }
    });
    // nginx answers 1 (not `true`).
    Ok((Some(1), None))
}

/// Waits `wait`: `false` when it passed, `true` when the worker's stop began first or a
/// reload replaced the timer's VM.
async fn wait_or_stop(wait: Duration, retirement: &Retirement) -> std::io::Result<bool> {
    let ticker = Ticker::once(wait)?;
    let mut tick = pin!(ticker.tick());
    let mut stop = pin!(retirement.begun());
    poll_fn(|cx| {
        if stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(true));
        }
        tick.as_mut().poll(cx).map(|done| done.map(|()| false))
    })
    .await
}

/// [`run`], counted in `running_count` (not run past [`MAX_RUNNING`], as in nginx); its
/// error is logged.
async fn run_counted(
    lua: &Lua,
    runtime: &TimerRuntime,
    callback: &Function,
    args: &[Value],
    premature: bool,
) {
    if RUNNING.get() >= MAX_RUNNING {
        crate::log_error!(
            "lua: ngx.timer: not run, {MAX_RUNNING} lua_max_running_timers are not enough"
        );
        return;
    }
    RUNNING.set(RUNNING.get() + 1);
    let ran = run(lua, runtime, callback, args, premature).await;
    RUNNING.set(RUNNING.get() - 1);
    if let Err(e) = ran {
        super::log_failure("ngx.timer", &e.to_string());
    }
}

/// Runs `callback(premature, args...)` in a coroutine of its own to its end, resuming it whenever
/// what it waits for is ready; no request is current meanwhile.
async fn run(
    lua: &Lua,
    runtime: &TimerRuntime,
    callback: &Function,
    args: &[Value],
    premature: bool,
) -> mlua::Result<()> {
    let thread: Thread = lua.create_thread(runtime.traced.clone())?;
    let mut call = vec![Value::Function(callback.clone()), Value::Boolean(premature)];
    call.extend(args.iter().cloned());
    let mut running = pin!(thread.into_async::<MultiValue>(MultiValue::from_iter(call)));
    poll_fn(|cx| {
        let _slice = Slice::start(None, runtime.max_run_time, &runtime.watch);
        let _resuming = super::cosocket::Resuming::enter(cx.waker());
        loop {
            match futures_core::Stream::poll_next(running.as_mut(), cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(_))) => {}
            }
        }
    })
    .await
}

/// `xpcall` around a timer's function and its arguments (yields pass through).
const TRACED: &str = r#"
local xpcall, traceback, error = xpcall, debug.traceback, error
return function(f, ...)
  local ok, err = xpcall(f, traceback, ...)
  if not ok then error(err, 0) end
end
"#;
