//! The TCP cosocket object and its hottest methods against Lua's C API: a socket is a plain
//! Lua userdata holding a [`TcpSocket`] (no mlua userdata: its creation, finalizer and the
//! argument conversion of every method call cost more than what a `receive` does), and
//! `connect` from the pool, `send` of a string, `receive` of a line or a size, the timeouts,
//! `setkeepalive`, `close` and `getreusedtimes` read their arguments off the stack. Anything
//! else (an options table, a `*a` pattern, a nested table to send) goes to the step's general
//! version, an mlua function given the socket and a pointer to it (see [`fall_back`]).
//!
//! How no Lua value outlives the socket it points to:
//! - the [`TcpSocket`] lives inside its userdata's block and is dropped only by the block's
//!   `__gc` ([`collect`]), which Lua runs once nothing reaches the userdata; `__metatable`
//!   hides the metatable, so a script cannot call `__gc` itself;
//! - a method finds the socket only through its first argument, checked to be a live socket
//!   ([`socket_arg`]: a userdata with this metatable, not yet collected), which stays on the
//!   call's stack, so reachable, until the method returns;
//! - the pointer handed to a general step or to `socket_of`'s callers (the Lua halves of the
//!   async steps) goes with the socket itself, which the step holds for as long as it runs
//!   (an async one across its waits): the pointer is never kept without it.
//!
//! And raw.rs's rule: nothing that must be dropped (a `RefCell` borrow, a `Box`) is alive
//! while a call that can raise (one that allocates: a string, past `lua.max_memory`) runs; a
//! connection is moved out as a raw pointer meanwhile, so an error leaks it rather than
//! unwinding past its owner (and a method called meanwhile finds the socket closed).

use super::{
    connect_target, keepalive, millis, poll_find, send_first, without_cr, Pattern, TcpSocket,
    DISABLED_IN,
};
use bytes::Buf;
use mlua::{ffi, LightUserData, Value};
use std::ffi::{c_int, c_void, CStr};
use std::mem::ManuallyDrop;
use std::task::Poll;

/// A socket userdata's block.
struct Slot {
    /// Cleared by `__gc`: a finalized userdata can still be reached by another finalizer.
    live: bool,
    socket: ManuallyDrop<TcpSocket>,
}

// A userdata's block is aligned for a double (8 bytes) in LuaJIT.
const _: () = assert!(std::mem::align_of::<Slot>() <= 8);

/// The socket a general step was given: its userdata (`sock`), held by the step, and the
/// pointer to it that [`socket_of`] or [`fall_back`] checked.
pub(super) fn socket_ref(sock: &Value, ptr: LightUserData) -> &TcpSocket {
    debug_assert_eq!(
        (ptr.0 as usize).wrapping_sub(sock.to_pointer() as usize),
        std::mem::offset_of!(Slot, socket)
    );
    // SAFETY: the general steps are reached only through the raw functions' upvalues and the
    // Lua halves' locals, which pass a pointer checked by `socket_arg` with its socket; the
    // socket's userdata, held in `sock`, lives (and its `TcpSocket` with it) while the
    // borrow does.
    #[allow(unsafe_code)]
    unsafe {
        &*ptr.0.cast::<TcpSocket>().cast_const()
    }
}

#[allow(unsafe_code)]
mod c {
    use super::*;

    /// The live socket at stack index 1 (upvalue 1 is the sockets' metatable).
    unsafe fn socket_arg<'a>(state: *mut ffi::lua_State) -> Option<&'a TcpSocket> {
        unsafe {
            if ffi::lua_type(state, 1) != ffi::LUA_TUSERDATA || ffi::lua_getmetatable(state, 1) == 0
            {
                return None;
            }
            let ours = ffi::lua_rawequal(state, -1, ffi::lua_upvalueindex(1)) != 0;
            ffi::lua_pop(state, 1);
            let slot = ffi::lua_touserdata(state, 1).cast::<Slot>().cast_const();
            match ours && (*slot).live {
                true => Some(&*(*slot).socket),
                false => None,
            }
        }
    }

