-- Health of a wavegate.dev WaveGate, for Argo CD (argocd-cm sandbox: Lua 5.1, no string/math).
--
-- wavegate evaluates the gate's checks and writes status.health {status, message}; this script
-- hands that verdict to Argo CD unchanged, so Argo CD holds the next sync wave exactly as long
-- as wavegate says. Argo CD's sync (gitops-engine sync_context.go) moves past a resource only
-- when it is Healthy and fails the sync when it is Degraded; wavegate sets Degraded only for
-- definite failures (timeout elapsed, split cluster), so Degraded passes through too.
--
-- A verdict counts only when status.observedGeneration equals metadata.generation: right after
-- Argo CD applies a changed gate, the old generation's Healthy must not release the wave. And
-- only until status.health.validUntil, which wavegate renews while it runs.

-- Argo CD's safe os library (time and date only), for validUntil.
local os = require("os")

local meta = obj.metadata or {}
local name = (meta.namespace or "") .. "/" .. (meta.name or "?")
local status = obj.status or {}
local generation = meta.generation

if status.observedGeneration == nil or (generation ~= nil and status.observedGeneration ~= generation) then
  local message = "waiting for wavegate to evaluate generation " .. tostring(generation) .. " of WaveGate " .. name
  if status.observedGeneration ~= nil then
    message = message .. " (last evaluated " .. tostring(status.observedGeneration) .. ")"
  end
  return {status = "Progressing", message = message}
end

local health = status.health
if health == nil or health.status == nil then
  return {status = "Progressing", message = "wavegate evaluated generation " .. tostring(generation) .. " of WaveGate " .. name .. " but wrote no health yet"}
end

-- wavegate renews health.validUntil (Unix seconds) while it runs; past it, nobody confirms the
-- verdict any more (wavegate stopped, lost its watch, or cannot write): a week-old Healthy must
-- not release a re-synced gate.
if health.validUntil ~= nil and (tonumber(health.validUntil) == nil or tonumber(health.validUntil) < os.time()) then
  return {status = "Progressing", message = "WaveGate " .. name .. ": wavegate's verdict (" .. tostring(health.status) .. ") expired at " .. tostring(health.validUntil) .. " and was not renewed; is wavegate running?"}
end

local known = {Healthy = true, Progressing = true, Degraded = true, Suspended = true, Missing = true, Unknown = true}
if known[health.status] then
  return {status = health.status, message = health.message}
end
-- A status this script does not know (a newer wavegate?) must never release the wave.
return {status = "Progressing", message = "WaveGate " .. name .. ": unrecognised status \"" .. tostring(health.status) .. "\" from wavegate, waiting"}
