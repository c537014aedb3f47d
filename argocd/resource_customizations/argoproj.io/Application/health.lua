-- Health of an Argo CD Application as a child in app-of-apps, for Argo CD (argocd-cm sandbox:
-- Lua 5.1, no string/math). Argo CD has no built-in health for Applications since 1.8; without
-- this script a parent's sync waves do not wait for their child apps at all.
--
-- One truth in two languages: this is the rule of wavegate's Rust check
-- (src/checks/application.rs), and tests/offline/parity.rs runs every Application fixture through both
-- and requires the same status. Keep the two in step.
--
-- With wavegate annotation mode on, wavegate's verdict wins. Otherwise the child is Healthy only
-- when its status describes the spec the parent just applied and nothing is left to do:
--   * no sync operation requested (top-level `operation`) or Running/Terminating,
--   * status.sync.comparedTo equals the spec: source (or every element of sources, in order,
--     or a sourceHydrator's sync source), destination and ignoreDifferences, compared whole (repoURL, path, chart, targetRevision,
--     ref, helm, kustomize, directory, plugin, ...). Argo CD's controller copies the spec into
--     comparedTo when it compares, and recompares when they differ (needRefreshAppStatus in
--     controller/appcontroller.go), so a difference means the status is about an older spec.
--     Unset, empty, false and 0 count as the same, as Go's omitempty makes them,
--   * with a sourceHydrator, Argo CD's hydrator is not behind the spec (below),
--   * the last operation did not finish Failed or Error,
--   * status.sync.status is Synced and status.health.status is Healthy.
-- This closes argo-cd #4577 (waves complete while the child app is still Progressing) and #6708
-- (parent Healthy while a child was Missing).
--
-- Every shortfall is collected and the worst wins (gitops-engine's order Healthy < Suspended <
-- Progressing < Missing < Degraded < Unknown). Degraded only for a definite failure, and only
-- once the comparison is current and nothing is running or pending:
--   * the child's own health is Degraded (usually the end of a deadline: Deployment
--     progressDeadlineSeconds, a failed Job) — passed on, failing the parent's sync with the
--     child's reason;
--   * the last sync Failed/Error for exactly the revision(s) and source(s) compared now: Argo
--     CD's automated sync does not retry a sync it already attempted and failed
--     (alreadyAttemptedSync), so waiting would only wait for the timeout.
-- The same evidence about an older spec, or seen mid-sync, is Progressing. Suspended stays
-- Suspended. A child health or sync status of Missing, Unknown or none is Progressing: Argo CD
-- drops Missing/Unknown children from the parent's aggregate health (controller/health.go,
-- #6708), so Unknown would let the parent go Healthy too early.

-- BEGIN wavegate annotation mode (docs/contracts.md)
-- Scripts loaded from argocd-cm cannot share code, so each annotation-aware wavegate script
-- carries this same block; the harness fails if the copies drift apart. Written for Argo CD's
-- argocd-cm sandbox: Lua 5.1 without the string and math libraries (tonumber, tostring and ..
-- are all it needs).
-- Argo CD's safe os library (time and date only), for valid-until.
local os = require("os")

-- A selector as wavegate records it: k=v pairs sorted by key, joined by commas.
local function selectorText(selector)
  local keys = {}
  for k, v in pairs(selector) do
    if type(v) == "string" then
      table.insert(keys, k)
    end
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    table.insert(parts, k .. "=" .. selector[k])
  end
  return table.concat(parts, ",")
end

-- What else wavegate judged the object on, rendered as wavegate records it in
-- wavegate.dev/judged-state: a Service's type and publishNotReadyAddresses (it has no
-- generation), a CNPG Database's status (CNPG changes it without a new generation), an
-- Application's health, sync and operation (its status, should it ever change without a new
-- generation). nil for other kinds.
local function stateText(o)
  if o.kind == "Service" then
    local spec = o.spec or {}
    local serviceType = spec.type
    if serviceType == nil or serviceType == "" then
      serviceType = "ClusterIP"
    end
    return "type=" .. serviceType .. ",publishNotReadyAddresses=" .. tostring(spec.publishNotReadyAddresses == true)
  end
  if o.kind == "Database" then
    local s = o.status or {}
    local applied = ""
    if s.applied ~= nil then
      applied = tostring(s.applied)
    end
    local observed = ""
    if s.observedGeneration ~= nil then
      observed = tostring(s.observedGeneration)
    end
    return "applied=" .. applied .. ",observedGeneration=" .. observed .. ",message=" .. (s.message or "")
  end
  if o.kind == "Application" then
    local s = o.status or {}
    local sync = s.sync or {}
    local revision = sync.revision or ""
    if sync.revisions ~= nil and #sync.revisions > 0 then
      revision = table.concat(sync.revisions, " ")
    end
    return "health=" .. ((s.health or {}).status or "") .. ",sync=" .. (sync.status or "") .. ",revision=" .. revision .. ",operation=" .. ((s.operationState or {}).phase or "") .. ",requested=" .. tostring(o.operation ~= nil)
  end
  return nil
