-- Health of a core/v1 Service, for Argo CD (argocd-cm sandbox: Lua 5.1, no string/math).
-- argocd-cm key: resource.customizations.health.Service (the core group has no "group_" prefix).
--
-- With wavegate annotation mode on, wavegate's verdict wins: it knows whether the selector
-- matches ready pods, which the Service object alone cannot show. Otherwise the same rule as
-- Argo CD's built-in check (gitops-engine pkg/health/health_service.go): a LoadBalancer is
-- Progressing until it has an ingress address, every other Service is Healthy.

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

local what = describe(obj)
local spec = obj.spec or {}
local lb = (obj.status or {}).loadBalancer or {}
-- Argo CD's own rule (gitops-engine health_service.go) comes first, annotation mode or not:
-- wavegate's Rust check judges a LoadBalancer without an address Progressing too, so a
-- Healthy annotation cannot be about this state.
if spec.type == "LoadBalancer" and (lb.ingress == nil or #lb.ingress == 0) then
  return {status = "Progressing", message = what .. ": waiting for the load balancer to get an address"}
end

local verdict = wavegateVerdict(obj)
if verdict ~= nil then
  return verdict
end

if spec.type == "LoadBalancer" then
  return {status = "Healthy", message = what .. ": load balancer has " .. #lb.ingress .. " ingress address(es)"}
end
return {status = "Healthy", message = what .. ": type " .. (spec.type or "ClusterIP")}
