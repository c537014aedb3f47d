//! Runs one Argo CD health script on one object, in Argo CD's sandbox, within bounds.
//!
//! The facts come from argo-cd `util/lua/lua.go` (v3.4.7, v3.5.1 and v3.6.1 agree):
//! - `runLuaWithResourceActionParameters`: a fresh state per run; with `UseOpenLibs` (every
//!   bundled script, and an argocd-cm script whose `useOpenLibs` is true) gopher-lua's standard
//!   libraries, otherwise only `package`, `base` and `table`; `require("os")` is the safe `os`
//!   (`oslib_safe.go`: `time` and `date`); a one-second context timeout.
//! - `decodeValue`: `obj` is the object as nested tables; JSON numbers become Lua numbers, a
//!   JSON `null` is `nil`.
//! - `ExecuteHealthLua`: the value on top of the stack after the chunk ran, encoded to JSON by
//!   `layeh.com/gopher-json` and decoded into gitops-engine's `HealthStatus`; see [`Outcome`].
//!
//! gopher-lua is Lua 5.1 with 5.2's `goto`; wavegate runs PUC Lua 5.2 (numbers are doubles, as
//! in 5.1) and puts back the 5.1 names scripts use (`unpack`, `loadstring`, `table.getn`,
//! `table.maxn`, `math.pow`, `math.log10`, `math.mod`).
//!
//! Where wavegate's sandbox is narrower than gopher-lua's, it is on purpose: no `io`, `debug`,
//! `coroutine`, no `dofile`/`loadfile`, no `require` from files, `os` only as `time`, `date`,
//! `clock` and `difftime` even for open libraries, and no binary chunks through
//! `load`/`loadstring`. No bundled script of the three releases uses any of them (the
//! conformance test runs every one).

use super::ScriptError;
use crate::health::HealthStatus as Status;
use mlua::chunk::ChunkMode;
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, Table, Value as LuaValue, VmState};
use serde_json::{Map, Number, Value};
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a run may cost. Argo CD bounds a run by one second of wall time only; a script from an
/// argocd-cm runs inside wavegate's process, so it is also bounded by instructions and memory.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Lua VM instructions, counted every [`HOOK_EVERY`].
    pub instructions: u64,
    /// Bytes the Lua state may hold, `obj` included.
    pub memory: usize,
    /// Argo CD's own bound (`context.WithTimeout(…, 1*time.Second)`).
    pub wall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // The largest bundled script on Argo CD's largest test object runs a few thousand.
            instructions: 10_000_000,
            memory: 32 << 20,
            wall: Duration::from_secs(1),
        }
    }
}

const HOOK_EVERY: u32 = 1_000;

/// The worst case, in backtracking steps, of one `string.find`/`match`/`gmatch`/`gsub` call
/// (which runs in C, past the instruction hook): (subject bytes + 1) ^ (unbounded repetitions,
/// plus one unless anchored). 10^8 steps of the C matcher take a fraction of a second.
pub const PATTERN_STEPS: f64 = 1e8;

/// Which libraries a script sees (argocd-cm `health.lua.useOpenLibs`; always on for bundled
/// scripts: `GetHealthScript` returns `true` for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Libraries {
    /// `base`, `package`, `table`, and `require("os")`.
    Argocd,
    /// Also `string` and `math`, and `os` as a global.
    Open,
}

/// What `ExecuteHealthLua` makes of a run that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A table with a valid `status`.
    Health { status: Status, message: String },
    /// `nil`, an empty table, or a table whose `status`/`message` is not a string: Argo CD
    /// returns an empty `HealthStatus` (status `""`).
    Empty,
    /// A table whose `status` is no health code: Argo CD's `Unknown` "Lua returned an invalid
    /// health status".
    InvalidStatus,
}

/// Compiles scripts once, by content, and runs them.
#[derive(Default)]
pub struct Engine {
    compiled: Mutex<HashMap<[u8; 32], Arc<Compiled>>>,
    limits: Limits,
}

/// A script compiled to bytecode, or the reason it does not compile.
struct Compiled(Result<Vec<u8>, String>);

