//! `ngx.worker` (`id`, `count`, `pid`, `exiting`), `ngx.config` and `ngx.get_phase` as
//! lua-nginx-module has them: the worker thread's place among weir's workers stands for the
//! nginx worker process's.

use super::{cosocket, request};
use crate::worker::Shutdown;
use mlua::{Lua, Table};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use weir_config::LuaSettings;

/// The nginx whose behaviour weir's follows: Debian 12's nginx 1.22.1 (`ngx.config.nginx_version`)
/// with lua-nginx-module 0.10.23 (`ngx.config.ngx_lua_version`), which the tests compare with.
const NGINX_VERSION: i64 = 1_022_001;
const NGX_LUA_VERSION: i64 = 10_023;

/// The request phase a script runs in (a byte in the request's state, which every request
/// with Lua makes).
#[derive(Clone, Copy, Default)]
pub(super) enum RequestPhase {
    Rewrite,
    Access,
    #[default]
    Content,
}

/// A VM's end on its worker: a reload replaced it. As on nginx's reload, where the old worker
/// processes exit, its waiting timers then run at once with `premature` true and
/// `ngx.worker.exiting()` answers true in it.
#[derive(Default)]
pub(super) struct Retirement {
    retired: std::cell::Cell<bool>,
    notify: tokio::sync::Notify,
}

impl Retirement {
    pub(super) fn retire(&self) {
        self.retired.set(true);
        self.notify.notify_waiters();
    }

    /// Whether this VM's worker stops or a reload replaced the VM.
    pub(super) fn exiting(&self) -> bool {
        self.retired.get() || exiting()
    }

    /// Ready once this VM's worker stops or a reload replaces the VM.
    pub(super) async fn begun(&self) {
        let notified = self.notify.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the check, so a retirement in between still wakes it.
        notified.as_mut().enable();
        if self.retired.get() {
            return;
        }
        let mut stop = std::pin::pin!(stop_begun());
        std::future::poll_fn(|cx| {
            if notified.as_mut().poll(cx).is_ready() || stop.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// Which worker this thread is.
struct WorkerPlace {
    id: usize,
    count: usize,
    shutdown: Arc<Shutdown>,
}

thread_local! {
    /// Set as the worker thread starts; none on a thread that is no worker (unit tests).
    static PLACE: RefCell<Option<WorkerPlace>> = const { RefCell::new(None) };
}

/// Tells this thread's Lua it is worker `id` of `count`, stopping once `shutdown` is requested.
pub fn enter_worker(id: usize, count: usize, shutdown: Arc<Shutdown>) {
    PLACE.with_borrow_mut(|place| {
        *place = Some(WorkerPlace {
            id,
            count,
            shutdown,
        })
    });
}

/// Whether this worker's stop has begun.
pub(super) fn exiting() -> bool {
    PLACE.with_borrow(|p| p.as_ref().is_some_and(|p| p.shutdown.is_requested()))
}

/// Ready once this worker's stop has begun (never on a thread that is no worker).
pub(super) async fn stop_begun() {
    let Some(shutdown) = PLACE.with_borrow(|p| p.as_ref().map(|p| p.shutdown.clone())) else {
        return std::future::pending().await;
    };
    let notified = shutdown.notify.notified();
    let mut notified = std::pin::pin!(notified);
    // Registered before the check, so a stop requested in between still wakes it.
    notified.as_mut().enable();
    if !shutdown.is_requested() {
        notified.await;
    }
}

/// The phase running now, named as `ngx.get_phase()` names it: a phase that may not wait says
/// so by disabling cosockets (its context names it), a request phase by its state, and code
/// run outside both is a timer's.
fn phase() -> &'static str {
    match cosocket::disabled_in() {
        Some("init_by_lua*") => "init",
        Some("init_worker_by_lua*") => "init_worker",
        Some("header_filter_by_lua*") => "header_filter",
        Some("body_filter_by_lua*") => "body_filter",
        Some("log_by_lua*") => "log",
        _ => match request::with_request(|state| state.phase) {
            Ok(RequestPhase::Rewrite) => "rewrite",
            Ok(RequestPhase::Access) => "access",
            Ok(RequestPhase::Content) => "content",
            Err(_) => "timer",
        },
    }
}

/// Puts `ngx.worker`, `ngx.config` and `ngx.get_phase` on `ngx`.
pub(super) fn install(
    lua: &Lua,
    ngx: &Table,
    settings: &LuaSettings,
    retirement: &Rc<Retirement>,
) -> mlua::Result<()> {
    let worker = lua.create_table()?;
    worker.set(
        "id",
        lua.create_function(|_, ()| Ok(PLACE.with_borrow(|p| p.as_ref().map_or(0, |p| p.id))))?,
    )?;
    worker.set(
        "count",
        lua.create_function(|_, ()| Ok(PLACE.with_borrow(|p| p.as_ref().map_or(1, |p| p.count))))?,
    )?;
    // Every worker is a thread of the one process.
    worker.set("pid", lua.create_function(|_, ()| Ok(std::process::id()))?)?;
    let retirement = retirement.clone();
    worker.set(
        "exiting",
        lua.create_function(move |_, ()| Ok(retirement.exiting()))?,
    )?;
    ngx.set("worker", worker)?;

    let config = lua.create_table()?;
    config.set("subsystem", "http")?;
    config.set("debug", false)?;
    config.set("nginx_version", NGINX_VERSION)?;
    config.set("ngx_lua_version", NGX_LUA_VERSION)?;
    let prefix = settings.prefix.clone();
    config.set(
        "prefix",
        lua.create_function(move |_, ()| Ok(prefix.clone()))?,
    )?;
    config.set("nginx_configure", lua.create_function(|_, ()| Ok(""))?)?;
    ngx.set("config", config)?;

    ngx.set("get_phase", lua.create_function(|_, ()| Ok(phase()))?)?;
    Ok(())
}
