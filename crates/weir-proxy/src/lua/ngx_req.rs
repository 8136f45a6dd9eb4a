//! What the script reads of its request and may change: `ngx.req.*` and `ngx.var.*`, as
//! lua-nginx-module 0.10 gives them.

use super::ngx_util::{args_table, format_number};
use super::request::{with_request, RequestState};
use bytes::Bytes;
use mlua::{Function, Lua, Table, Value};
use std::collections::HashMap;

/// lua-nginx-module's `ngx.HTTP_*` method numbers, by name.
pub(super) const METHODS: &[(&str, i64)] = &[
    ("GET", 2),
    ("HEAD", 4),
    ("POST", 8),
    ("PUT", 16),
    ("DELETE", 32),
    ("MKCOL", 64),
    ("COPY", 128),
    ("MOVE", 256),
    ("OPTIONS", 512),
    ("PROPFIND", 1024),
    ("PROPPATCH", 2048),
    ("LOCK", 4096),
    ("UNLOCK", 8192),
    ("PATCH", 16384),
    ("TRACE", 32768),
];

/// `get_uri_args`' and `get_post_args`' default bound on arguments, as lua-nginx-module's.
const DEFAULT_MAX_ARGS: usize = 100;
/// `get_headers`' default bound.
const DEFAULT_MAX_HEADERS: usize = 100;

pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let req = lua.create_table()?;
    req.set(
        "get_method",
        lua.create_function(|_, ()| with_request(|r| r.method().to_string()))?,
    )?;
    req.set(
        "set_method",
        lua.create_function(|_, method: i64| {
            let name = METHODS
                .iter()
                .find(|(_, n)| *n == method)
                .map(|(name, _)| *name)
                .ok_or_else(|| {
                    mlua::Error::runtime(format!("unsupported HTTP method: {method}"))
                })?;
            with_request(|r| r.method = Some(name.to_string()))
        })?,
    )?;
    req.set(
        "http_version",
        lua.create_function(|_, ()| with_request(|r| 1.0 + f64::from(r.minor_version) / 10.0))?,
    )?;
    req.set(
        "start_time",
        lua.create_function(|_, ()| with_request(|r| r.start_time()))?,
    )?;
    req.set(
        "get_uri_args",
        lua.create_function(|lua, max: Option<usize>| {
            let args = with_request(|r| r.args().to_string())?;
            args_table(lua, args.as_bytes(), max.unwrap_or(DEFAULT_MAX_ARGS))
        })?,
    )?;
    req.set(
        "set_uri_args",
        lua.create_function(|lua, args: Value| {
            let query = query_text(lua, args, "#1 to 'set_uri_args'")?;
            with_request(|r| r.args = Some(query))
        })?,
    )?;
    req.set(
        "set_uri",
        lua.create_function(|_, (uri, jump): (String, Option<bool>)| {
            if uri.is_empty() {
                return Err(mlua::Error::runtime("attempt to use zero-length uri"));
            }
            if jump == Some(true) {
                return Err(mlua::Error::runtime(
                    "ngx.req.set_uri with jump is not supported by weir",
                ));
            }
            with_request(|r| r.uri = Some(uri))
        })?,
    )?;
    req.set(
        "get_headers",
        lua.create_function(|lua, (max, raw): (Option<usize>, Option<bool>)| {
            get_headers(
                lua,
                max.unwrap_or(DEFAULT_MAX_HEADERS),
                raw.unwrap_or(false),
            )
        })?,
    )?;
    req.set(
        "set_header",
        lua.create_function(|_, (name, value): (String, Value)| {
            let values: Vec<Vec<u8>> = match value {
                Value::Nil => Vec::new(),
                Value::Table(t) => t
                    .sequence_values::<mlua::String>()
                    .map(|v| v.map(|s| s.as_bytes().to_vec()))
                    .collect::<mlua::Result<_>>()?,
                Value::String(s) => vec![s.as_bytes().to_vec()],
                Value::Integer(n) => vec![format_number(n as f64).into_bytes()],
                Value::Number(n) => vec![format_number(n).into_bytes()],
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "bad header value: {}",
                        other.type_name()
                    )))
                }
            };
            with_request(|r| set_request_header(r, &name.replace('_', "-"), values))
        })?,
    )?;
    req.set(
        "clear_header",
        lua.create_function(|_, name: String| {
            with_request(|r| set_request_header(r, &name.replace('_', "-"), Vec::new()))
        })?,
    )?;
    // `read_body` yields while the body is read (in `rewrite` and `access`; the content
    // action has it before it starts): the Rust half says whether to wait.
    let ask_body = lua.create_function(|_, ()| {
        with_request(|r| {
            let wait = r.body.is_none() && r.body_pending;
            r.wants_body = wait;
            r.body_read = !wait;
            wait
        })
    })?;
    req.set("read_body", yielding(lua, ask_body)?)?;
    // `ngx.exec(uri, args)`: an internal redirect; the script ends there (the Rust half
    // notes the target, the Lua half yields and is not resumed, as `ngx.exit`).
    let note_exec = lua.create_function(|lua, (uri, args): (String, Value)| {
        if uri.starts_with('@') {
            return Err(mlua::Error::runtime(
                "ngx.exec to a named location is not supported by weir",
            ));
        }
        let (path, mut query) = match uri.split_once('?') {
            Some((path, query)) => (path.to_string(), query.to_string()),
            None => (uri.clone(), String::new()),
        };
        let extra = match args {
            Value::Nil => String::new(),
            args => query_text(lua, args, "#2 to 'exec'")?,
        };
        if !extra.is_empty() {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str(&extra);
        }
        with_request(|r| {
            r.exec = Some((path, query));
            r.exit = Some(0);
            true
        })
    })?;
    ngx.set("exec", yielding(lua, note_exec)?)?;
    req.set(
        "set_body_data",
        lua.create_function(|_, data: mlua::String| {
            with_request(|r| {
                // As lua-nginx-module: the body is read (or known absent) first.
                if !r.body_read {
                    return Err(mlua::Error::runtime("request body not read"));
                }
                r.body = Some(Bytes::copy_from_slice(&data.as_bytes()));
                r.body_set = true;
                Ok(())
            })?
        })?,
    )?;
    req.set(
        "discard_body",
        lua.create_function(|_, ()| with_request(|r| r.body = None))?,
    )?;
    req.set(
        "get_body_data",
        lua.create_function(|lua, ()| {
            let body = with_request(|r| r.body.clone().filter(|_| r.body_read))?;
            match body {
                Some(body) if !body.is_empty() => Ok(Value::String(lua.create_string(&body)?)),
                _ => Ok(Value::Nil),
            }
        })?,
    )?;
    req.set(
        "get_post_args",
        lua.create_function(|lua, max: Option<usize>| {
            let body = with_request(|r| r.body_read.then(|| r.body.clone()))?;
            match body {
                None => Ok((
                    Value::Nil,
                    Value::String(lua.create_string("request body not read")?),
                )),
                Some(body) => {
                    let body = body.unwrap_or_default();
                    let args = args_table(lua, &body, max.unwrap_or(DEFAULT_MAX_ARGS))?;
                    Ok((Value::Table(args), Value::Nil))
                }
            }
        })?,
    )?;
    ngx.set("req", req)?;
    let var = lua.create_table()?;
    let var_meta = lua.create_table()?;
    var_meta.set(
        "__index",
        lua.create_function(|lua, (_, name): (Value, String)| {
            let value = with_request(|r| variable(r, &name))?;
            match value {
                Some(v) => Ok(Value::String(lua.create_string(&v)?)),
                None => Ok(Value::Nil),
            }
        })?,
    )?;
    var_meta.set(
        "__newindex",
        lua.create_function(|_, (_, name, value): (Value, String, Value)| {
            let text = match value {
                Value::Nil => None,
                Value::String(s) => Some(s.to_string_lossy()),
                Value::Integer(n) => Some(format_number(n as f64)),
                Value::Number(n) => Some(format_number(n)),
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "bad variable value: {}",
                        other.type_name()
                    )))
                }
            };
            with_request(|r| set_variable(r, &name, text))
        })?,
    )?;
    var.set_metatable(Some(var_meta));
    ngx.set("var", var)?;
    Ok(())
}

