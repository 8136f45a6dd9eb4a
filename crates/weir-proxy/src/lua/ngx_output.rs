//! The answer a script writes, as lua-nginx-module's API gives it: `ngx.say`, `ngx.print`,
//! `ngx.flush`, `ngx.eof`, `ngx.exit`, `ngx.redirect`, `ngx.status`, `ngx.header` and
//! `ngx.ctx` (the last two as fields of `ngx` read and written through its metatable).

use super::carried;
use super::ngx_util::format_number;
use super::request::with_request;
use super::request::{Flush, RequestState, Streams};
use mlua::{Function, Lua, Table, Value, Variadic};

/// How deep `ngx.say` follows nested tables before giving up (a table holding itself).
const MAX_TABLE_DEPTH: usize = 100;

pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let fast: [(&str, bool, mlua::ffi::lua_CFunction); 2] = [
        ("say", true, raw_output::<true>),
        ("print", false, raw_output::<false>),
    ];
    for (name, newline, raw) in fast {
        let general =
            lua.create_function(move |_, args: Variadic<Value>| write_output(&args, newline))?;
        ngx.set(name, super::raw::c_closure(lua, raw, general)?)?;
    }
    let pending = Value::LightUserData(Lua::poll_pending());
    let (flush, eof) = lua
        .load(WAITING_OUTPUT)
        .set_name("=ngx.flush")
        .call::<(Function, Function)>((
            lua.create_function(flush_step)?,
            lua.create_function(eof_step)?,
            pending,
        ))?;
    ngx.set("flush", flush)?;
    ngx.set("eof", eof)?;
    // The prelude wraps these two: after noting the status, the script's coroutine yields
    // and is not resumed.
    ngx.set(
        "exit",
        lua.create_function(|_, status: i64| {
            with_request(|r| r.exit = Some(status))?;
            Ok(())
        })?,
    )?;
    ngx.set(
        "redirect",
        lua.create_function(|_, (uri, status): (String, Option<i64>)| {
            let status = status.unwrap_or(302);
            if ![301, 302, 303, 307, 308].contains(&status) {
                return Err(mlua::Error::runtime(format!(
                    "only ngx.HTTP_MOVED_TEMPORARILY, ngx.HTTP_MOVED_PERMANENTLY, ngx.HTTP_PERMANENT_REDIRECT, ngx.HTTP_SEE_OTHER, and ngx.HTTP_TEMPORARY_REDIRECT are allowed, got {status}"
                )));
            }
            with_request(|r| {
                set_header(r, "Location", vec![uri]);
                r.exit = Some(status);
            })?;
            Ok(())
        })?,
    )?;
    let header = lua.create_table()?;
    let header_meta = lua.create_table()?;
    header_meta.set(
        "__index",
        lua.create_function(|lua, (_, name): (Value, String)| {
            let values = with_request(|r| {
                let name = name.replace('_', "-");
                r.response_headers
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(&name))
                    .map(|(_, v)| v.clone())
                    .collect::<Vec<_>>()
            })?;
            match values.len() {
                0 => Ok(Value::Nil),
                1 => Ok(Value::String(lua.create_string(&values[0])?)),
                _ => Ok(Value::Table(lua.create_sequence_from(values)?)),
            }
        })?,
    )?;
    header_meta.set(
        "__newindex",
        lua.create_function(|_, (_, name, value): (Value, String, Value)| {
            let values = match value {
                Value::Nil => Vec::new(),
                Value::Table(list) => list
                    .sequence_values::<Value>()
                    .map(|v| v.and_then(|v| to_text(&v)))
                    .collect::<mlua::Result<_>>()?,
                value => vec![to_text(&value)?],
            };
            with_request(|r| {
                if r.headers_sent {
                    crate::log_error!(
                        "lua: attempt to set ngx.header.{name} after sending out response headers"
                    );
                } else {
                    set_header(r, &name.replace('_', "-"), values);
                }
            })
        })?,
    )?;
    header.set_metatable(Some(header_meta));
    ngx.set("header", header)?;
    let ngx_meta = lua.create_table()?;
    ngx_meta.set(
        "__index",
        lua.create_function(|lua, (_, key): (Value, String)| match key.as_str() {
            "status" => Ok(Value::Integer(with_request(|r| r.status)?.into())),
            "arg" => with_request(|r| super::body_filter::arg_table(lua, r))?,
            "ctx" => {
                let (ctx, key) = with_request(|r| (r.ctx.clone(), r.key))?;
                let ctx = match ctx {
                    Some(ctx) => ctx,
                    None => {
                        // The table an earlier phase of the request made, or a new one that
                        // its later phases will see.
                        let ctx = match carried::with(key, |c| c.ctx.clone()).flatten() {
                            Some(ctx) => ctx,
                            None => {
                                let ctx = lua.create_table()?;
                                carried::with(key, |c| c.ctx = Some(ctx.clone()));
                                ctx
                            }
                        };
                        with_request(|r| r.ctx = Some(ctx.clone()))?;
                        ctx
                    }
                };
                Ok(Value::Table(ctx))
            }
            _ => Ok(Value::Nil),
        })?,
    )?;
    ngx_meta.set(
        "__newindex",
        lua.create_function(
            |_, (ngx, key, value): (Table, String, Value)| match key.as_str() {
                "status" => {
                    let status = match value {
                        Value::Integer(n) => n,
                        Value::Number(n) => n as i64,
                        _ => return Err(mlua::Error::runtime("ngx.status must be a number")),
                    };
                    with_request(|r| {
                        if r.headers_sent {
                            crate::log_error!(
                                "lua: attempt to set ngx.status after sending out response headers"
                            );
                        } else {
                            r.status = status.clamp(0, 999) as u16;
                        }
                    })
                }
                "ctx" => match value {
                    Value::Table(t) => with_request(|r| {
                        carried::with(r.key, |c| c.ctx = Some(t.clone()));
                        r.ctx = Some(t);
                    }),
                    _ => Err(mlua::Error::runtime("ngx.ctx must be a table")),
                },
                _ => ngx.raw_set(key, value),
            },
        )?,
    )?;
    ngx.set_metatable(Some(ngx_meta));
    Ok(())
}

