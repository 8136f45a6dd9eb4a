//! `require "cjson"` and `require "cjson.safe"` as OpenResty bundles lua-cjson: `encode`
//! (an empty table as `{}`, arrays with `null` holes unless excessively sparse, `/` escaped,
//! numbers as `%.14g`), `decode` over serde_json (`null` as `cjson.null`, which is
//! `ngx.null`), `cjson.empty_array`, `cjson.array_mt`, `cjson.empty_array_mt` and the settings
//! named in docs/lua.md.

use super::ngx_util::format_number;
use mlua::{LightUserData, Lua, MultiValue, Table, Value};
use std::cell::Cell;
use std::rc::Rc;

/// lua-cjson's bound on nesting when encoding.
const MAX_DEPTH: usize = 1000;

/// `cjson.empty_array`'s identity: a light userdata no other value has.
static EMPTY_ARRAY_MARK: u8 = 0;

fn empty_array() -> LightUserData {
    LightUserData(std::ptr::addr_of!(EMPTY_ARRAY_MARK) as *mut std::ffi::c_void)
}

/// `cjson`'s `encode` and `decode` over `cjson.safe`'s: an error is raised, not returned.
const RAISING: &str = r#"
local m = ...
local encode, decode, error = m.encode, m.decode, error
m.encode = function(v) local r, err = encode(v) if err then error(err, 0) end return r end
m.decode = function(s) local r, err = decode(s) if err then error(err, 0) end return r end
"#;

/// One module's settings (`cjson` and `cjson.safe` each have their own, as in lua-cjson).
struct Settings {
    empty_table_as_object: Cell<bool>,
    escape_forward_slash: Cell<bool>,
    /// `encode_sparse_array(convert, ratio, safe)`.
    sparse_convert: Cell<bool>,
    sparse_ratio: Cell<u32>,
    sparse_safe: Cell<u32>,
}

/// The on/off settings.
#[derive(Clone, Copy)]
enum Flag {
    EmptyTableAsObject,
    EscapeForwardSlash,
}

impl Settings {
    fn flag(&self, flag: Flag) -> &Cell<bool> {
        match flag {
            Flag::EmptyTableAsObject => &self.empty_table_as_object,
            Flag::EscapeForwardSlash => &self.escape_forward_slash,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            empty_table_as_object: Cell::new(true),
            escape_forward_slash: Cell::new(true),
            sparse_convert: Cell::new(false),
            sparse_ratio: Cell::new(2),
            sparse_safe: Cell::new(10),
        }
    }
}

/// Registers both modules in `package.preload`.
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    let array_mt = lua.create_table()?;
    let empty_array_mt = lua.create_table()?;
    let preload: Table = lua.globals().get::<Table>("package")?.get("preload")?;
    for (name, safe) in [("cjson", false), ("cjson.safe", true)] {
        let module = module(lua, safe, &array_mt, &empty_array_mt)?;
        if !safe {
            // Raised from Lua, so `pcall` gets the message as a string, as from lua-cjson.
            lua.load(RAISING)
                .set_name("=cjson")
                .call::<()>(module.clone())?;
        }
        preload.set(name, lua.create_function(move |_, ()| Ok(module.clone()))?)?;
    }
    Ok(())
}

fn module(lua: &Lua, safe: bool, array_mt: &Table, empty_array_mt: &Table) -> mlua::Result<Table> {
    let settings = Rc::new(Settings::default());
    let module = lua.create_table()?;
    module.set("null", Value::NULL)?;
    module.set("empty_array", Value::LightUserData(empty_array()))?;
    module.set("array_mt", array_mt.clone())?;
    module.set("empty_array_mt", empty_array_mt.clone())?;
    module.set("_NAME", if safe { "cjson.safe" } else { "cjson" })?;
    module.set("_VERSION", "2.1.0.10")?;
    let (s, arrays, empties) = (settings.clone(), array_mt.clone(), empty_array_mt.clone());
    module.set(
        "encode",
        lua.create_function(move |lua, value: Value| {
            let mut out = Vec::new();
            let encoder = Encoder {
                settings: &s,
                array_mt: &arrays,
                empty_array_mt: &empties,
            };
            match encoder.encode(&mut out, &value, 0) {
                Ok(()) => Ok(MultiValue::from_vec(vec![Value::String(
                    lua.create_string(out)?,
                )])),
                Err(message) => Ok(MultiValue::from_vec(vec![
                    Value::Nil,
                    Value::String(lua.create_string(message)?),
                ])),
            }
        })?,
    )?;
    module.set(
        "decode",
        lua.create_function(move |lua, text: mlua::String| {
            let parsed = serde_json::from_slice::<serde_json::Value>(&text.as_bytes());
            match parsed {
                Ok(json) => Ok(MultiValue::from_vec(vec![to_lua(lua, &json)?])),
                Err(e) => {
                    let message = format!("Expected value but found invalid token: {e}");
                    Ok(MultiValue::from_vec(vec![
                        Value::Nil,
                        Value::String(lua.create_string(message)?),
                    ]))
                }
            }
        })?,
    )?;
    for (name, flag) in [
        ("encode_empty_table_as_object", Flag::EmptyTableAsObject),
        ("encode_escape_forward_slash", Flag::EscapeForwardSlash),
    ] {
        let s = settings.clone();
        module.set(
            name,
            lua.create_function(move |_, on: Option<Value>| {
                let cell = s.flag(flag);
                if let Some(on) = on {
                    cell.set(is_on(&on));
                }
                Ok(cell.get())
            })?,
        )?;
    }
    let s = settings;
    module.set(
        "encode_sparse_array",
        lua.create_function(
            move |_, (convert, ratio, safe_len): (Option<Value>, Option<u32>, Option<u32>)| {
                if let Some(convert) = convert {
                    s.sparse_convert.set(is_on(&convert));
                }
                if let Some(ratio) = ratio {
                    s.sparse_ratio.set(ratio);
                }
                if let Some(safe_len) = safe_len {
                    s.sparse_safe.set(safe_len);
                }
                Ok((
                    s.sparse_convert.get(),
                    s.sparse_ratio.get(),
                    s.sparse_safe.get(),
                ))
            },
        )?,
    )?;
    Ok(module)
}