impl Engine {
    pub fn new(limits: Limits) -> Engine {
        Engine {
            compiled: Mutex::default(),
            limits,
        }
    }

    /// How many distinct scripts have been compiled.
    pub fn compiled_scripts(&self) -> usize {
        self.compiled.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Run `source` on `object` as Argo CD's `ExecuteHealthLua` would.
    pub fn run(
        &self,
        source: &str,
        libraries: Libraries,
        object: &Value,
    ) -> Result<Outcome, ScriptError> {
        let compiled = self.compile(source)?;
        let bytecode = match &compiled.0 {
            Ok(b) => b,
            Err(e) => return Err(ScriptError::Compile(e.clone())),
        };
        let run = Run::new(self.limits)?;
        run.sandbox(libraries)?;
        run.lua
            .globals()
            .set("obj", to_lua(&run.lua, object))
            .map_err(|e| run.error(e))?;
        let function = run
            .lua
            .load(bytecode.as_slice())
            .set_mode(ChunkMode::Binary)
            .into_function()
            .map_err(|e| run.error(e))?;
        let returned: mlua::MultiValue = function.call(()).map_err(|e| run.error(e))?;
        // gopher-lua's `l.Get(-1)`: the last value returned, nil when none.
        let last = returned.into_iter().last().unwrap_or(LuaValue::Nil);
        outcome(&last)
    }

    fn compile(&self, source: &str) -> Result<Arc<Compiled>, ScriptError> {
        let digest = ring::digest::digest(&ring::digest::SHA256, source.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        if let Some(c) = self.compiled.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(c);
        }
        let lua = Lua::new_with(StdLib::NONE, LuaOptions::default())
            .map_err(|e| ScriptError::Sandbox(e.to_string()))?;
        // gopher-lua's `DoString` names every chunk `<string>`, so errors read "<string>:3: …".
        let compiled = match lua.load(source).set_name("=<string>").into_function() {
            Ok(f) => Compiled(Ok(f.dump(false))),
            Err(e) => Compiled(Err(message_of(&e))),
        };
        let compiled = Arc::new(compiled);
        if let Ok(mut cache) = self.compiled.lock() {
            cache.insert(key, compiled.clone());
        }
        Ok(compiled)
    }
}

/// One fresh state and the budget it runs under.
struct Run {
    lua: Lua,
    exceeded: Rc<Cell<Option<&'static str>>>,
    limits: Limits,
}

impl Run {
    fn new(limits: Limits) -> Result<Run, ScriptError> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::PACKAGE,
            LuaOptions::default(),
        )
        .map_err(|e| ScriptError::Sandbox(e.to_string()))?;
        lua.set_memory_limit(limits.memory)
            .map_err(|e| ScriptError::Sandbox(e.to_string()))?;
        let exceeded: Rc<Cell<Option<&'static str>>> = Rc::new(Cell::new(None));
        let flag = exceeded.clone();
        let started = Instant::now();
        let budget = limits.instructions / u64::from(HOOK_EVERY);
        let ticks = Cell::new(0u64);
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                ticks.set(ticks.get() + 1);
                if ticks.get() > budget {
                    flag.set(Some("instruction"));
                } else if started.elapsed() > limits.wall {
                    flag.set(Some("time"));
                }
                match flag.get() {
                    Some(bound) => Err(mlua::Error::runtime(format!("{bound} limit exceeded"))),
                    None => Ok(VmState::Continue),
                }
            },
        )
        .map_err(|e| ScriptError::Sandbox(e.to_string()))?;
        Ok(Run {
            lua,
            exceeded,
            limits,
        })
    }

    /// Turn a Lua error into the reason a person reads, naming the bound that stopped it.
    fn error(&self, e: mlua::Error) -> ScriptError {
        if let Some(bound) = self.exceeded.get() {
            return ScriptError::Bound(match bound {
                "instruction" => format!(
                    "the script ran past {} Lua instructions",
                    self.limits.instructions
                ),
                _ => format!("the script ran past {:?}", self.limits.wall),
            });
        }
        if has_memory_error(&e) {
            return ScriptError::Bound(format!(
                "the script ran past {} MiB of memory",
                self.limits.memory >> 20
            ));
        }
        ScriptError::Runtime(message_of(&e))
    }

    fn sandbox(&self, libraries: Libraries) -> Result<(), ScriptError> {
        let lua = &self.lua;
        let os = self.safe_os().map_err(|e| self.error(e))?;
        let exceeded = self.exceeded.clone();
        let over = lua
            .create_function(move |_, ()| Ok(exceeded.get().is_some()))
            .map_err(|e| self.error(e))?;
        lua.load(SANDBOX)
            .set_name("=sandbox")
            .call::<()>((os, over, libraries == Libraries::Open, PATTERN_STEPS))
            .map_err(|e| self.error(e))
    }

    /// `oslib_safe.go`'s `time` and `date`, and the two pure functions of gopher-lua's `os`.
    fn safe_os(&self) -> mlua::Result<Table> {
        let lua = &self.lua;
        let os = lua.create_table()?;
        os.set(
            "time",
            lua.create_function(|_, t: Option<Table>| match t {
                None => Ok(now()),
                Some(t) => {
                    let field = |k: &str, d: i64| -> mlua::Result<i64> {
                        Ok(match t.raw_get::<LuaValue>(k)? {
                            LuaValue::Number(n) => n as i64,
                            LuaValue::Integer(n) => n,
                            _ => d,
                        })
                    };
                    let days = days_from_civil(field("year", -1)?, field("month", -1)?, 1)
                        + field("day", -1)?
                        - 1;
                    Ok(days * 86_400
                        + field("hour", 12)? * 3_600
                        + field("min", 0)? * 60
                        + field("sec", 0)?)
                }
            })?,
        )?;
        os.set(
            "date",
            lua.create_function(|lua, (format, at): (Option<String>, Option<i64>)| {
                let format = format.unwrap_or_else(|| "%c".to_string());
                let format = format.strip_prefix('!').unwrap_or(&format);
                let at = at.unwrap_or_else(now);
                if format.starts_with("*t") {
                    let t = lua.create_table()?;
                    let c = Civil::of(at);
                    for (k, v) in [
                        ("year", c.year),
                        ("month", c.month),
                        ("day", c.day),
                        ("hour", c.hour),
                        ("min", c.min),
                        ("sec", c.sec),
                        ("wday", c.weekday + 1),
                        ("yday", 0),
                    ] {
                        t.raw_set(k, v as f64)?;
                    }
                    t.raw_set("isdst", false)?;
                    return Ok(LuaValue::Table(t));
                }
                Ok(LuaValue::String(lua.create_string(strftime(at, format))?))
            })?,
        )?;
        let started = Instant::now();
        os.set(
            "clock",
            // Time alone changes its answer, as the date's: a verdict that read it is kept
            // only briefly (see `CLOCK_READS`).
            lua.create_function(move |_, ()| {
                CLOCK_READS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                Ok(started.elapsed().as_secs_f64())
            })?,
        )?;
        os.set(
            "difftime",
            lua.create_function(|_, (a, b): (f64, Option<f64>)| Ok(a - b.unwrap_or(0.0)))?,
        )?;
        Ok(os)
    }
}

