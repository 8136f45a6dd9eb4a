//! `ngx.shared.DICT`: one store per `lua.shared_dicts` entry that every worker's VM sees, kept
//! over a reload that keeps its name and size; bounded by its size (entries' bytes plus a
//! fixed overhead each, as nginx's slab counts them roughly), the least recently used entry
//! evicted first. Methods and results as lua-nginx-module 0.10's.

use super::ngx_util::format_number;
use mlua::ffi;
use mlua::{FromLuaMulti, IntoLuaMulti, Lua, MultiValue, Table, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// What an entry costs beside its key and value: nginx's node and slab rounding, roughly.
const ENTRY_OVERHEAD: u64 = 64;
/// What a list item costs beside its bytes.
const LIST_ITEM_OVERHEAD: u64 = 24;

/// The dictionaries made so far, so a reload finds the one it keeps.
static MADE: Mutex<Vec<(String, u64, Weak<SharedDict>)>> = Mutex::new(Vec::new());

pub(super) struct SharedDict {
    capacity: u64,
    store: Mutex<Store>,
}

#[derive(Default)]
struct Store {
    entries: HashMap<Vec<u8>, Entry>,
    /// Entries by last use, oldest first.
    by_use: BTreeMap<u64, Vec<u8>>,
    uses: u64,
    used: u64,
}

struct Entry {
    value: Stored,
    flags: u32,
    expires: Option<Instant>,
    last_use: u64,
}

#[derive(Clone)]
enum Stored {
    Number(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    List(VecDeque<Item>),
}

#[derive(Clone)]
enum Item {
    Number(f64),
    Bytes(Vec<u8>),
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|at| at <= now)
    }
}

fn size_of(key: &[u8], value: &Stored) -> u64 {
    let value = match value {
        Stored::Number(_) | Stored::Bool(_) => 8,
        Stored::Bytes(b) => b.len() as u64,
        Stored::List(items) => items
            .iter()
            .map(|i| match i {
                Item::Number(_) => 8 + LIST_ITEM_OVERHEAD,
                Item::Bytes(b) => b.len() as u64 + LIST_ITEM_OVERHEAD,
            })
            .sum(),
    };
    ENTRY_OVERHEAD + key.len() as u64 + value
}

/// What a write does when the store is full.
#[derive(Clone, Copy, PartialEq)]
enum Room {
    /// Evict the least recently used entries (`set`, `add`, `replace`, `incr`, pushes).
    Evict,
    /// Fail with "no memory" instead (`safe_set`, `safe_add`).
    Refuse,
}

