-- Health of an Argo CD Application as a child in app-of-apps, for Argo CD (argocd-cm sandbox:
-- Lua 5.1, no string/math). Argo CD has no built-in health for Applications since 1.8; without
-- this script a parent's sync waves do not wait for their child apps at all.
--
-- With wavegate annotation mode on, wavegate's verdict wins. Otherwise the child's own
-- status.health counts only when it describes the spec the parent just applied:
--   * no sync operation requested (top-level `operation`) or Running/Terminating,
--   * status.sync.status is Synced,
--   * status.sync.comparedTo.source(s) equals spec.source(s) (repoURL, path, chart,
--     targetRevision, ref; multi-source element-wise) — otherwise Synced/Healthy belong to the
--     previous revision,
-- and only then is the child's health passed on. This closes argo-cd #4577 (waves complete while
-- the child app is still Progressing) and #6708 (parent Healthy while a child was Missing).
--
-- Child health decisions:
--   Healthy   → Healthy.
--   Suspended → Suspended (the parent waits; Argo CD moves a wave on only for Healthy).
--   Degraded  → Degraded, but only once the verdict is current (all checks above pass). Argo
--               CD's documented snippet passes health through, and a child's Degraded is
--               usually already the end of a deadline (Deployment progressDeadlineSeconds,
--               failed Job), so failing the parent's sync says so at once instead of hiding it
--               behind a Progressing that never ends. A Degraded left over from an older
--               revision, or seen mid-sync, is transient: Progressing.
--   Missing, Unknown, none → Progressing (Argo CD drops Missing/Unknown children from the
--               parent's aggregate health, see controller/health.go, which is #6708).

-- BEGIN wavegate annotation mode (docs/contracts.md)
-- Scripts loaded from argocd-cm cannot share code, so each annotation-aware wavegate script
-- carries this same block; the harness fails if the copies drift apart. Written for Argo CD's
-- argocd-cm sandbox: Lua 5.1 without the string and math libraries (tonumber, tostring and ..
-- are all it needs).
local function describe(o)
  local meta = o.metadata or {}
  local name = meta.name or "?"
  if meta.namespace ~= nil then
    name = meta.namespace .. "/" .. name
  end
  return (o.kind or "object") .. " " .. name
end

-- An object that exists is never Missing, and Argo CD leaves a child Application's Missing or
-- Unknown out of its parent's health (controller/health.go), which is how a parent went Healthy
-- too early in argo-cd #6708. Both become Progressing; the other four pass through.
local passThrough = {Healthy = true, Progressing = true, Degraded = true, Suspended = true}

-- Returns wavegate's verdict when the object opted in (wavegate.dev/annotate: "true"), else nil.
-- Opted in without a verdict yet means wavegate has not judged it: Progressing, not native
-- logic, or the wave would move on before the judge has spoken.
local function wavegateVerdict(o)
  local meta = o.metadata or {}
  local ann = meta.annotations or {}
  if ann["wavegate.dev/annotate"] ~= "true" then
    return nil
  end
  local status = ann["wavegate.dev/health-status"]
  if status == nil then
    return {status = "Progressing", message = describe(o) .. ": waiting for wavegate's first verdict (annotation mode is on)"}
  end
  -- Annotations are strings and metadata.generation a number: compare through tonumber.
  local observed = ann["wavegate.dev/observed-generation"]
  if observed ~= nil and meta.generation ~= nil and tonumber(observed) ~= meta.generation then
    return {status = "Progressing", message = "wavegate has not judged generation " .. meta.generation .. " of " .. describe(o) .. " yet (last judged " .. observed .. ")"}
  end
  local message = ann["wavegate.dev/health-message"]
  if message == nil or message == "" then
    message = describe(o) .. ": wavegate says " .. status
  end
  if passThrough[status] then
    return {status = status, message = message}
  end
  return {status = "Progressing", message = "wavegate says " .. status .. ": " .. message}
end
-- END wavegate annotation mode

local verdict = wavegateVerdict(obj)
if verdict ~= nil then
  return verdict
end

local what = describe(obj)
local spec = obj.spec or {}
local status = obj.status or {}

local function progressing(message)
  return {status = "Progressing", message = what .. ": " .. message}
end

if obj.operation ~= nil then
  return progressing("sync requested, not started yet")
end

local op = status.operationState
if op ~= nil and (op.phase == "Running" or op.phase == "Terminating") then
  local message = "sync " .. op.phase
  if op.message ~= nil and op.message ~= "" then
    message = message .. ": " .. op.message
  end
  return progressing(message)
end

local sync = status.sync or {}
if sync.status ~= "Synced" then
  local message = "sync status is " .. (sync.status or "not reported yet")
  if op ~= nil and (op.phase == "Failed" or op.phase == "Error") and op.message ~= nil then
    message = message .. "; last sync " .. op.phase .. ": " .. op.message
  end
  return progressing(message)
end

-- An empty targetRevision means HEAD to Argo CD; any other difference means the recorded
-- comparison belongs to an older spec.
local function same(field, a, b)
  if field == "targetRevision" then
    if a == nil or a == "" then a = "HEAD" end
    if b == nil or b == "" then b = "HEAD" end
  end
  if a == "" then a = nil end
  if b == "" then b = nil end
  return a == b
end

local function sourceDiff(want, got, label)
  for _, field in ipairs({"repoURL", "path", "chart", "targetRevision", "ref"}) do
    if not same(field, want[field], got[field]) then
      return label .. field .. " was compared at " .. tostring(got[field]) .. ", spec has " .. tostring(want[field])
    end
  end
  return nil
end

local compared = sync.comparedTo or {}
local diff = nil
if spec.sources ~= nil and #spec.sources > 0 then
  local got = compared.sources or {}
  if #got ~= #spec.sources then
    diff = "compared " .. #got .. " sources, spec has " .. #spec.sources
  else
    for i, want in ipairs(spec.sources) do
      diff = sourceDiff(want, got[i], "sources[" .. i .. "].")
      if diff ~= nil then
        break
      end
    end
  end
elseif spec.source ~= nil then
  if compared.source == nil then
    diff = "Argo CD has not compared spec.source yet"
  else
    diff = sourceDiff(spec.source, compared.source, "source.")
  end
end
if diff ~= nil then
  return progressing("Synced to an older spec: " .. diff)
end

local health = status.health or {}
local message = health.message
if message == nil or message == "" then
  message = "child reports " .. tostring(health.status)
end
if health.status == "Healthy" or health.status == "Suspended" or health.status == "Degraded" then
  return {status = health.status, message = what .. ": " .. message}
end
return progressing(message)
