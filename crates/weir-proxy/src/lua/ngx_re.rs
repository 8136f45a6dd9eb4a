//! `ngx.re.match`, `find`, `gmatch`, `sub` and `gsub` as lua-nginx-module 0.10 returns
//! them (captures from `[0]`, unmatched groups as `false`, named groups by name, `ctx.pos`),
//! over the `regex` crate rather than PCRE: no backtracking, so no pattern can stall a worker,
//! and no new native library; what PCRE has that it lacks (look-around, back-references)
//! fails to compile with an error naming the pattern. Compiled patterns are kept per worker.

use super::ngx_util::format_number;
use mlua::{Function, Lua, MultiValue, Table, Value};
use regex::bytes::{Captures, Regex, RegexBuilder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Patterns kept per worker, as lua-nginx-module's `lua_regex_cache_max_entries`' default.
const CACHE_ENTRIES: usize = 1024;

/// A pattern and its options.
type CacheKey = (Vec<u8>, String);

thread_local! {
    static CACHE: RefCell<HashMap<CacheKey, Rc<Compiled>>> = RefCell::new(HashMap::new());
}

struct Compiled {
    regex: Regex,
    /// `a`: the match must start where the search does.
    anchored: bool,
    /// `u`: an empty match steps over a whole UTF-8 character.
    utf8: bool,
}

fn compile(pattern: &[u8], options: &str) -> Result<Rc<Compiled>, String> {
    let key = (pattern.to_vec(), options.to_string());
    if let Some(compiled) = CACHE.with_borrow(|c| c.get(&key).cloned()) {
        return Ok(compiled);
    }
    let text = std::str::from_utf8(pattern)
        .map_err(|_| "failed to compile regex: the pattern is not UTF-8".to_string())?;
    let mut builder = RegexBuilder::new(text);
    let (mut anchored, mut utf8) = (false, false);
    builder.unicode(false);
    for flag in options.chars() {
        match flag {
            'i' => {
                builder.case_insensitive(true);
            }
            'm' => {
                builder.multi_line(true);
            }
            's' => {
                builder.dot_matches_new_line(true);
            }
            'x' => {
                builder.ignore_whitespace(true);
            }
            'u' | 'U' => {
                builder.unicode(true);
                utf8 = true;
            }
            'a' => anchored = true,
            // Compile once, JIT, duplicate names, DFA, `$` only at the very end: the
            // regex crate caches, needs no JIT, and matches leftmost-first as PCRE does.
            'o' | 'j' | 'J' | 'D' | 'd' => {}
            other => return Err(format!("unknown flag \"{other}\"")),
        }
    }
    let regex = builder
        .build()
        .map_err(|e| format!("failed to compile regex \"{text}\": {e}"))?;
    let compiled = Rc::new(Compiled {
        regex,
        anchored,
        utf8,
    });
    CACHE.with_borrow_mut(|c| {
        if c.len() >= CACHE_ENTRIES {
            c.clear();
        }
        c.insert(key, compiled.clone());
    });
    Ok(compiled)
}

impl Compiled {
    /// The first match at or after byte `from`.
    fn captures_at<'s>(&self, subject: &'s [u8], from: usize) -> Option<Captures<'s>> {
        let caps = self.regex.captures_at(subject, from)?;
        let whole = caps.get(0)?;
        (!self.anchored || whole.start() == from).then_some(caps)
    }

    /// Where the next search starts after a match ending at `end`: past an empty match.
    fn next_from(&self, subject: &[u8], start: usize, end: usize) -> usize {
        if end > start {
            return end;
        }
        let step = if self.utf8 {
            subject
                .get(end..)
                .and_then(|rest| rest.first())
                .map_or(1, |&b| match b {
                    0xf0.. => 4,
                    0xe0.. => 3,
                    0xc0.. => 2,
                    _ => 1,
                })
        } else {
            1
        };
        end + step
    }
}

/// The captures table: `[0]` the match, `[n]` each group (`false` when it did not take
/// part), and each named group by name.
fn captures_table(lua: &Lua, regex: &Regex, caps: &Captures<'_>) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    for i in 0..caps.len() {
        let value = match caps.get(i) {
            Some(m) => Value::String(lua.create_string(m.as_bytes())?),
            None => Value::Boolean(false),
        };
        table.raw_set(i, value)?;
    }
    for (i, name) in regex.capture_names().enumerate() {
        if let Some(name) = name {
            table.raw_set(name, table.raw_get::<Value>(i)?)?;
        }
    }
    Ok(table)
}