impl SharedDict {
    /// The dictionary `name` of `capacity` bytes: the one already made with both, if any.
    pub fn named(name: &str, capacity: u64) -> Arc<SharedDict> {
        let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
        made.retain(|(_, _, dict)| dict.strong_count() > 0);
        let kept = made
            .iter()
            .find(|(n, c, _)| n == name && *c == capacity)
            .and_then(|(_, _, dict)| dict.upgrade());
        if let Some(dict) = kept {
            return dict;
        }
        let dict = Arc::new(SharedDict {
            capacity,
            store: Mutex::new(Store::default()),
        });
        made.push((name.to_string(), capacity, Arc::downgrade(&dict)));
        dict
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding it leaves whole entries: the store stays usable.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store {
    fn touch(&mut self, key: &[u8]) {
        self.uses += 1;
        let uses = self.uses;
        if let Some(entry) = self.entries.get_mut(key) {
            let kept = self.by_use.remove(&entry.last_use);
            entry.last_use = uses;
            self.by_use
                .insert(uses, kept.unwrap_or_else(|| key.to_vec()));
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        self.by_use.remove(&entry.last_use);
        self.used -= size_of(key, &entry.value);
        Some(entry)
    }

    /// A live entry (an expired one is freed on the way).
    fn live(&mut self, key: &[u8], now: Instant) -> Option<&mut Entry> {
        if self.entries.get(key).is_some_and(|e| e.expired(now)) {
            self.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// Stores `value` under `key`, making room as `room` allows: whether live entries were
    /// evicted for it, or "no memory".
    fn put(
        &mut self,
        capacity: u64,
        key: &[u8],
        value: Stored,
        flags: u32,
        expires: Option<Instant>,
        room: Room,
    ) -> Result<bool, &'static str> {
        let old = self.remove(key);
        let need = size_of(key, &value);
        let now = Instant::now();
        let mut forcible = false;
        while self.used + need > capacity {
            // Expired entries go first, then (when allowed) the least recently used.
            let expired = self
                .entries
                .iter()
                .find(|(_, e)| e.expired(now))
                .map(|(k, _)| k.clone());
            let victim = match (expired, room) {
                (Some(k), _) => k,
                (None, Room::Evict) => match self.by_use.values().next() {
                    Some(k) => {
                        forcible = true;
                        k.clone()
                    }
                    None => break,
                },
                (None, Room::Refuse) => break,
            };
            self.remove(&victim);
        }
        if self.used + need > capacity {
            if let Some(old) = old {
                let size = size_of(key, &old.value);
                self.used += size;
                self.by_use.insert(old.last_use, key.to_vec());
                self.entries.insert(key.to_vec(), old);
            }
            return Err("no memory");
        }
        self.uses += 1;
        self.used += need;
        self.by_use.insert(self.uses, key.to_vec());
        self.entries.insert(
            key.to_vec(),
            Entry {
                value,
                flags,
                expires,
                last_use: self.uses,
            },
        );
        Ok(forcible)
    }
}

/// A dictionary as its methods hold it.
#[derive(Clone)]
struct Handle(Arc<SharedDict>);

fn key_of(value: &Value) -> Result<Vec<u8>, &'static str> {
    let key = match value {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Integer(n) => format_number(*n as f64).into_bytes(),
        Value::Number(n) => format_number(*n).into_bytes(),
        Value::Nil => return Err("nil key"),
        // resty.core takes any other key by its `tostring`.
        other => other.to_string().map_err(|_| "bad key type")?.into_bytes(),
    };
    match key.len() {
        0 => Err("empty key"),
        1..=65535 => Ok(key),
        _ => Err("key too long"),
    }
}

fn stored_of(value: &Value) -> Result<Option<Stored>, &'static str> {
    Ok(Some(match value {
        Value::Nil => return Ok(None),
        Value::Boolean(b) => Stored::Bool(*b),
        Value::Integer(n) => Stored::Number(*n as f64),
        Value::Number(n) => Stored::Number(*n),
        Value::String(s) => Stored::Bytes(s.as_bytes().to_vec()),
        _ => return Err("bad value type"),
    }))
}

fn item_value(lua: &Lua, item: &Item) -> mlua::Result<Value> {
    Ok(match item {
        Item::Number(n) => Value::Number(*n),
        Item::Bytes(b) => Value::String(lua.create_string(b)?),
    })
}

fn expiry(seconds: Option<f64>) -> Option<Instant> {
    seconds
        .filter(|s| *s > 0.0)
        .map(|s| Instant::now() + Duration::from_secs_f64(s))
}

/// `nil, message` (and `forcible` where the method returns it).
fn failure(lua: &Lua, message: &str) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Nil,
        Value::String(lua.create_string(message)?),
    ]))
}

/// `false, message, false` as set-like methods fail.
fn set_failure(lua: &Lua, message: &str) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(false),
        Value::String(lua.create_string(message)?),
        Value::Boolean(false),
    ]))
}

/// How a set-like method treats an existing key.
#[derive(Clone, Copy, PartialEq)]
enum When {
    Always,
    Absent,
    Present,
}