    /// Raises `message` (nothing to drop may be alive).
    unsafe fn raise(state: *mut ffi::lua_State, message: &CStr) -> ! {
        unsafe {
            ffi::lua_pushstring(state, message.as_ptr());
            ffi::lua_error(state)
        }
    }

    /// The socket at index 1, or the error a method raises without one, or where nginx
    /// disables cosockets.
    unsafe fn method_socket<'a>(state: *mut ffi::lua_State) -> &'a TcpSocket {
        unsafe {
            if let Some(context) = DISABLED_IN.get() {
                ffi::lua_pushstring(state, c"API disabled in the context of ".as_ptr());
                ffi::lua_pushlstring(state, context.as_ptr().cast(), context.len());
                ffi::lua_concat(state, 2);
                ffi::lua_error(state);
            }
            match socket_arg(state) {
                Some(socket) => socket,
                None => raise(state, c"bad argument #1 (a cosocket expected)"),
            }
        }
    }

    /// Pushes `bytes` as a string; held as a raw box while pushing, so that an error leaks
    /// it rather than unwinding past its drop.
    unsafe fn push_owned(state: *mut ffi::lua_State, bytes: Vec<u8>) {
        unsafe {
            let len = bytes.len();
            let raw = Box::into_raw(bytes.into_boxed_slice());
            ffi::lua_pushlstring_(state, raw.cast::<u8>().cast_const().cast(), len);
            drop(Box::from_raw(raw));
        }
    }

    /// A step's `nil, err` (2 values after the count).
    unsafe fn push_fail(state: *mut ffi::lua_State, err: String) -> c_int {
        unsafe {
            ffi::lua_pushinteger(state, 2);
            ffi::lua_pushnil(state);
            push_owned(state, err.into_bytes());
            3
        }
    }

    /// A method's `nil, err`.
    unsafe fn push_nil_err(state: *mut ffi::lua_State, err: &'static str) -> c_int {
        unsafe {
            ffi::lua_pushnil(state);
            ffi::lua_pushlstring_(state, err.as_ptr().cast(), err.len());
            2
        }
    }