/// `ngx.req.get_headers`: names lowercased (as sent with `raw`), a repeated field as a list;
/// a lookup by any case or with `_` for `-` finds it (the table's metatable).
fn get_headers(lua: &Lua, max: usize, raw: bool) -> mlua::Result<Table> {
    let headers = with_request(|r| r.header_list())?;
    let table = lua.create_table()?;
    for (count, (name, value)) in headers.into_iter().enumerate() {
        if max != 0 && count >= max {
            break;
        }
        let name = if raw { name } else { name.to_ascii_lowercase() };
        let value = lua.create_string(&value)?;
        match table.raw_get::<Value>(name.as_str())? {
            Value::Nil => table.raw_set(name, value)?,
            Value::Table(list) => list.raw_push(value)?,
            first => table.raw_set(
                name,
                lua.create_sequence_from([first, Value::String(value)])?,
            )?,
        }
    }
    if !raw {
        let meta = lua.create_table()?;
        meta.set(
            "__index",
            lua.create_function(|_, (t, key): (Table, String)| {
                t.raw_get::<Value>(key.to_ascii_lowercase().replace('_', "-"))
            })?,
        )?;
        table.set_metatable(Some(meta));
    }
    Ok(table)
}

/// A query given as a string or a table (`ngx.encode_args`'s form); `argument` names it in
/// the error for anything else.
fn query_text(lua: &Lua, args: Value, argument: &str) -> mlua::Result<String> {
    match args {
        Value::String(s) => Ok(s.to_string_lossy()),
        Value::Table(t) => super::ngx_util::encode_args(lua, &t),
        other => Err(mlua::Error::runtime(format!(
            "bad argument {argument} (string or table expected, got {})",
            other.type_name()
        ))),
    }
}