fn failed(lua: &Lua, message: String) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Nil,
        Value::String(lua.create_string(message)?),
    ]))
}

/// `ctx.pos` (1-based) as a byte offset.
fn start_of(ctx: &Option<Table>) -> mlua::Result<usize> {
    Ok(match ctx {
        Some(ctx) => ctx.get::<Option<i64>>("pos")?.unwrap_or(1).max(1) as usize - 1,
        None => 0,
    })
}

/// The first match at or after `ctx.pos`, with `ctx.pos` moved past it; `Err` holds the
/// script's answer when there is none: `nil, err` for a bad pattern, else `nil`.
fn first_match<'s>(
    lua: &Lua,
    subject: &'s [u8],
    pattern: &mlua::String,
    options: Option<&str>,
    ctx: &Option<Table>,
) -> mlua::Result<Result<(Rc<Compiled>, Captures<'s>), MultiValue>> {
    let compiled = match compile(&pattern.as_bytes(), options.unwrap_or("")) {
        Ok(c) => c,
        Err(e) => return failed(lua, e).map(Err),
    };
    let from = start_of(ctx)?;
    let found = (from <= subject.len())
        .then(|| compiled.captures_at(subject, from))
        .flatten();
    let Some(caps) = found else {
        return Ok(Err(MultiValue::from_vec(vec![Value::Nil])));
    };
    if let (Some(ctx), Some(m)) = (ctx, caps.get(0)) {
        ctx.set("pos", m.end() + 1)?;
    }
    Ok(Ok((compiled, caps)))
}

pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    let re = lua.create_table()?;
    re.set(
        "match",
        lua.create_function(
            |lua,
             (subject, pattern, options, ctx): (
                mlua::String,
                mlua::String,
                Option<String>,
                Option<Table>,
            )| {
                let subject = subject.as_bytes();
                match first_match(lua, &subject, &pattern, options.as_deref(), &ctx)? {
                    Ok((compiled, caps)) => {
                        let table = captures_table(lua, &compiled.regex, &caps)?;
                        Ok(MultiValue::from_vec(vec![Value::Table(table)]))
                    }
                    Err(answer) => Ok(answer),
                }
            },
        )?,
    )?;
    re.set(
        "find",
        lua.create_function(
            |lua,
             (subject, pattern, options, ctx, nth): (
                mlua::String,
                mlua::String,
                Option<String>,
                Option<Table>,
                Option<usize>,
            )| {
                let subject = subject.as_bytes();
                let caps = match first_match(lua, &subject, &pattern, options.as_deref(), &ctx)? {
                    Ok((_, caps)) => caps,
                    Err(answer) => return Ok(answer),
                };
                match caps.get(nth.unwrap_or(0)) {
                    Some(m) => Ok(MultiValue::from_vec(vec![
                        Value::Integer(m.start() as i64 + 1),
                        Value::Integer(m.end() as i64),
                    ])),
                    None => Ok(MultiValue::from_vec(vec![Value::Nil])),
                }
            },
        )?,
    )?;
    re.set(
        "gmatch",
        lua.create_function(
            |lua, (subject, pattern, options): (mlua::String, mlua::String, Option<String>)| {
                let compiled = match compile(&pattern.as_bytes(), options.as_deref().unwrap_or(""))
                {
                    Ok(c) => c,
                    Err(e) => return failed(lua, e),
                };
                let subject = subject.as_bytes().to_vec();
                let from = RefCell::new(Some(0usize));
                let iterator = lua.create_function(move |lua, ()| {
                    let Some(start) = *from.borrow() else {
                        return Ok(Value::Nil);
                    };
                    let found = (start <= subject.len())
                        .then(|| compiled.captures_at(&subject, start))
                        .flatten();
                    let Some(caps) = found else {
                        *from.borrow_mut() = None;
                        return Ok(Value::Nil);
                    };
                    let (m_start, m_end) =
                        caps.get(0).map_or((start, start), |m| (m.start(), m.end()));
                    *from.borrow_mut() = Some(compiled.next_from(&subject, m_start, m_end));
                    Ok(Value::Table(captures_table(lua, &compiled.regex, &caps)?))
                })?;
                Ok(MultiValue::from_vec(vec![Value::Function(iterator)]))
            },
        )?,
    )?;
    re.set(
        "sub",
        lua.create_function(|lua, args| substitute(lua, args, false))?,
    )?;
    re.set(
        "gsub",
        lua.create_function(|lua, args| substitute(lua, args, true))?,
    )?;
    ngx.set("re", re)
}

