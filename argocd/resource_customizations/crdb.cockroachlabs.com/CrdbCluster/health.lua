-- Health of a CockroachDB operator CrdbCluster, for Argo CD (argocd-cm sandbox: Lua 5.1, no
-- string/math).
--
-- With wavegate annotation mode on, wavegate's verdict wins: it probes the pods (live nodes,
-- one cluster ID), which the operator's status cannot show. Otherwise the operator's own status,
-- read conservatively: Healthy only when it clearly says the cluster is up for the current spec,
-- Progressing for everything else. Never Degraded natively: the operator retries failed actions.
--
--   v1alpha1 (cockroach-operator apis/v1alpha1): status.clusterStatus is Starting, Finished,
--   Failed or Unknown (pkg/clusterstatus); status.operatorActions[] {type, status, message};
--   status.conditions[] {type: Initialized, …, status: "True"}. No observedGeneration, so a
--   "Finished" written before a spec change still reads Finished: use wavegate for that.
--   v1beta1 (apis/v1beta1): status.observedGeneration, conditions Initialized and
--   RangesUnderReplicated, readyNodes (this region) against spec.regions[].nodes.

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
local spec = obj.spec or {}
local status = obj.status
if status == nil then
  return {status = "Progressing", message = what .. ": the operator has not reported status yet"}
end

local function condition(kind)
  for _, c in ipairs(status.conditions or {}) do
    if c.type == kind then
      return c.status
    end
  end
  return nil
end

local function running(version)
  if version ~= nil and version ~= "" then
    return ", running " .. version
  end
  return ""
end

-- spec.mode Disabled (v1beta1 ReconciliationMode, helm-charts
-- cockroachdb-parent/charts/operator/api/v1beta1/crdbcluster_types.go): the operator creates,
-- updates and decommissions none of the CrdbNodes, so its status is no word on this spec.
-- Suspended, as for a paused Deployment: the wave waits, nothing fails.
if spec.mode == "Disabled" then
  return {status = "Suspended", message = what .. ": spec.mode is Disabled, so the CockroachDB operator reconciles none of its CrdbNodes; set spec.mode: MutableOnly to hand the cluster to the operator"}
end

if obj.apiVersion == "crdb.cockroachlabs.com/v1beta1" then
  local generation = (obj.metadata or {}).generation
  if status.observedGeneration == nil or (generation ~= nil and status.observedGeneration ~= generation) then
    return {status = "Progressing", message = what .. ": the operator has not reconciled generation " .. tostring(generation) .. " yet (observed " .. tostring(status.observedGeneration) .. ")"}
  end
  if condition("Initialized") ~= "True" then
    return {status = "Progressing", message = what .. ": cluster not initialized yet"}
  end
  if condition("RangesUnderReplicated") == "True" then
    return {status = "Progressing", message = what .. ": ranges are under-replicated"}
  end
  -- readyNodes counts this region (status.region); without a region, every region's nodes.
  local expected = 0
  for _, region in ipairs(spec.regions or {}) do
    if status.region == nil or region.code == status.region then
      expected = expected + (region.nodes or 0)
    end
  end
  local ready = status.readyNodes or 0
  if ready < expected then
    return {status = "Progressing", message = what .. ": " .. ready .. " of " .. expected .. " nodes ready"}
  end
  return {status = "Healthy", message = what .. ": initialized, " .. ready .. " of " .. expected .. " nodes ready" .. running(status.version)}
end

-- v1alpha1
for _, action in ipairs(status.operatorActions or {}) do
  if action.status == "Failed" then
    local message = what .. ": operator action " .. tostring(action.type) .. " failed, the operator retries"
    if action.message ~= nil and action.message ~= "" then
      message = message .. ": " .. action.message
    end
    return {status = "Progressing", message = message}
  end
end
if status.clusterStatus ~= "Finished" then
  return {status = "Progressing", message = what .. ": operator reports clusterStatus " .. tostring(status.clusterStatus)}
end
if condition("Initialized") ~= "True" then
  return {status = "Progressing", message = what .. ": cluster not initialized yet"}
end
for _, action in ipairs(status.operatorActions or {}) do
  if action.status ~= "Finished" then
    return {status = "Progressing", message = what .. ": operator action " .. tostring(action.type) .. " is " .. tostring(action.status)}
  end
end
return {status = "Healthy", message = what .. ": operator finished, cluster initialized" .. running(status.version)}