/// An API function that may have to leave the script's coroutine (which a Rust function
/// cannot do): `rust_half` does the work and says whether to yield, and a Lua half yields.
fn yielding(lua: &Lua, rust_half: Function) -> mlua::Result<Function> {
    let coroutine_yield: Function = lua.globals().get::<Table>("coroutine")?.get("yield")?;
    lua.load("local f, yield = ... return function(...) if f(...) then yield() end end")
        .set_name("=weir")
        .call((rust_half, coroutine_yield))
}

/// Replaces the request's fields named `name` by `values` (none: removes them).
fn set_request_header(r: &mut RequestState, name: &str, values: Vec<Vec<u8>>) {
    r.request_edits.push(name.to_string());
    let headers = r.headers_mut();
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    for value in values {
        headers.push((name.to_string(), value));
    }
}

/// `ngx.var.NAME`: nginx's variable of that name, as text.
fn variable(r: &RequestState, name: &str) -> Option<Vec<u8>> {
    if let Some(value) = r.vars.as_ref().and_then(|vars| vars.get(name)) {
        return Some(value.clone().into_bytes());
    }
    // One an earlier phase of the request wrote.
    let written = super::carried::with(r.key, |c| c.vars.get(name).cloned());
    if let Some(value) = written.flatten() {
        return Some(value.into_bytes());
    }
    let text = |s: &str| Some(s.as_bytes().to_vec());
    match name {
        "uri" | "document_uri" => Some(r.uri().into_bytes()),
        "request_uri" => text(r.request_uri()),
        "args" | "query_string" => (!r.args().is_empty()).then(|| r.args().as_bytes().to_vec()),
        "is_args" => text(if r.args().is_empty() { "" } else { "?" }),
        "request_method" => text(r.method()),
        "scheme" => text(r.scheme),
        "https" => text(if r.scheme == "https" { "on" } else { "" }),
        "remote_addr" | "realip_remote_addr" => text(r.remote_addr()),
        "server_protocol" => Some(format!("HTTP/1.{}", r.minor_version).into_bytes()),
        "host" => {
            let host = r.header("host").unwrap_or_default();
            let host = String::from_utf8_lossy(host);
            let without_port = match host.rsplit_once(':') {
                Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
                _ => &host,
            };
            Some(without_port.to_ascii_lowercase().into_bytes())
        }
        "server_port" => {
            let host = r.header("host").unwrap_or_default();
            let host = String::from_utf8_lossy(host);
            match host.rsplit_once(':') {
                Some((_, port)) if port.bytes().all(|b| b.is_ascii_digit()) => text(port),
                _ => text(if r.scheme == "https" { "443" } else { "80" }),
            }
        }
        "status" => text(&r.status.to_string()),
        "content_type" => r.header("content-type").map(<[u8]>::to_vec),
        "content_length" => r.header("content-length").map(<[u8]>::to_vec),
        "request_body" => r.body.as_ref().filter(|_| r.body_read).map(|b| b.to_vec()),
        _ => {
            if let Some(header) = name.strip_prefix("http_") {
                r.header(&header.replace('_', "-")).map(<[u8]>::to_vec)
            } else if let Some(arg) = name.strip_prefix("arg_") {
                query_arg(r.args(), arg)
            } else if let Some(cookie) = name.strip_prefix("cookie_") {
                let cookies = r.header("cookie")?;
                cookie_value(cookies, cookie.as_bytes())
            } else {
                None
            }
        }
    }
}

/// Writes `ngx.var.NAME`: `args` changes the query; any other name is a user variable
/// (weir has no `set $var`: every name may be written).
fn set_variable(r: &mut RequestState, name: &str, value: Option<String>) {
    match name {
        "args" | "query_string" => r.args = Some(value.unwrap_or_default()),
        _ => {
            // Later phases of the request see it too.
            super::carried::with(r.key, |c| match &value {
                Some(value) => c.vars.insert(name.to_string(), value.clone()),
                None => c.vars.remove(name),
            });
            match value {
                Some(value) => {
                    let vars = r.vars.get_or_insert_with(HashMap::new);
                    vars.insert(name.to_string(), value);
                }
                None => {
                    if let Some(vars) = &mut r.vars {
                        vars.remove(name);
                    }
                }
            }
        }
    }
}

/// `$arg_NAME`: the first argument of that name (any case), raw as sent.
fn query_arg(args: &str, name: &str) -> Option<Vec<u8>> {
    args.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key.eq_ignore_ascii_case(name)
            .then(|| value.as_bytes().to_vec())
    })
}

/// `$cookie_NAME`: the value of that cookie in a `Cookie` header.
fn cookie_value(cookies: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    cookies.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii_start();
        let eq = pair.iter().position(|&b| b == b'=')?;
        (pair[..eq].eq_ignore_ascii_case(name)).then(|| pair[eq + 1..].to_vec())
    })
}