end

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
  -- gitops-engine calls a deleting object Progressing before any health script; wavegate's
  -- verdict about it is never more than that.
  if meta.deletionTimestamp ~= nil then
    return {status = "Progressing", message = describe(o) .. " is being deleted"}
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
  -- The selector wavegate judged (Services): a verdict about another selector says nothing
  -- about this one, e.g. right after Argo CD applied a changed selector.
  local judged = ann["wavegate.dev/judged-selector"]
  if judged ~= nil then
    local current = selectorText((o.spec or {}).selector or {})
    if current ~= judged then
      return {status = "Progressing", message = "wavegate judged " .. describe(o) .. " with selector " .. judged .. "; it now selects " .. current .. ", not judged yet"}
    end
  end
  -- A verdict judged on another spec or status (a Service's type, a Database's status after
  -- its Cluster was deleted) says nothing about this one.
  local judgedState = ann["wavegate.dev/judged-state"]
  if judgedState ~= nil then
    local current = stateText(o)
    if current ~= nil and current ~= judgedState then
      return {status = "Progressing", message = "wavegate judged " .. describe(o) .. " on " .. judgedState .. "; it now shows " .. current .. ", not judged yet"}
    end
  end
  -- wavegate renews valid-until while it runs; past it, the verdict is one nobody confirms any
  -- more (wavegate stopped, lost its watch, or cannot write) and must not move a wave.
  local validUntil = ann["wavegate.dev/valid-until"]
  if validUntil ~= nil and (tonumber(validUntil) == nil or tonumber(validUntil) < os.time()) then
    return {status = "Progressing", message = describe(o) .. ": wavegate's verdict (" .. status .. ") expired at " .. validUntil .. " and was not renewed; is wavegate running?"}
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
local meta = obj.metadata or {}
local spec = obj.spec or {}
local status = obj.status

if meta.deletionTimestamp ~= nil then
  return {status = "Progressing", message = what .. " is being deleted"}
end
if status == nil or (status.health == nil and status.sync == nil) then
  return {status = "Progressing", message = what .. " has no health or sync status yet (Argo CD has not reconciled it)"}
end

-- Go's omitempty: unset, "", false, 0, an empty list and an object of nothing but those are
-- all "not set". A JSON list arrives as a table with integer keys, an object with string keys.
local function isEmpty(v)
  if v == nil or v == false or v == 0 or v == "" then
    return true
  end
  if type(v) ~= "table" then
    return false
  end
  if v[1] ~= nil then
    return false
  end
  for _, item in pairs(v) do
    if not isEmpty(item) then
      return false
    end
  end
  return true
end

local function same(a, b)
  local emptyA, emptyB = isEmpty(a), isEmpty(b)
  if emptyA or emptyB then
    return emptyA and emptyB
  end
  if type(a) ~= "table" or type(b) ~= "table" then
    return a == b
  end
  if (a[1] ~= nil) ~= (b[1] ~= nil) or #a ~= #b then
    return false
  end
  for k, v in pairs(a) do
    if not same(v, b[k]) then
      return false
    end
  end
  for k, v in pairs(b) do
    if a[k] == nil and not isEmpty(v) then
      return false
    end
  end
  return true
end

local rank = {Healthy = 0, Suspended = 1, Progressing = 2, Missing = 3, Degraded = 4, Unknown = 5}
local worst = "Healthy"
local clauses = {}
local function shortfall(s, clause)
  if rank[s] > rank[worst] then
    worst = s
  end
  table.insert(clauses, clause)
end

-- An operation in flight means the status describes a state that is about to change.
local op = status.operationState
local inFlight = false
if op ~= nil and (op.phase == "Running" or op.phase == "Terminating") then
  inFlight = true
  local clause = "sync operation " .. op.phase
  if op.message ~= nil and op.message ~= "" then
    clause = clause .. " (" .. op.message .. ")"
  end
  shortfall("Progressing", clause)
elseif obj.operation ~= nil then
  inFlight = true
  shortfall("Progressing", "sync operation requested, not started yet")
end

-- What Argo CD compares and syncs, as it records it in status.sync.comparedTo
-- (ApplicationSpec.GetSource / HasMultipleSources, pkg/apis/application/v1alpha1/types.go; the
-- same in 3.4-3.6): a sourceHydrator's sync source, else spec.sources when not empty (ref
-- sources included), else spec.source. The sync source (SourceHydrator.GetSyncSource) is the
-- repository syncSource.repoURL (Argo CD 3.5+) or else drySource.repoURL, syncSource.path and
-- syncSource.targetBranch as targetRevision; nothing else of the hydrator is compared.
local hydrator = spec.sourceHydrator
local multi = hydrator == nil and spec.sources ~= nil and #spec.sources > 0
local wantedSource = spec.source
if hydrator ~= nil then
  local dry = hydrator.drySource or {}
  local syncSource = hydrator.syncSource or {}
  local repo = syncSource.repoURL
  if repo == nil or repo == "" then
    repo = dry.repoURL
  end
  wantedSource = {repoURL = repo, path = syncSource.path, targetRevision = syncSource.targetBranch}