/// Builds the sandbox from what `Lua::new_with` opened: hides what Argo CD does not open, makes
/// `pcall` unable to swallow a bound, and keeps `load`/`loadstring` to source text.
const SANDBOX: &str = r#"
local os, over, open, PATTERN_STEPS = ...
local error, type, pairs = error, type, pairs
local raw_pcall, raw_xpcall, raw_load = pcall, xpcall, load

dofile, loadfile = nil, nil
package.path, package.cpath = "", ""
package.searchers = { package.searchers[1] }
package.preload["os"] = function() return os end
package.loaded["os"] = nil

local function rethrow_bound(ok, ...)
  if not ok and over() then error((...), 0) end
  return ok, ...
end
pcall = function(f, ...) return rethrow_bound(raw_pcall(f, ...)) end
xpcall = function(f, h, ...) return rethrow_bound(raw_xpcall(f, h, ...)) end

-- Source text only: a binary chunk is not checked by the Lua VM.
load = function(chunk, name) return raw_load(chunk, name, "t") end
loadstring = load

-- Lua 5.1's names, which gopher-lua has and Lua 5.2 dropped.
unpack = table.unpack
table.getn = function(t) return #t end
table.maxn = function(t)
  local n = 0
  for k in pairs(t) do
    if type(k) == "number" and k > n then n = k end
  end
  return n
