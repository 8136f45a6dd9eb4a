//! Functions written against Lua's C API, for the calls scripts make most (`ngx.say`,
//! `ngx.shared.DICT:get`): they read their arguments off the stack and push their results,
//! sparing mlua's conversion of each value and, with `lua.max_memory` set, the protected call
//! mlua makes around every string it creates from Rust.
//!
//! The rule such a function keeps: no Rust value that must be dropped (a lock, a `RefCell`
//! borrow) is alive while a Lua call that can raise an error runs (one that allocates: a
//! memory error past `lua.max_memory`), as the error unwinds past its frame without running
//! destructors.

use mlua::{ffi, Function, IntoLuaMulti, Lua};

/// `function` as a Lua function (a C closure), with `upvalues` as its upvalues 1, 2, ...
pub(super) fn c_closure(
    lua: &Lua,
    function: ffi::lua_CFunction,
    upvalues: impl IntoLuaMulti,
) -> mlua::Result<Function> {
    // SAFETY: inside `exec_raw`'s protected call the stack holds exactly the upvalues, which
    // the closure takes.
    #[allow(unsafe_code)]
    unsafe {
        lua.exec_raw(upvalues, |state| {
            let count = ffi::lua_gettop(state);
            ffi::lua_pushcclosure(state, function, count);
        })
    }
}