fn set_like(
    lua: &Lua,
    dict: &SharedDict,
    (key, value, exptime, flags): (Value, Value, Option<f64>, Option<u32>),
    when: When,
    room: Room,
) -> mlua::Result<MultiValue> {
    let key = match key_of(&key) {
        Ok(key) => key,
        Err(e) => return set_failure(lua, e),
    };
    let stored = match stored_of(&value) {
        Ok(stored) => stored,
        Err(e) => return set_failure(lua, e),
    };
    let mut store = dict.lock();
    let exists = store.live(&key, Instant::now()).is_some();
    match when {
        When::Absent if exists => return set_failure(lua, "exists"),
        When::Present if !exists => return set_failure(lua, "not found"),
        _ => {}
    }
    let Some(stored) = stored else {
        store.remove(&key);
        return Ok(MultiValue::from_vec(vec![
            Value::Boolean(true),
            Value::Nil,
            Value::Boolean(false),
        ]));
    };
    let put = store.put(
        dict.capacity,
        &key,
        stored,
        flags.unwrap_or(0),
        expiry(exptime),
        room,
    );
    match put {
        Ok(forcible) => Ok(MultiValue::from_vec(vec![
            Value::Boolean(true),
            Value::Nil,
            Value::Boolean(forcible),
        ])),
        Err(e) => set_failure(lua, e),
    }
}

fn push(
    lua: &Lua,
    dict: &SharedDict,
    key: Value,
    value: Value,
    front: bool,
) -> mlua::Result<MultiValue> {
    let key = match key_of(&key) {
        Ok(key) => key,
        Err(e) => return failure(lua, e),
    };
    let item = match value {
        Value::Integer(n) => Item::Number(n as f64),
        Value::Number(n) => Item::Number(n),
        Value::String(s) => Item::Bytes(s.as_bytes().to_vec()),
        _ => return failure(lua, "bad value type"),
    };
    let mut store = dict.lock();
    let is_list = store
        .live(&key, Instant::now())
        .map(|e| matches!(e.value, Stored::List(_)));
    let (mut items, flags, expires) = match is_list {
        None => (VecDeque::new(), 0, None),
        Some(false) => return failure(lua, "value not a list"),
        // Taken out whole, so the store's count drops by what it held.
        Some(true) => match store.remove(&key) {
            Some(Entry {
                value: Stored::List(items),
                flags,
                expires,
                ..
            }) => (items, flags, expires),
            _ => (VecDeque::new(), 0, None),
        },
    };
    if front {
        items.push_front(item);
    } else {
        items.push_back(item);
    }
    let len = items.len();
    match store.put(
        dict.capacity,
        &key,
        Stored::List(items),
        flags,
        expires,
        Room::Evict,
    ) {
        Ok(_) => Ok(MultiValue::from_vec(vec![Value::Integer(len as i64)])),
        Err(e) => failure(lua, e),
    }
}

fn pop(lua: &Lua, dict: &SharedDict, key: Value, front: bool) -> mlua::Result<MultiValue> {
    let key = match key_of(&key) {
        Ok(key) => key,
        Err(e) => return failure(lua, e),
    };
    let mut store = dict.lock();
    let (item, now_empty) = match store.live(&key, Instant::now()) {
        None => return Ok(MultiValue::from_vec(vec![Value::Nil])),
        Some(Entry {
            value: Stored::List(items),
            ..
        }) => {
            let item = if front {
                items.pop_front()
            } else {
                items.pop_back()
            };
            (item, items.is_empty())
        }
        Some(_) => return failure(lua, "value not a list"),
    };
    let freed = match &item {
        Some(Item::Number(_)) => 8 + LIST_ITEM_OVERHEAD,
        Some(Item::Bytes(b)) => b.len() as u64 + LIST_ITEM_OVERHEAD,
        None => 0,
    };
    store.used -= freed;
    if now_empty {
        store.remove(&key);
    }
    let value = match item {
        Some(item) => item_value(lua, &item)?,
        None => Value::Nil,
    };
    Ok(MultiValue::from_vec(vec![value]))
}

/// A dictionary's methods, each a function over its [`Handle`] that takes the dictionary
/// table as its first argument (`dict:set(...)`), as resty.core's are.
struct Methods<'lua> {
    lua: &'lua Lua,
    table: Table,
    handle: Handle,
    failed: Option<mlua::Error>,
}