end
local sync = status.sync or {}
local compared = sync.comparedTo
local stale = false
if compared == nil then
  stale = true
  shortfall("Progressing", "has not been compared with its spec yet")
else
  local diffs = {}
  if multi then
    local got = compared.sources or {}
    if #got ~= #spec.sources then
      table.insert(diffs, "last compared " .. #got .. " source(s) but spec has " .. #spec.sources)
    else
      for i, want in ipairs(spec.sources) do
        if not same(got[i], want) then
          table.insert(diffs, "source #" .. i .. " differs from the spec")
        end
      end
    end
  elseif not same(compared.source, wantedSource) then
    local seen = compared.source or {}
    local wanted = wantedSource or {}
    if not same(seen.targetRevision, wanted.targetRevision) then
      local function text(v)
        if isEmpty(v) then
          return "(none)"
        end
        return tostring(v)
      end
      table.insert(diffs, "last compared revision " .. text(seen.targetRevision) .. " but spec asks for " .. text(wanted.targetRevision))
    else
      table.insert(diffs, "last compared a source that differs from the spec")
    end
  end
  if not same(compared.destination, spec.destination) then
    table.insert(diffs, "last compared another destination than the spec has")
  end
  if not same(compared.ignoreDifferences, spec.ignoreDifferences) then
    table.insert(diffs, "last compared other ignoreDifferences than the spec has")
  end
  if #diffs > 0 then
    stale = true
    shortfall("Progressing", table.concat(diffs, ", "))
  end
end

-- With a source hydrator, comparedTo names only the branch hydrated manifests are synced from:
-- a new dry revision or hydrator config changes what is on it only once Argo CD's hydrator has
-- run, which it records in status.sourceHydrator.currentOperation with the config it ran for
-- (controller/hydrator/hydrator.go). Hydrating, Failed (it retries) or hydrated for another
-- config is Progressing; no record says nothing (something else may write the branch).
if hydrator ~= nil then
  local run = (status.sourceHydrator or {}).currentOperation
  if run ~= nil then
    local clause = nil
    if run.phase == "Hydrated" then
      if not same(run.sourceHydrator, hydrator) then
        clause = "last hydrated another sourceHydrator than the spec has"
      end
    else
      if run.phase == "Hydrating" then
        clause = "hydrating its dry source"
      else
        clause = "hydration " .. (run.phase or "")
      end
      if run.message ~= nil and run.message ~= "" then
        clause = clause .. " (" .. run.message .. ")"
      end
    end
    if clause ~= nil then
      stale = true
      shortfall("Progressing", clause)
    end
  end
end

-- A finished operation that failed. Definite (Degraded) only when it was a sync of exactly the
-- revision(s) and source(s) compared now and nothing is running or stale.
if op ~= nil and (op.phase == "Failed" or op.phase == "Error") then
  local clause = "last sync " .. op.phase
  if op.message ~= nil and op.message ~= "" then
    clause = clause .. ": " .. op.message
  end
  -- Argo CD records a sync's source as GetSource() and its sources as spec.sources
  -- (controller/sync.go, newSyncOperationResult).
  local revisionKey, sourceKey, wanted = "revision", "source", wantedSource
  if multi then
    revisionKey, sourceKey, wanted = "revisions", "sources", spec.sources
  end
  local result = op.syncResult
  local current = result ~= nil and not isEmpty(sync[revisionKey])
    and same(sync[revisionKey], result[revisionKey])
    and same(result[sourceKey], wanted)
  if current and not stale and not inFlight then
    shortfall("Degraded", clause)
  else
    shortfall("Progressing", clause .. " (not of the current spec and revision)")
  end
end

local health = (status.health or {}).status or "Unknown"
local healthClause = "health " .. health
local healthMessage = (status.health or {}).message
if healthMessage ~= nil and healthMessage ~= "" then
  healthClause = healthClause .. ": " .. healthMessage
end
if health == "Degraded" then
  if stale or inFlight then
    shortfall("Progressing", healthClause)
  else
    shortfall("Degraded", healthClause)
  end
elseif health == "Suspended" then
  shortfall("Suspended", healthClause)
elseif health == "Progressing" or health == "Missing" then
  shortfall("Progressing", healthClause)
elseif health ~= "Healthy" then
  shortfall("Unknown", healthClause)
end

local syncStatus = sync.status or "Unknown"
if syncStatus == "OutOfSync" then
  shortfall("Progressing", "is " .. syncStatus)
elseif syncStatus ~= "Synced" then
  local clause = "is " .. syncStatus
  for _, c in ipairs(status.conditions or {}) do
    if c.type == "ComparisonError" and c.message ~= nil then
      clause = clause .. ": " .. c.message
      break
    end
  end
  shortfall("Unknown", clause)
end

if #clauses == 0 then
  return {status = "Healthy", message = what .. " is Healthy and Synced"}
end
if worst == "Unknown" or worst == "Missing" then
  worst = "Progressing"
end
return {status = worst, message = what .. ": " .. table.concat(clauses, "; ")}
