//! `init`'s writes to `ngx.shared` happen once per configuration, as nginx runs
//! `init_by_lua` once in its master before forking: `init` runs in every worker's VM (each
//! needs its globals and modules), but only the first VM made for a configuration writes to
//! the shared dictionaries; in the others, `init` sees them through a view that reads them and
//! drops writes, answering as the first run's writes left the dictionaries.

use mlua::Lua;
use std::sync::atomic::{AtomicU64, Ordering};

/// The newest configuration (its generation) whose `init` was given the dictionaries to write.
static WROTE_SHARED: AtomicU64 = AtomicU64::new(0);

/// Swaps `ngx.shared` for the read-only view; [`restore`] swaps it back.
const READ_ONLY_VIEW: &str = r#"
local real = ngx.shared
local writes = {
  set = true, safe_set = true, add = true, safe_add = true, replace = true,
  delete = true, expire = true, flush_all = true, lpush = true, rpush = true,
}
local view = {}
for name, dict in pairs(real) do
  view[name] = setmetatable({}, { __index = function(_, method)
    if writes[method] then
      -- The first VM's `init` made this write.
      return function() return true, nil, false end
    elseif method == "incr" then
      return function(_, key, value, init)
        local now = dict:get(key)
        if now == nil then
          if init == nil then return nil, "not found" end
          return init + value
        end
        return now
      end
    elseif method == "lpop" or method == "rpop" then
      return function() return nil end
    elseif method == "flush_expired" then
      return function() return 0 end
    end
    return function(_, ...) return dict[method](dict, ...) end
  end })
end
ngx.shared = view
return real
"#;

/// Before `init` runs in a VM made for configuration `generation`: `None` when this VM's
/// `init` writes (the first for it), else the real `ngx.shared`, to [`restore`] after it.
pub(super) fn before_init(lua: &Lua, generation: u64) -> mlua::Result<Option<mlua::Table>> {
    if WROTE_SHARED.fetch_max(generation, Ordering::AcqRel) < generation {
        return Ok(None);
    }
    let real = lua
        .load(READ_ONLY_VIEW)
        .set_name("=weir init_once")
        .eval::<mlua::Table>()?;
    Ok(Some(real))
}

/// After `init`: the real `ngx.shared` back.
pub(super) fn restore(lua: &Lua, real: Option<mlua::Table>) -> mlua::Result<()> {
    let Some(real) = real else {
        return Ok(());
    };
    let ngx: mlua::Table = lua.globals().get("ngx")?;
    ngx.set("shared", real)
}