impl Methods<'_> {
    fn add_method<A, R>(
        &mut self,
        name: &str,
        method: impl Fn(&Lua, &Handle, A) -> mlua::Result<R> + 'static,
    ) where
        A: FromLuaMulti,
        R: IntoLuaMulti,
    {
        let handle = self.handle.clone();
        let added = self
            .lua
            .create_function(move |lua, (_, args): (Value, A)| method(lua, &handle, args))
            .and_then(|f| self.table.raw_set(name, f));
        if let Err(e) = added {
            self.failed.get_or_insert(e);
        }
    }
}

impl Handle {
    /// Every method but `get` and `get_stale` (see [`raw_get`]).
    fn add_methods(methods: &mut Methods) {
        methods.add_method("set", |lua, this, args| {
            set_like(lua, &this.0, args, When::Always, Room::Evict)
        });
        methods.add_method("safe_set", |lua, this, args| {
            set_like(lua, &this.0, args, When::Always, Room::Refuse)
        });
        methods.add_method("add", |lua, this, args| {
            set_like(lua, &this.0, args, When::Absent, Room::Evict)
        });
        methods.add_method("safe_add", |lua, this, args| {
            set_like(lua, &this.0, args, When::Absent, Room::Refuse)
        });
        methods.add_method("replace", |lua, this, args| {
            set_like(lua, &this.0, args, When::Present, Room::Evict)
        });
        methods.add_method(
            "incr",
            |lua, this, (key, by, init, init_ttl): (Value, f64, Option<f64>, Option<f64>)| {
                let key = match key_of(&key) {
                    Ok(key) => key,
                    Err(e) => return failure(lua, e),
                };
                let mut store = this.0.lock();
                let now = Instant::now();
                let current = match store.live(&key, now) {
                    Some(Entry {
                        value: Stored::Number(n),
                        ..
                    }) => {
                        *n += by;
                        let n = *n;
                        store.touch(&key);
                        // resty.core gives the new value alone when the key was there.
                        return Ok(MultiValue::from_vec(vec![Value::Number(n)]));
                    }
                    Some(_) => return failure(lua, "not a number"),
                    None => init,
                };
                let Some(init) = current else {
                    return failure(lua, "not found");
                };
                let n = init + by;
                match store.put(
                    this.0.capacity,
                    &key,
                    Stored::Number(n),
                    0,
                    expiry(init_ttl),
                    Room::Evict,
                ) {
                    Ok(forcible) => Ok(MultiValue::from_vec(vec![
                        Value::Number(n),
                        Value::Nil,
                        Value::Boolean(forcible),
                    ])),
                    Err(e) => failure(lua, e),
                }
            },
        );
        methods.add_method("delete", |_, this, key: Value| {
            if let Ok(key) = key_of(&key) {
                this.0.lock().remove(&key);
            }
            Ok(())
        });
        methods.add_method("ttl", |lua, this, key: Value| {
            let key = match key_of(&key) {
                Ok(key) => key,
                Err(e) => return failure(lua, e),
            };
            let now = Instant::now();
            match this.0.lock().live(&key, now) {
                None => failure(lua, "not found"),
                Some(entry) => {
                    let left = entry
                        .expires
                        .map_or(0.0, |at| at.saturating_duration_since(now).as_secs_f64());
                    Ok(MultiValue::from_vec(vec![Value::Number(left)]))
                }
            }
        });
        methods.add_method("expire", |lua, this, (key, exptime): (Value, f64)| {
            let key = match key_of(&key) {
                Ok(key) => key,
                Err(e) => return failure(lua, e),
            };
            match this.0.lock().live(&key, Instant::now()) {
                None => failure(lua, "not found"),
                Some(entry) => {
                    entry.expires = expiry(Some(exptime));
                    Ok(MultiValue::from_vec(vec![Value::Boolean(true)]))
                }
            }
        });
        methods.add_method("flush_all", |_, this, ()| {
            let now = Instant::now();
            for entry in this.0.lock().entries.values_mut() {
                entry.expires = Some(now);
            }
            Ok(())
        });
        methods.add_method("flush_expired", |_, this, max: Option<usize>| {
            let mut store = this.0.lock();
            let now = Instant::now();
            let mut expired: Vec<Vec<u8>> = store
                .entries
                .iter()
                .filter(|(_, e)| e.expired(now))
                .map(|(k, _)| k.clone())
                .collect();
            if let Some(max) = max.filter(|m| *m > 0) {
                expired.truncate(max);
            }
            for key in &expired {
                store.remove(key);
            }
            Ok(expired.len())
        });
        methods.add_method("get_keys", |lua, this, max: Option<usize>| {
            let max = max.unwrap_or(1024);
            let now = Instant::now();
            let store = this.0.lock();
            let keys = store
                .entries
                .iter()
                .filter(|(_, e)| !e.expired(now))
                .map(|(k, _)| k)
                .take(if max == 0 { usize::MAX } else { max })
                .map(|k| lua.create_string(k))
                .collect::<mlua::Result<Vec<_>>>()?;
            lua.create_sequence_from(keys)
        });
        methods.add_method("lpush", |lua, this, (key, value): (Value, Value)| {
            push(lua, &this.0, key, value, true)
        });
        methods.add_method("rpush", |lua, this, (key, value): (Value, Value)| {
            push(lua, &this.0, key, value, false)
        });
        methods.add_method("lpop", |lua, this, key: Value| pop(lua, &this.0, key, true));
        methods.add_method("rpop", |lua, this, key: Value| {
            pop(lua, &this.0, key, false)
        });
        methods.add_method("llen", |lua, this, key: Value| {
            let key = match key_of(&key) {
                Ok(key) => key,
                Err(e) => return failure(lua, e),
            };
            match this.0.lock().live(&key, Instant::now()) {
                None => Ok(MultiValue::from_vec(vec![Value::Integer(0)])),
                Some(Entry {
                    value: Stored::List(items),
                    ..
                }) => Ok(MultiValue::from_vec(vec![Value::Integer(
                    items.len() as i64
                )])),
                Some(_) => failure(lua, "value not a list"),
            }
        });
        methods.add_method("capacity", |_, this, ()| Ok(this.0.capacity));
        methods.add_method("free_space", |_, this, ()| {
            Ok(this.0.capacity.saturating_sub(this.0.lock().used))
        });
    }
}