/// `sub` / `gsub`: the subject with the first (or every) match replaced, and how many.
fn substitute(
    lua: &Lua,
    (subject, pattern, replace, options): (mlua::String, mlua::String, Value, Option<String>),
    global: bool,
) -> mlua::Result<MultiValue> {
    let compiled = match compile(&pattern.as_bytes(), options.as_deref().unwrap_or("")) {
        Ok(c) => c,
        Err(e) => return failed(lua, e),
    };
    enum Replace {
        Template(Vec<u8>),
        Call(Function),
    }
    let replace = match replace {
        Value::String(s) => Replace::Template(s.as_bytes().to_vec()),
        Value::Integer(n) => Replace::Template(format_number(n as f64).into_bytes()),
        Value::Number(n) => Replace::Template(format_number(n).into_bytes()),
        Value::Function(f) => Replace::Call(f),
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument #3 to 'sub' (string, number, or function expected, got {})",
                other.type_name()
            )))
        }
    };
    let subject = subject.as_bytes();
    let mut out = Vec::with_capacity(subject.len());
    let mut copied = 0;
    let mut from = 0;
    let mut count = 0;
    while from <= subject.len() {
        let Some(caps) = compiled.captures_at(&subject, from) else {
            break;
        };
        let Some(whole) = caps.get(0) else { break };
        out.extend_from_slice(&subject[copied..whole.start()]);
        match &replace {
            Replace::Template(template) => {
                if let Err(e) = expand(template, &caps, &mut out) {
                    return failed(lua, e);
                }
            }
            Replace::Call(f) => {
                let table = captures_table(lua, &compiled.regex, &caps)?;
                let value: Value = f.call(table)?;
                match value {
                    Value::String(s) => out.extend_from_slice(&s.as_bytes()),
                    Value::Integer(n) => out.extend_from_slice(format_number(n as f64).as_bytes()),
                    Value::Number(n) => out.extend_from_slice(format_number(n).as_bytes()),
                    _ => {}
                }
            }
        }
        copied = whole.end();
        count += 1;
        if !global {
            break;
        }
        let next = compiled.next_from(&subject, whole.start(), whole.end());
        // The character an empty match stepped over stays in the output.
        from = next;
    }
    if copied < subject.len() {
        out.extend_from_slice(&subject[copied..]);
    }
    Ok(MultiValue::from_vec(vec![
        Value::String(lua.create_string(out)?),
        Value::Integer(count),
    ]))
}

/// A replacement template: `$0`..`$9`, `${name or number}`, `$$` for `$`.
fn expand(template: &[u8], caps: &Captures<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    let mut i = 0;
    while i < template.len() {
        if template[i] != b'$' {
            out.push(template[i]);
            i += 1;
            continue;
        }
        match template.get(i + 1) {
            Some(b'$') => {
                out.push(b'$');
                i += 2;
            }
            Some(b'{') => {
                let close = template[i + 2..]
                    .iter()
                    .position(|&b| b == b'}')
                    .ok_or("the closing bracket in \"${\" variable not found")?;
                let name = &template[i + 2..i + 2 + close];
                let name = std::str::from_utf8(name).map_err(|e| e.to_string())?;
                let group = match name.parse::<usize>() {
                    Ok(n) => caps.get(n),
                    Err(_) => caps.name(name),
                };
                if let Some(m) = group {
                    out.extend_from_slice(m.as_bytes());
                }
                i += close + 3;
            }
            Some(d) if d.is_ascii_digit() => {
                let digits = template[i + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let n: usize = std::str::from_utf8(&template[i + 1..i + 1 + digits])
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(usize::MAX);
                if let Some(m) = caps.get(n) {
                    out.extend_from_slice(m.as_bytes());
                }
                i += 1 + digits;
            }
            _ => {
                return Err(
                    "invalid capturing variable name found in the replacement template".into(),
                )
            }
        }
    }
    Ok(())
}
