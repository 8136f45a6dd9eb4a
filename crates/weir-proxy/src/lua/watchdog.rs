//! `lua.max_run_time` with LuaJIT's JIT compiler on: each VM's [`Watch`] holds the running
//! script's deadline, and one watchdog thread sets an instruction hook on a VM whose script
//! has passed it. `lua_sethook` may be called from another thread, and LuaJIT built with
//! `LUAJIT_ENABLE_CHECKHOOK` (`.cargo/config.toml`) makes compiled loops leave for the
//! interpreter when a hook is set, so the hook runs and raises the script's error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// How often the watchdog looks at the deadlines: a runaway script is stopped this much past
/// its `max_run_time` at most (plus the machine's scheduling delay).
const WATCHDOG_TICK: Duration = Duration::from_millis(10);

/// A VM's main state and the hook that stops its late script, used on the watchdog's thread
/// only under [`Watch::vm`]'s lock.
struct VmState(*mut mlua::ffi::lua_State, mlua::ffi::lua_Hook);

// SAFETY: the watchdog only passes the pointer to `lua_sethook` (which LuaJIT documents as
// safe to call asynchronously), under the lock that the VM's owner takes before closing it.
#[allow(unsafe_code)]
unsafe impl Send for VmState {}

/// One VM's deadline, as seen by the watchdog.
pub(super) struct Watch {
    /// When the running script must yield by, a [`monotonic_nanos`] time; 0 when none runs.
    deadline: AtomicU64,
    /// The VM's main state; `None` once the VM is being dropped.
    vm: Mutex<Option<VmState>>,
}

impl Watch {
    /// Watches the VM whose main state is `state`, to set `hook` on it when its script is late;
    /// starts the watchdog if it is not running.
    pub fn new(state: *mut mlua::ffi::lua_State, hook: mlua::ffi::lua_Hook) -> Arc<Watch> {
        let watch = Arc::new(Watch {
            deadline: AtomicU64::new(0),
            vm: Mutex::new(Some(VmState(state, hook))),
        });
        let watched = watchdog();
        if let Ok(mut watched) = watched.lock() {
            watched.push(Arc::downgrade(&watch));
        }
        watch
    }

    /// Publishes the running script's deadline, a [`monotonic_nanos`] time (0: no script
    /// runs).
    pub fn set_deadline(&self, deadline: u64) {
        self.deadline.store(deadline, Ordering::Relaxed);
    }

    /// Stops watching: the VM is about to be closed.
    pub fn forget_vm(&self) {
        if let Ok(mut vm) = self.vm.lock() {
            *vm = None;
        }
    }

    /// Sets the hook on the VM if its script has passed its deadline.
    #[allow(unsafe_code)]
    fn check(&self, now_nanos: u64) {
        let deadline = self.deadline.load(Ordering::Relaxed);
        let late = deadline != 0 && now_nanos > deadline;
        let Ok(vm) = self.vm.lock() else {
            return;
        };
        let Some(VmState(state, hook)) = *vm else {
            return;
        };
        // SAFETY: the VM is alive while its state is in the lock we hold; reading and setting
        // its hook is safe from another thread.
        unsafe {
            // The worker removing the hook while this thread sets it can leave the mask without
            // the function, which sends every instruction through the hook dispatch for
            // nothing: set the hook whole again, and it removes itself whole.
            let torn =
                mlua::ffi::lua_gethookmask(state) != 0 && mlua::ffi::lua_gethook(state).is_none();
            // Set again at every tick while the deadline is past, for the same reason.
            if late || torn {
                mlua::ffi::lua_sethook(state, Some(hook), mlua::ffi::LUA_MASKCOUNT, 1);
            }
        }
    }
}

/// The monotonic clock in nanoseconds (since boot, never 0): what deadlines are counted in,
/// read straight from the clock as each request's script sets one (an `Instant` and its
/// conversion cost several times more).
pub(super) fn monotonic_nanos() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        (t.tv_sec() as u64).wrapping_mul(1_000_000_000) + t.tv_nsec() as u64
    });
    now.max(1)
}

/// The watched VMs, the watchdog thread started with the first.
fn watchdog() -> &'static Mutex<Vec<Weak<Watch>>> {
    static WATCHED: OnceLock<Mutex<Vec<Weak<Watch>>>> = OnceLock::new();
    WATCHED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("weir-lua-watchdog".into())
            .spawn(|| loop {
                std::thread::sleep(WATCHDOG_TICK);
                let now = monotonic_nanos();
                if let Some(watched) = WATCHED.get().and_then(|w| w.lock().ok()).as_mut() {
                    watched.retain(|watch| match watch.upgrade() {
                        Some(watch) => {
                            watch.check(now);
                            true
                        }
                        None => false,
                    });
                }
            });
        if let Err(e) = spawned {
            crate::log_warn!("lua: no watchdog thread, so no lua.max_run_time: {e}");
        }
        Mutex::new(Vec::new())
    })
}
