-- Argo CD health of every Tierkeeper kind (TieredTopic, TieredBroker, TieredCluster): one script, in the
-- kind-wildcard directory `_` of Argo CD's layout, installed once per kind or under `tierkeeper.io/*`
-- (docs/gitops.md). It reads the kstatus conditions the operator writes: Ready always,
-- Reconciling and Stalled only while True, plus status.observedGeneration. The order of the checks is
-- kstatus's, so Argo CD and Flux agree; docs/gitops.md has the table of states and where they differ.
-- Only Lua 5.1's base and table libraries are used (Argo CD opens no others by default).
local function verdict(status, text)
  return {status = status, message = text}
end

local function find(conditions, wanted)
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local function message(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  return verdict("Progressing", "Pending deletion")
end

if obj.status == nil or obj.status.conditions == nil then
  return verdict("Progressing", "Waiting for the operator to report status")
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
-- Any difference counts, as in kstatus: the conditions describe another spec than the current one.
if generation ~= nil and observed ~= nil and observed ~= generation then
  local text = "Waiting for the operator to act on generation " .. generation .. " (it last acted on "
  return verdict("Progressing", text .. observed .. ")")
end

local conditions = obj.status.conditions
local stalled = find(conditions, "Stalled")
if is_true(stalled) then
  return verdict("Degraded", message(stalled, "Stalled"))
end

-- A user's pause is a deliberate stop, which is what Suspended means in Argo CD.
if obj.spec ~= nil and obj.spec.paused == true then
  return verdict("Suspended", "Paused (spec.paused): no copy or cleanup runs")
end

local reconciling = find(conditions, "Reconciling")
if is_true(reconciling) then
  return verdict("Progressing", message(reconciling, "Reconciling"))
end

local ready = find(conditions, "Ready")
if ready == nil then
  return verdict("Progressing", "Waiting for the Ready condition")
end
if ready.status ~= "True" then
  -- kstatus reads Ready=False without Stalled as still in progress (a transient error is retried).
  return verdict("Progressing", message(ready, "Not ready"))
end

-- TieredBroker only: a replica-fetcher change the operator proposes and a person must approve. Tiering
-- runs normally meanwhile, so the resource stays Healthy; the message says what waits.
local pending = find(conditions, "FetcherChangePending")
if is_true(pending) then
  local what = message(pending, "see the TieredBroker's status")
  return verdict("Healthy", "Fetcher change pending approval: " .. what)
end

return verdict("Healthy", message(ready, "Ready"))
