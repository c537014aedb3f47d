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
if spec.type == "LoadBalancer" then
  local lb = (obj.status or {}).loadBalancer or {}
  if lb.ingress == nil or #lb.ingress == 0 then
    return {status = "Progressing", message = what .. ": waiting for the load balancer to get an address"}
  end
  return {status = "Healthy", message = what .. ": load balancer has " .. #lb.ingress .. " ingress address(es)"}
end
return {status = "Healthy", message = what .. ": type " .. (spec.type or "ClusterIP")}