/// `ngx.flush` and `ngx.eof`: each calls its Rust step, and while the step answers 0 (the
/// script must wait for its output to be written: a streamed answer's), yields the "pending"
/// marker (passed up through the script's own coroutines as a cosocket's wait is) and asks
/// the step again once resumed.
const WAITING_OUTPUT: &str = r##"
local flush_step, eof_step, pending = ...
local yield, select, error = coroutine.yield, select, error
local function waited(step, n, err)
  while n == 0 do
    yield(pending)
    n, err = step(false)
  end
  if n then return n end
  return nil, err
end
local function flush(...)
  local n = select("#", ...)
  if n > 1 then error("attempt to pass " .. n .. " arguments, but accepted 0 or 1", 2) end
  return waited(flush_step, flush_step(true, ...))
end
local function eof(...)
  local n = select("#", ...)
  if n > 0 then error("no argument is expected", 2) end
  return waited(eof_step, eof_step(true))
end
return flush, eof
"##;

/// What a step of `ngx.flush` or `ngx.eof` answers: 1, 0 to wait, or nil and the error.
type Step = (Option<i64>, Option<&'static str>);

const OUTPUT_FAILED: Step = (None, Some("nginx output filter error"));

/// `ngx.flush(wait)`'s Rust half, with lua-nginx-module's answers. Either form yields to
/// hand its output to the relay; with `wait` the script goes on once the output is written,
/// without it once the relay took it (`relay_produced` runs the script on meanwhile).
fn flush_step(_: &Lua, (first, wait): (bool, Option<bool>)) -> mlua::Result<Step> {
    with_request(|r| {
        if !first {
            return flushed(r);
        }
        match r.streams() {
            Streams::No => return (Some(1), None),
            Streams::HeaderOnly => return (None, Some("header only")),
            _ if r.gone => return OUTPUT_FAILED,
            _ if r.eof => return (None, Some("seen eof")),
            Streams::Buffering => return (None, Some("buffering")),
            Streams::Yes => {}
        }
        if !r.headers_sent {
            return (None, Some("nothing to flush"));
        }
        if r.streaming && r.output.is_empty() {
            return (Some(1), None);
        }
        r.flush = Flush::Asked;
        r.flush_queues = wait != Some(true);
        (Some(0), None)
    })
}

/// `ngx.eof()`'s Rust half: the answer ends (a streamed one as soon as its output is
/// written); output after it is dropped, and the script runs on.
fn eof_step(_: &Lua, first: bool) -> mlua::Result<Step> {
    with_request(|r| {
        if !first {
            return flushed(r);
        }
        if r.eof {
            return (None, Some("seen eof"));
        }
        r.headers_sent = true;
        r.eof = true;
        if r.streams() != Streams::Yes {
            return (Some(1), None);
        }
        r.flush = Flush::Asked;
        r.flush_queues = false;
        (Some(0), None)
    })
}

/// A waiting flush's answer once the script is resumed: 0 while its output is not written.
fn flushed(r: &mut RequestState) -> Step {
    if r.flush != Flush::Done {
        return (Some(0), None);
    }
    r.flush = Flush::None;
    if r.gone {
        OUTPUT_FAILED
    } else {
        (Some(1), None)
    }
}

/// Replaces every header field named `name` (any case) by `values`.
fn set_header(r: &mut RequestState, name: &str, values: Vec<String>) {
    r.response_edits.push(name.to_string());
    r.response_headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    for value in values {
        r.response_headers.push((name.to_string(), value));
    }
}

/// A header value as lua-nginx-module takes it: a string, or a number in its text form.
fn to_text(value: &Value) -> mlua::Result<String> {
    match value {
        Value::String(s) => Ok(s.to_string_lossy()),
        Value::Integer(n) => Ok(format_number(*n as f64)),
        Value::Number(n) => Ok(format_number(*n)),
        Value::Boolean(b) => Ok(b.to_string()),
        other => Err(mlua::Error::runtime(format!(
            "attempt to set a header to a {}",
            other.type_name()
        ))),
    }
}

/// `ngx.say` / `ngx.print`: the arguments (nested tables flattened) appended to the body;
/// after `ngx.eof`, or once the client left a streamed answer, nginx's error.
fn write_output(args: &[Value], newline: bool) -> mlua::Result<Step> {
    let mut bytes = Vec::new();
    for arg in args {
        append(&mut bytes, arg, 0)?;
    }
    if newline {
        bytes.push(b'\n');
    }
    with_request(|r| {
        if r.gone {
            return OUTPUT_FAILED;
        }
        if r.eof {
            return (None, Some("seen eof"));
        }
        r.headers_sent = true;
        r.output.extend_from_slice(&bytes);
        (Some(1), None)
    })
}

/// `ngx.say` (`NEWLINE`) and `ngx.print` for their common call, every argument a string or an
/// integer written whole (`ngx.say(n)` after a counter's `incr`), against Lua's C API
/// (`raw.rs`): the strings are copied into the answer straight off the stack, the integers
/// written as [`format_number`] writes them, with no string made. Any other call goes to
/// upvalue 1, [`write_output`], with its conversions and errors (and one after `ngx.eof`,
/// which answers nginx's error).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn raw_output<const NEWLINE: bool>(
    state: *mut mlua::ffi::lua_State,
) -> std::os::raw::c_int {
    use mlua::ffi;
    // SAFETY: reads the arguments with the C API's type checks; `lua_tolstring` on a string
    // neither allocates nor raises, so the request's borrow is never unwound past.
    unsafe {
        let count = ffi::lua_gettop(state);
        // Whether any argument is a number: if none, the strings alone are looked at below.
        let mut numbers = false;
        let plain = |at| match ffi::lua_type(state, at) {
            ffi::LUA_TSTRING => true,
            ffi::LUA_TNUMBER => {
                numbers = true;
                whole(ffi::lua_tonumber(state, at)).is_some()
            }
            _ => false,
        };
        if (1..=count).all(plain) {
            let written = with_request(|r| {
                if r.eof {
                    return false;
                }
                r.headers_sent = true;
                // Room for all of it at once: a body written in one call is then as long as
                // its buffer, which the reply takes without another allocation.
                let mut total = usize::from(NEWLINE);
                // Not `lua_objlen` on a number: it would make the number's string.
                for at in 1..=count {
                    total += match numbers && ffi::lua_type(state, at) == ffi::LUA_TNUMBER {
                        true => 20,
                        false => ffi::lua_objlen(state, at),
                    };
                }
                r.output.reserve(total);
                for at in 1..=count {
                    if numbers && ffi::lua_type(state, at) == ffi::LUA_TNUMBER {
                        // Whole: `plain` checked.
                        let n = whole(ffi::lua_tonumber(state, at)).unwrap_or(0);
                        if n < 0 {
                            r.output.push(b'-');
                        }
                        crate::http::codec::push_decimal(&mut r.output, n.unsigned_abs());
                        continue;
                    }
                    let mut len = 0;
                    let text = ffi::lua_tolstring(state, at, &mut len);
                    r.output
                        .extend_from_slice(std::slice::from_raw_parts(text.cast::<u8>(), len));
                }
                if NEWLINE {
                    r.output.push(b'\n');
                }
                true
            });
            if matches!(written, Ok(true)) {
                ffi::lua_pushinteger(state, 1);
                return 1;
            }
        }
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, count, ffi::LUA_MULTRET);
        ffi::lua_gettop(state)
    }
}

/// `n` as an integer when [`format_number`] writes it as one (all its digits, no exponent).
fn whole(n: f64) -> Option<i64> {
    (n == n.trunc() && n.abs() < 1e14).then_some(n as i64)
}

/// One argument of `ngx.say` in lua-nginx-module's text: strings and numbers as Lua prints
/// them, `nil`, `true`, `false`, `ngx.null` as `null`, and an array's items in order.
fn append(out: &mut Vec<u8>, value: &Value, depth: usize) -> mlua::Result<()> {
    match value {
        Value::String(s) => out.extend_from_slice(&s.as_bytes()),
        Value::Integer(n) => out.extend_from_slice(format_number(*n as f64).as_bytes()),
        Value::Number(n) => out.extend_from_slice(format_number(*n).as_bytes()),
        Value::Nil => out.extend_from_slice(b"nil"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Table(t) => {
            if depth >= MAX_TABLE_DEPTH {
                return Err(mlua::Error::runtime("table nested too deep to print"));
            }
            for item in t.clone().sequence_values::<Value>() {
                append(out, &item?, depth + 1)?;
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument to 'say' or 'print' (string, number, boolean, nil, ngx.null, or array table expected, got {})",
                other.type_name()
            )))
        }
    }
    Ok(())
}