end
if math then
  local log = math.log
  math.log10 = function(x) return log(x, 10) end
  math.pow = function(x, y) return x ^ y end
  math.mod = math.fmod
end

if open then
  _G.os = os
  -- Lua's pattern matcher runs in C, where no instruction is counted and no time is read:
  -- `("x"):rep(1e4):find(".-.-.-y")` backtracks ~10^16 times. Before a call runs, its worst
  -- case is estimated and a call past PATTERN_STEPS is an error. A repetition (`*`, `+`, `-`)
  -- multiplies the work by the subject's length when what may follow it can match a
  -- character it matches too (`.-x` on x's, `%a*%a*`); otherwise by the longest run of its
  -- characters in the subject, which it scans (and gives back) at every try: `a*b` on 20,000
  -- a's is 2*10^8 steps unanchored, `(%d+)-(%d+)` on text is as long as its longest number.
  -- An unanchored pattern is tried at every position; `%b` and back-references scan. What a
  -- single character matches is asked of the C matcher itself, one byte at a time.
  local find, match, gmatch, gsub, sub, char = string.find, string.match, string.gmatch, string.gsub, string.sub, string.char
  local sets = {}
  local function set_of(item)
    local set = sets[item]
    if set then return set end
    set = {}
    for b = 0, 255 do
      local ok, at = raw_pcall(find, char(b), "^" .. item)
      -- A malformed class: as if it matched everything (the call itself will say why).
      if not ok or at then set[b] = true end
    end
    sets[item] = set
    return set
  end
  local function after_set(p, i)
    local n = #p
    i = i + 1
    if sub(p, i, i) == "^" then i = i + 1 end
    repeat
      if i > n then return n + 1 end
      local c = sub(p, i, i)
      i = i + 1
      if c == "%" then i = i + 1 end
    until sub(p, i, i) == "]"
    return i + 1
  end
  local function items(p)
    local list, i, n = {}, 1, #p
    if sub(p, 1, 1) == "^" then i = 2 end
    while i <= n do
      local c, item = sub(p, i, i), nil
      if c == "(" or c == ")" or (c == "$" and i == n) then
        i = i + 1
      elseif c == "%" then
        local d = sub(p, i + 1, i + 1)
        if d == "b" then
          list[#list + 1] = { scan = true }
          i = i + 4
        elseif d == "f" then
          i = after_set(p, i + 2)
        elseif find(d, "^%d$") then
          list[#list + 1] = { scan = true }
          i = i + 2
        else
          item, i = sub(p, i, i + 1), i + 2
        end
      elseif c == "[" then
        local j = after_set(p, i)
        item, i = sub(p, i, j - 1), j
      else
        item, i = c, i + 1
      end
      if item then
        local q = sub(p, i, i)
        if q == "*" or q == "+" or q == "-" or q == "?" then i = i + 1 else q = "" end
        list[#list + 1] = { set = item == "$" and { [36] = true } or set_of(item), q = q, text = item }
      end
    end
    return list
  end
  local function overlaps(a, b)
    for byte in pairs(b) do
      if a[byte] then return true end
    end
    return false
  end
  -- The longest run of characters `item` matches in `s`: one linear pass of the C matcher
  -- (each try either consumes a run or fails at once). The whole subject when `item` is
  -- malformed (the call itself will say why).
  local function longest(s, item)
    local ok, runs = raw_pcall(gmatch, s, item .. "+")
    if not ok then return #s end
    local most = 0
    for run in runs do
      if #run > most then most = #run end
    end
    return most
  end
  local function bounded(name, s, p, plain, anchorable)
    if plain or type(s) ~= "string" or type(p) ~= "string" then return end
    local n = #s + 1
    local cost = (anchorable and sub(p, 1, 1) == "^") and 1 or n
    local list = items(p)
    for k = 1, #list do
      local it = list[k]
      if it.scan then
        cost = cost * n
      elseif it.q == "?" then
        cost = cost * 2
      elseif it.q ~= "" then
        local steps = nil
        for j = k + 1, #list do
          local nx = list[j]
          if nx.scan or overlaps(it.set, nx.set) then
            steps = n
            break
          end
          if nx.q == "" or nx.q == "+" then break end
        end
        if not steps and cost <= PATTERN_STEPS then
          steps = longest(s, it.text) + 1
        end
        cost = cost * (steps or n)
      end
    end
    if cost > PATTERN_STEPS then
      error("string." .. name .. ": a pattern of " .. #p .. " bytes on a subject of " .. #s
        .. " bytes could backtrack past the bound of " .. PATTERN_STEPS .. " steps", 3)
    end
  end
  string.find = function(s, p, init, plain) bounded("find", s, p, plain, true) return find(s, p, init, plain) end
  string.match = function(s, p, init) bounded("match", s, p, false, true) return match(s, p, init) end
  string.gmatch = function(s, p) bounded("gmatch", s, p, false, false) return gmatch(s, p) end
  string.gsub = function(s, p, r, n) bounded("gsub", s, p, false, true) return gsub(s, p, r, n) end
else
  -- gopher-lua without its open libraries: no string library, so no string methods either.
  _G.string, _G.math = nil, nil
  package.loaded.string, package.loaded.math = nil, nil
  getmetatable("").__index = nil
end
"#;

/// How often scripts have read the clock (`os.time()`, `os.date()` without a time), in this
/// process: a verdict judged while this moved may change with time alone, so whatever keeps it
/// (the waves view's cache) must judge it again soon.
static CLOCK_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`CLOCK_READS`].
pub(crate) fn clock_reads() -> u64 {
    CLOCK_READS.load(std::sync::atomic::Ordering::Acquire)
}

fn now() -> i64 {
    CLOCK_READS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn has_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => has_memory_error(cause),
        mlua::Error::WithContext { cause, .. } => has_memory_error(cause),
        _ => false,
    }
}

/// The error text without mlua's traceback (`runLuaWithResourceActionParameters` drops
/// gopher-lua's stack trace too, since the message reaches the user).
fn message_of(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::RuntimeError(m) | mlua::Error::SyntaxError { message: m, .. } => m.clone(),
        mlua::Error::CallbackError { cause, .. } => return message_of(cause),
        other => other.to_string(),
    };
    match text.split_once("\nstack traceback:") {
        Some((head, _)) => head.to_string(),
        None => text,
    }
}

/// `decodeValue`: maps become tables keyed by string, arrays sequences, numbers Lua numbers,
/// `null` nil. A value the state cannot hold (past the memory bound) becomes nil, and the
/// bound is reported by the run that follows.
fn to_lua(lua: &Lua, value: &Value) -> LuaValue {
    let made = match value {
        Value::Null => return LuaValue::Nil,
        Value::Bool(b) => return LuaValue::Boolean(*b),
        Value::Number(n) => return LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => lua.create_string(s).map(LuaValue::String),
        Value::Array(items) => lua
            .create_table_with_capacity(items.len(), 0)
            .and_then(|t| {
                for (i, item) in items.iter().enumerate() {
                    t.raw_set(i + 1, to_lua(lua, item))?;
                }
                Ok(LuaValue::Table(t))
            }),
        Value::Object(fields) => lua
            .create_table_with_capacity(0, fields.len())
            .and_then(|t| {
                for (k, v) in fields {
                    t.raw_set(k.as_str(), to_lua(lua, v))?;
                }
                Ok(LuaValue::Table(t))
            }),
    };
    made.unwrap_or(LuaValue::Nil)
}

/// `ExecuteHealthLua` on the returned value.
fn outcome(returned: &LuaValue) -> Result<Outcome, ScriptError> {
    let table = match returned {
        LuaValue::Nil => return Ok(Outcome::Empty),
        LuaValue::Table(t) => t,
        other => {
            return Err(ScriptError::Runtime(format!(
                "expect table output from Lua script, not {}",
                lua_type_name(other)
            )));
        }
    };
    let json =
        to_json(&LuaValue::Table(table.clone()), &mut Vec::new()).map_err(ScriptError::Runtime)?;
    // `json.Unmarshal` into `HealthStatus`: an array (the empty table) or a field of another
    // type is an `UnmarshalTypeError`, which Argo CD answers with an empty `HealthStatus`.
    let Value::Object(fields) = json else {
        return Ok(Outcome::Empty);
    };
    let text = |k: &str| match fields.get(k) {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    };
    let (Some(status), Some(message)) = (text("status"), text("message")) else {
        return Ok(Outcome::Empty);
    };
    Ok(match super::parse_status(&status) {
        Some(status) => Outcome::Health { status, message },
        None => Outcome::InvalidStatus,
    })
}

fn lua_type_name(v: &LuaValue) -> &'static str {
    match v {
        LuaValue::Nil => "nil",
        LuaValue::Boolean(_) => "boolean",
        LuaValue::Integer(_) | LuaValue::Number(_) => "number",
        LuaValue::String(_) => "string",
        LuaValue::Table(_) => "table",
        LuaValue::Function(_) => "function",
        LuaValue::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// `gopher-json`'s `Encode`: an empty table is `[]`; a table keyed `1..n` an array; a table
/// keyed by strings an object; anything else, a function or a cycle, an error.
fn to_json(value: &LuaValue, visiting: &mut Vec<*const std::ffi::c_void>) -> Result<Value, String> {
    Ok(match value {
        LuaValue::Nil => Value::Null,
        LuaValue::Boolean(b) => Value::Bool(*b),
        LuaValue::Integer(i) => Value::from(*i),
        LuaValue::Number(n) => Number::from_f64(*n)
            .map(Value::Number)
            .ok_or_else(|| format!("json: unsupported value: {n}"))?,
        LuaValue::String(s) => Value::String(s.to_string_lossy()),
        LuaValue::Table(t) => {
            let id = t.to_pointer();
            // gopher-json never forgets a table it saw: the same table twice is an error too.
            if visiting.contains(&id) {
                return Err("cannot encode recursively nested tables to JSON".to_string());
            }
            visiting.push(id);
            let pairs: Vec<(LuaValue, LuaValue)> = t
                .pairs::<LuaValue, LuaValue>()
                .collect::<mlua::Result<_>>()
                .map_err(|e| message_of(&e))?;
            if pairs.is_empty() {
                Value::Array(Vec::new())
            } else if pairs.iter().all(|(k, _)| k.is_string()) {
                let mut fields = Map::new();
                for (k, v) in &pairs {
                    let key = k
                        .as_string()
                        .map(|s| s.to_string_lossy())
                        .unwrap_or_default();
                    fields.insert(key, to_json(v, visiting)?);
                }
                Value::Object(fields)
            } else if pairs.iter().all(|(k, _)| k.is_number() || k.is_integer()) {
                let mut items: Vec<(f64, &LuaValue)> = pairs
                    .iter()
                    .map(|(k, v)| (k.as_number().unwrap_or(0.0), v))
                    .collect();
                items.sort_by(|a, b| a.0.total_cmp(&b.0));
                if items
                    .iter()
                    .enumerate()
                    .any(|(i, (k, _))| *k != (i + 1) as f64)
                {
                    return Err("cannot encode sparse array".to_string());
                }
                let mut out = Vec::with_capacity(items.len());
                for (_, v) in items {
                    out.push(to_json(v, visiting)?);
                }
                Value::Array(out)
            } else {
                return Err("cannot encode mixed or invalid key types".to_string());
            }
        }
        other => return Err(format!("cannot encode {} to JSON", lua_type_name(other))),
    })
}

/// A UTC date (Howard Hinnant's `civil_from_days`).
struct Civil {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    min: i64,
    sec: i64,
    weekday: i64,
}

impl Civil {
    fn of(t: i64) -> Civil {
        let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            hour: secs / 3_600,
            min: secs % 3_600 / 60,
            sec: secs % 60,
            weekday: (days + 4).rem_euclid(7),
        }
    }
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `oslib_safe.go`'s `strftime`: its table of flags, in UTC; other flags stay as written.
fn strftime(at: i64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ];
    let c = Civil::of(at);
    let month = MONTHS[(c.month - 1).clamp(0, 11) as usize];
    let day = DAYS[c.weekday.clamp(0, 6) as usize];
    let hour12 = if c.hour % 12 == 0 { 12 } else { c.hour % 12 };
    let pm = if c.hour >= 12 { "PM" } else { "AM" };
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let Some(flag) = chars.next() else {
            out.push('%');
            break;
        };
        let piece = match flag {
            '%' => "%".to_string(),
            'a' => day[..3].to_lowercase(),
            'A' => day.to_string(),
            'b' => month[..3].to_string(),
            'B' => month.to_string(),
            'c' => format!(
                "{:02} {} {:02} {:02}:{:02} UTC",
                c.day,
                &month[..3],
                c.year % 100,
                c.hour,
                c.min
            ),
            'd' => format!("{:02}", c.day),
            'F' => format!("{}-{:02}-{:02}", c.year, c.month, c.day),
            'H' => format!("{:02}", c.hour),
            'I' => format!("{hour12:02}"),
            'm' => format!("{:02}", c.month),
            'M' => format!("{:02}", c.min),
            'p' => pm.to_string(),
            'P' => pm.to_lowercase(),
            'S' => format!("{:02}", c.sec),
            'x' => format!("{:02}/{:02}/{:02}", c.hour, c.min, c.sec),
            'X' => format!("{:02}:{:02}:{:02}", c.hour, c.min, c.sec),
            'y' => format!("{:02}", c.year % 100),
            'Y' => c.year.to_string(),
            'z' => "+0000".to_string(),
            'Z' => "UTC".to_string(),
            'w' => c.weekday.to_string(),
            other => format!("%{other}"),
        };
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(script: &str, obj: Value) -> Result<Outcome, ScriptError> {
        Engine::default().run(script, Libraries::Open, &obj)
    }

    #[test]
    fn a_script_reads_obj_and_returns_a_health() {
        let out = run(
            "hs = {}\nif obj.status.ready then hs.status = 'Healthy' else hs.status = 'Progressing' end\nhs.message = 'n=' .. obj.status.n\nreturn hs",
            json!({"status": {"ready": true, "n": 3}}),
        );
        assert_eq!(
            out.unwrap(),
            Outcome::Health {
                status: Status::Healthy,
                message: "n=3".into()
            }
        );
    }

    #[test]
    fn an_unknown_status_word_is_an_invalid_status_never_healthy() {
        assert_eq!(
            run("return {status = 'Fine'}", json!({})).unwrap(),
            Outcome::InvalidStatus
        );
    }

    #[test]
    fn nothing_returned_or_an_empty_table_is_empty() {
        assert_eq!(run("local x = 1", json!({})).unwrap(), Outcome::Empty);
        assert_eq!(run("return {}", json!({})).unwrap(), Outcome::Empty);
        assert_eq!(
            run("return {status = 'Healthy', message = 3}", json!({})).unwrap(),
            Outcome::Empty
        );
    }

    #[test]
    fn a_runtime_error_names_the_line() {
        let e = run("local x = nil\nreturn x.y", json!({})).unwrap_err();
        assert!(
            matches!(&e, ScriptError::Runtime(m) if m.starts_with("<string>:2:")),
            "{e}"
        );
    }

    #[test]
    fn an_endless_loop_stops_at_the_instruction_bound() {
        let e = run("while true do end", json!({})).unwrap_err();
        assert!(
            matches!(&e, ScriptError::Bound(m) if m.contains("instructions")),
            "{e}"
        );
    }

    #[test]
    fn pcall_cannot_swallow_the_bound() {
        let e = run(
            "while true do pcall(function() while true do end end) end",
            json!({}),
        )
        .unwrap_err();
        assert!(matches!(e, ScriptError::Bound(_)), "{e}");
    }

    #[test]
    fn a_huge_string_stops_at_the_memory_bound() {
        let e = run(
            "local s = 'x'\nfor i = 1, 40 do s = s .. s end\nreturn {status = 'Healthy'}",
            json!({}),
        )
        .unwrap_err();
        assert!(
            matches!(&e, ScriptError::Bound(m) if m.contains("memory")),
            "{e}"
        );
    }

    #[test]
    fn argocd_libraries_have_no_string_functions_and_no_files() {
        let e = Engine::default()
            .run(
                "return {message = ('x'):upper()}",
                Libraries::Argocd,
                &json!({}),
            )
            .unwrap_err();
        assert!(matches!(e, ScriptError::Runtime(_)), "{e}");
        let out = Engine::default()
            .run(
                "local os = require('os')\nreturn {status = (dofile == nil and io == nil and os.time() > 0) and 'Healthy' or 'Degraded'}",
                Libraries::Argocd,
                &json!({}),
            )
            .unwrap();
        assert!(
            matches!(
                out,
                Outcome::Health {
                    status: Status::Healthy,
                    ..
                }
            ),
            "{out:?}"
        );
    }

    #[test]
    fn binary_chunks_cannot_be_loaded() {
        let out = run(
            "local f, why = loadstring(string.dump(function() end))\nreturn {status = f and 'Degraded' or 'Healthy', message = why}",
            json!({}),
        );
        assert!(
            matches!(
                out,
                Ok(Outcome::Health {
                    status: Status::Healthy,
                    ..
                })
            ),
            "{out:?}"
        );
    }

    #[test]
    fn goto_continue_works_as_in_gopher_lua() {
        let out = run(
            "local n = 0\nfor _, c in ipairs(obj.items) do\n  if c ~= 'x' then goto continue end\n  n = n + 1\n  ::continue::\nend\nreturn {status = 'Healthy', message = tostring(n) .. ' ' .. table.getn(obj.items) .. ' ' .. unpack({7})}",
            json!({"items": ["x", "y", "x"]}),
        )
        .unwrap();
        assert_eq!(
            out,
            Outcome::Health {
                status: Status::Healthy,
                message: "2 3 7".into()
            }
        );
    }

    #[test]
    fn a_syntax_error_is_reported_and_compiled_once() {
        let engine = Engine::default();
        for _ in 0..2 {
            let e = engine
                .run("return {", Libraries::Open, &json!({}))
                .unwrap_err();
            assert!(matches!(e, ScriptError::Compile(_)), "{e}");
        }
        assert_eq!(engine.compiled_scripts(), 1);
    }

    #[test]
    fn os_date_and_time_agree_in_utc() {
        let out = run(
            "local t = os.time({year=2024, month=2, day=29, hour=13, min=5, sec=9})\nreturn {status='Healthy', message=os.date('!%Y-%m-%d %H:%M:%S', t)}",
            json!({}),
        )
        .unwrap();
        assert_eq!(
            out,
            Outcome::Health {
                status: Status::Healthy,
                message: "2024-02-29 13:05:09".into()
            }
        );
    }

    /// A greedy repetition scans its whole run at every start and gives it back when what
    /// follows fails, even where nothing overlaps: `a*b` on 20,000 a's is ~2*10^8 steps of the
    /// C matcher, past the bound, where neither the instruction hook nor the wall bound can
    /// stop it. The same pattern on ordinary text (short runs) stays allowed.
    #[test]
    fn a_greedy_repetition_is_bounded_by_its_longest_run() {
        let out = run(
            "local s = string.rep('a', 20000)\nlocal at = string.find(s, 'a*b')\n\
             return {status = 'Healthy', message = tostring(at)}",
            json!({}),
        );
        assert!(
            matches!(&out, Err(e) if e.to_string().contains("backtrack past the bound")),
            "{out:?}"
        );
        let out = run(
            "local s = string.rep('ab ', 20000)\nlocal at = string.find(s, 'a*c')\n\
             local n = 0\nfor w in string.gmatch(s, '%a+') do n = n + 1 end\n\
             return {status = 'Healthy', message = tostring(at) .. ' ' .. n}",
            json!({}),
        );
        assert!(
            matches!(&out, Ok(Outcome::Health { message, .. }) if message == "nil 20000"),
            "{out:?}"
        );
    }
}