    /// The call as the step's general version (upvalue 2) answers it, given the socket and
    /// the pointer to it after the socket: `general(sock, ptr, ...)`.
    unsafe fn fall_back(state: *mut ffi::lua_State, socket: &TcpSocket) -> c_int {
        unsafe {
            let count = ffi::lua_gettop(state);
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(2));
            ffi::lua_insert(state, 1);
            let ptr: *const TcpSocket = socket;
            ffi::lua_pushlightuserdata(state, ptr.cast_mut().cast::<c_void>());
            ffi::lua_insert(state, 3);
            ffi::lua_call(state, count + 1, ffi::LUA_MULTRET);
            ffi::lua_gettop(state)
        }
    }

    /// A number argument: `Some(None)` when absent or nil, `None` when not a number.
    unsafe fn opt_number(state: *mut ffi::lua_State, at: c_int) -> Option<Option<f64>> {
        unsafe {
            match ffi::lua_type(state, at) {
                ffi::LUA_TNONE | ffi::LUA_TNIL => Some(None),
                ffi::LUA_TNUMBER => Some(Some(ffi::lua_tonumber(state, at))),
                _ => None,
            }
        }
    }

    /// `ngx.socket.tcp`'s maker (upvalue 1: the metatable): a new socket, or where cosockets
    /// are disabled, `nil` and the context.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn new_socket(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            if let Some(context) = DISABLED_IN.get() {
                ffi::lua_pushnil(state);
                ffi::lua_pushlstring(state, context.as_ptr().cast(), context.len());
                return 2;
            }
            let block = ffi::lua_newuserdata(state, std::mem::size_of::<Slot>()).cast::<Slot>();
            if block.align_offset(std::mem::align_of::<Slot>()) != 0 {
                raise(state, c"a cosocket's block is misaligned");
            }
            block.write(Slot {
                live: true,
                socket: ManuallyDrop::new(TcpSocket::new()),
            });
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
            ffi::lua_setmetatable(state, -2);
            1
        }
    }

    /// `__gc`: drops the socket (its connection closes).
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn collect(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            if socket_arg(state).is_some() {
                let slot = ffi::lua_touserdata(state, 1).cast::<Slot>();
                (*slot).live = false;
                ManuallyDrop::drop(&mut (*slot).socket);
            }
            0
        }
    }

    /// The pointer a general step is given with the socket (the async steps' Lua halves).
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn socket_of(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let ptr: *const TcpSocket = method_socket(state);
            ffi::lua_pushlightuserdata(state, ptr.cast_mut().cast::<c_void>());
            1
        }
    }

    /// A step with no fast case: checked, then its general version.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn checked(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            fall_back(state, socket)
        }
    }

    /// `receive(pattern)`'s step, `(sock, first, pattern)`: a line or a size here.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn receive(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            let pattern = match ffi::lua_type(state, 3) {
                ffi::LUA_TNONE | ffi::LUA_TNIL => Pattern::Line,
                ffi::LUA_TNUMBER => Pattern::Bytes(ffi::lua_tonumber(state, 3).max(0.0) as usize),
                _ => return fall_back(state, socket),
            };
            let first = ffi::lua_toboolean(state, 2) != 0;
            let Some(mut conn) = socket.take_readable() else {
                return push_fail(state, "closed".to_string());
            };
            if first {
                conn.timer.reset();
            }
            let limit = socket.read_timeout.get();
            match poll_find(&mut conn, limit, |buf| pattern.find(buf)) {
                Poll::Pending => {
                    socket.put(conn);
                    ffi::lua_pushinteger(state, 0);
                    1
                }
                Poll::Ready(Ok(len)) => {
                    let piece = &conn.buf[..len];
                    let text = match pattern {
                        Pattern::Line => {
                            let line = &piece[..len - 1];
                            line.strip_suffix(b"\r").unwrap_or(line)
                        }
                        _ => piece,
                    };
                    if matches!(pattern, Pattern::Line) && memchr::memchr(b'\r', text).is_some() {
                        // A line with CRs inside: without them, a copy.
                        let line = without_cr(&piece[..len - 1]);
                        conn.buf.advance(len);
                        socket.put(conn);
                        ffi::lua_pushinteger(state, 1);
                        push_owned(state, line);
                        return 2;
                    }
                    let (at, text_len) = (text.as_ptr(), text.len());
                    let conn = Box::into_raw(conn);
                    ffi::lua_pushinteger(state, 1);
                    ffi::lua_pushlstring_(state, at.cast(), text_len);
                    let mut conn = Box::from_raw(conn);
                    conn.buf.advance(len);
                    socket.put(conn);
                    2
                }
                Poll::Ready(Err(e)) => {
                    conn.read_closed |= e != "timeout";
                    let partial = conn.buf.split();
                    socket.put(conn);
                    let partial = match pattern {
                        Pattern::Line => without_cr(&partial),
                        _ => partial.to_vec(),
                    };
                    // `nil, err, partial`, each string owned by a raw box while pushed.
                    let partial = Box::into_raw(partial.into_boxed_slice());
                    ffi::lua_pushinteger(state, 3);
                    ffi::lua_pushnil(state);
                    push_owned(state, e.into_bytes());
                    push_owned(state, Vec::from(Box::from_raw(partial)));
                    4
                }
            }
        }
    }

    /// `send(data)`'s step, `(sock, first, data)`: a string (or the rest of one) here.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn send(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            if ffi::lua_toboolean(state, 2) == 0 || ffi::lua_type(state, 3) != ffi::LUA_TSTRING {
                return fall_back(state, socket);
            }
            let mut len = 0;
            let at = ffi::lua_tolstring(state, 3, &mut len);
            // The string stays on the stack, unchanged, while this runs.
            let bytes = std::slice::from_raw_parts(at.cast::<u8>(), len);
            match send_first(socket, bytes) {
                Poll::Pending => {
                    ffi::lua_pushinteger(state, 0);
                    1
                }
                Poll::Ready(Ok(len)) => {
                    ffi::lua_pushinteger(state, 1);
                    ffi::lua_pushinteger(state, len as ffi::lua_Integer);
                    2
                }
                Poll::Ready(Err(e)) => push_fail(state, e),
            }
        }
    }

    /// `connect`'s step, `(sock, host, port)`: a connection from the pool here, or 0 (the
    /// Lua half then opens one).
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn connect(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            let plain = ffi::lua_gettop(state) <= 3
                && ffi::lua_type(state, 2) == ffi::LUA_TSTRING
                && ffi::lua_type(state, 3) == ffi::LUA_TNUMBER;
            if !plain {
                return fall_back(state, socket);
            }
            let mut len = 0;
            let at = ffi::lua_tolstring(state, 2, &mut len);
            let host = std::slice::from_raw_parts(at.cast::<u8>(), len);
            let port = ffi::lua_tonumber(state, 3) as i64;
            let (Ok(host), Ok(_)) = (std::str::from_utf8(host), u16::try_from(port)) else {
                return fall_back(state, socket);
            };
            if host.starts_with("unix:") {
                return fall_back(state, socket);
            }
            match connect_target(socket, host, Some(port as u16), None) {
                Some(conn) => {
                    socket.put(conn);
                    ffi::lua_pushinteger(state, 1);
                    ffi::lua_pushinteger(state, 1);
                    2
                }
                None => {
                    ffi::lua_pushinteger(state, 0);
                    1
                }
            }
        }
    }

    /// `settimeout(ms)`.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn settimeout(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            let Some(ms) = opt_number(state, 2) else {
                return fall_back(state, socket);
            };
            let limit = millis(ms);
            socket.connect_timeout.set(limit);
            socket.send_timeout.set(limit);
            socket.read_timeout.set(limit);
            0
        }
    }

    /// `settimeouts(connect, send, read)`.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn settimeouts(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            let (Some(connect), Some(send), Some(read)) = (
                opt_number(state, 2),
                opt_number(state, 3),
                opt_number(state, 4),
            ) else {
                return fall_back(state, socket);
            };
            socket.connect_timeout.set(millis(connect));
            socket.send_timeout.set(millis(send));
            socket.read_timeout.set(millis(read));
            0
        }
    }

    /// `setkeepalive(timeout, size)`: the connection into its pool.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn setkeepalive(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            let (Some(timeout), Some(size)) = (opt_number(state, 2), opt_number(state, 3)) else {
                return fall_back(state, socket);
            };
            let size = size.map(|s| s as i64);
            match keepalive(socket, timeout, size) {
                Ok(()) => {
                    ffi::lua_pushinteger(state, 1);
                    1
                }
                Err(e) => push_nil_err(state, e),
            }
        }
    }

    /// `close()`.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn close(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            match socket.take() {
                Some(conn) => {
                    drop(conn);
                    ffi::lua_pushinteger(state, 1);
                    1
                }
                None => push_nil_err(state, "closed"),
            }
        }
    }

    /// `getreusedtimes()`.
    pub(in crate::lua::cosocket) unsafe extern "C-unwind" fn getreusedtimes(
        state: *mut ffi::lua_State,
    ) -> c_int {
        unsafe {
            let socket = method_socket(state);
            let reused = socket.conn.borrow().as_ref().map(|conn| conn.reused);
            match reused {
                Some(reused) => {
                    ffi::lua_pushinteger(state, ffi::lua_Integer::from(reused));
                    1
                }
                None => push_nil_err(state, "closed"),
            }
        }
    }
}

pub(super) use c::{
    checked, close, collect, connect, getreusedtimes, new_socket, receive, send, setkeepalive,
    settimeout, settimeouts, socket_of,
};