/// lua-cjson's setting values: `true`, `"on"` or `1` turn it on.
fn is_on(value: &Value) -> bool {
    match value {
        Value::Boolean(b) => *b,
        Value::String(s) => s.as_bytes().as_ref() == b"on",
        Value::Integer(n) => *n != 0,
        Value::Number(n) => *n != 0.0,
        _ => false,
    }
}

struct Encoder<'a> {
    settings: &'a Settings,
    array_mt: &'a Table,
    empty_array_mt: &'a Table,
}

impl Encoder<'_> {
    fn encode(&self, out: &mut Vec<u8>, value: &Value, depth: usize) -> Result<(), String> {
        match value {
            Value::Nil => out.extend_from_slice(b"null"),
            Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
            Value::LightUserData(p) if *p == empty_array() => out.extend_from_slice(b"[]"),
            Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Integer(n) => out.extend_from_slice(format_number(*n as f64).as_bytes()),
            Value::Number(n) => {
                if !n.is_finite() {
                    return Err("Cannot serialise number: must not be NaN or Infinity".into());
                }
                out.extend_from_slice(format_number(*n).as_bytes());
            }
            Value::String(s) => self.string(out, &s.as_bytes()),
            Value::Table(t) => {
                if depth >= MAX_DEPTH {
                    return Err(format!(
                        "Cannot serialise, excessive nesting ({})",
                        depth + 1
                    ));
                }
                self.table(out, t, depth + 1)?;
            }
            other => {
                return Err(format!(
                    "Cannot serialise {}: type not supported",
                    other.type_name()
                ))
            }
        }
        Ok(())
    }

    fn string(&self, out: &mut Vec<u8>, bytes: &[u8]) {
        out.push(b'"');
        for &b in bytes {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'/' if self.settings.escape_forward_slash.get() => out.extend_from_slice(b"\\/"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                b if b < 0x20 || b == 0x7f => {
                    out.extend_from_slice(format!("\\u{b:04x}").as_bytes())
                }
                b => out.push(b),
            }
        }
        out.push(b'"');
    }

    fn table(&self, out: &mut Vec<u8>, t: &Table, depth: usize) -> Result<(), String> {
        let lua_error = |e: mlua::Error| e.to_string();
        let meta = t.metatable();
        let marked_array = meta
            .as_ref()
            .is_some_and(|m| m == self.array_mt || m == self.empty_array_mt);
        // An array: only positive integer keys (lua-cjson's `lua_array_length`).
        let mut max = 0usize;
        let mut count = 0usize;
        let mut is_array = true;
        for pair in t.clone().pairs::<Value, Value>() {
            let (key, _) = pair.map_err(lua_error)?;
            let index = match key {
                Value::Integer(n) if n >= 1 => Some(n as usize),
                Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => Some(n as usize),
                _ => None,
            };
            match index {
                Some(i) => {
                    max = max.max(i);
                    count += 1;
                }
                None => {
                    is_array = false;
                    break;
                }
            }
        }
        if is_array && count == 0 && !marked_array && self.settings.empty_table_as_object.get() {
            out.extend_from_slice(b"{}");
            return Ok(());
        }
        if is_array {
            let sparse = max > self.settings.sparse_safe.get() as usize
                && max > count * self.settings.sparse_ratio.get() as usize;
            if !sparse || marked_array {
                out.push(b'[');
                for i in 1..=max {
                    if i > 1 {
                        out.push(b',');
                    }
                    let item: Value = t.raw_get(i).map_err(lua_error)?;
                    self.encode(out, &item, depth)?;
                }
                out.push(b']');
                return Ok(());
            }
            if !self.settings.sparse_convert.get() {
                return Err("Cannot serialise table: excessively sparse array".into());
            }
        }
        out.push(b'{');
        let mut first = true;
        for pair in t.clone().pairs::<Value, Value>() {
            let (key, value) = pair.map_err(lua_error)?;
            if !first {
                out.push(b',');
            }
            first = false;
            match &key {
                Value::String(s) => self.string(out, &s.as_bytes()),
                Value::Integer(n) => self.string(out, format_number(*n as f64).as_bytes()),
                Value::Number(n) => self.string(out, format_number(*n).as_bytes()),
                _ => {
                    return Err(
                        "Cannot serialise table: table key must be a number or string".into(),
                    )
                }
            }
            out.push(b':');
            self.encode(out, &value, depth)?;
        }
        out.push(b'}');
        Ok(())
    }
}

fn to_lua(lua: &Lua, json: &serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as Json;
    Ok(match json {
        Json::Null => Value::NULL,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Value::String(lua.create_string(s)?),
        Json::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Json::Object(fields) => {
            let t = lua.create_table_with_capacity(0, fields.len())?;
            for (key, value) in fields {
                t.raw_set(key.as_str(), to_lua(lua, value)?)?;
            }
            Value::Table(t)
        }
    })
}