/// What `get` found under a key, its bytes copied out of the store (the lock is released
/// before Lua sees them).
enum Found {
    Missing,
    Number(f64),
    Bool(bool),
    /// The value's bytes are in the caller's buffer.
    Bytes,
    List,
}

/// `get` / `get_stale` of `key`: what is stored (a string's bytes into `bytes`), its flags,
/// and whether it expired (only `stale` sees an expired value not yet freed).
fn look_up(dict: &SharedDict, key: &[u8], stale: bool, bytes: &mut Vec<u8>) -> (Found, u32, bool) {
    let mut store = dict.lock();
    let Some(entry) = store.entries.get(key) else {
        return (Found::Missing, 0, false);
    };
    let expired = entry.expired(Instant::now());
    if expired && !stale {
        return (Found::Missing, 0, false);
    }
    let found = match &entry.value {
        Stored::Number(n) => Found::Number(*n),
        Stored::Bool(b) => Found::Bool(*b),
        Stored::Bytes(b) => {
            bytes.extend_from_slice(b);
            Found::Bytes
        }
        Stored::List(_) => Found::List,
    };
    let flags = entry.flags;
    if !expired && !matches!(found, Found::List) {
        store.touch(key);
    }
    (found, flags, expired)
}

thread_local! {
    /// `get`'s buffer for a value on its way from the store to Lua, kept between calls.
    static GOT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `get` (upvalue 2 false) and `get_stale` (true) written against Lua's C API: the method
/// scripts call most, spared mlua's argument conversion and its protected calls (with a
/// memory bound, mlua makes every string it creates in a protected call). Returns as
/// resty.core: the value, then the flags when set (`get_stale`: flags and whether stale), or
/// `nil, error`.
///
/// Keeps `raw.rs`'s rule: the store's lock is released before Lua sees the value.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn raw_get(state: *mut ffi::lua_State) -> std::os::raw::c_int {
    // SAFETY: upvalue 1 is the dictionary, which the VM's `dicts` keep alive as long as the
    // VM; arguments are read with the type checks of the C API.
    unsafe {
        let dict = &*(ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)) as *const SharedDict);
        let stale = ffi::lua_toboolean(state, ffi::lua_upvalueindex(2)) != 0;
        let mut number_key = String::new();
        let key: &[u8] = match ffi::lua_type(state, 2) {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                let at = ffi::lua_tolstring(state, 2, &mut len);
                std::slice::from_raw_parts(at.cast::<u8>(), len)
            }
            ffi::LUA_TNUMBER => {
                number_key = format_number(ffi::lua_tonumber(state, 2));
                number_key.as_bytes()
            }
            ffi::LUA_TNIL | ffi::LUA_TNONE => return push_failure(state, c"nil key"),
            // resty.core looks any other key up by its `tostring`.
            _ => {
                let mut len = 0;
                let at = ffi::luaL_tolstring(state, 2, &mut len);
                std::slice::from_raw_parts(at.cast::<u8>(), len)
            }
        };
        match key.len() {
            0 => return push_failure(state, c"empty key"),
            1..=65535 => {}
            _ => return push_failure(state, c"key too long"),
        }
        let mut bytes = GOT.with_borrow_mut(std::mem::take);
        bytes.clear();
        let (found, flags, expired) = look_up(dict, key, stale, &mut bytes);
        drop(number_key);
        match found {
            Found::Missing => {
                GOT.set(bytes);
                ffi::lua_pushnil(state);
                return 1;
            }
            Found::List => {
                GOT.set(bytes);
                return push_failure(state, c"value is a list");
            }
            Found::Number(n) => ffi::lua_pushnumber(state, n),
            Found::Bool(b) => ffi::lua_pushboolean(state, i32::from(b)),
            Found::Bytes => {
                // Should this raise (past the memory bound), `bytes` is lost, not freed: the
                // next call makes a new buffer.
                ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len());
                GOT.set(bytes);
            }
        }
        if stale {
            match flags {
                0 => ffi::lua_pushnil(state),
                flags => ffi::lua_pushnumber(state, f64::from(flags)),
            }
            ffi::lua_pushboolean(state, i32::from(expired));
            3
        } else if flags != 0 {
            ffi::lua_pushnumber(state, f64::from(flags));
            2
        } else {
            1
        }
    }
}

/// `nil, message` as `get` fails.
#[allow(unsafe_code)]
unsafe fn push_failure(
    state: *mut ffi::lua_State,
    message: &std::ffi::CStr,
) -> std::os::raw::c_int {
    // SAFETY: pushes a nil and a copy of a static string.
    unsafe {
        ffi::lua_pushnil(state);
        ffi::lua_pushstring(state, message.as_ptr());
    }
    2
}

/// `ngx.shared`: each dictionary by name, a table whose metatable's `__index` holds its
/// methods (`type(ngx.shared.NAME)` is "table", as in OpenResty).
pub(super) fn install(
    lua: &Lua,
    ngx: &Table,
    dicts: &[(String, Arc<SharedDict>)],
) -> mlua::Result<()> {
    let shared = lua.create_table()?;
    for (name, dict) in dicts {
        let mut methods = Methods {
            lua,
            table: lua.create_table()?,
            handle: Handle(dict.clone()),
            failed: None,
        };
        Handle::add_methods(&mut methods);
        if let Some(e) = methods.failed {
            return Err(e);
        }
        for (method, stale) in [("get", false), ("get_stale", true)] {
            let dict_at = Arc::as_ptr(dict).cast_mut().cast::<std::ffi::c_void>();
            // The VM keeps the dictionary alive as long as itself (`WorkerVm::dicts`).
            let upvalues = (mlua::LightUserData(dict_at), stale);
            let get = super::raw::c_closure(lua, raw_get, upvalues)?;
            methods.table.raw_set(method, get)?;
        }
        let meta = lua.create_table()?;
        meta.raw_set("__index", methods.table)?;
        let table = lua.create_table()?;
        table.set_metatable(Some(meta));
        shared.raw_set(name.as_str(), table)?;
    }
    ngx.set("shared", shared)
}
