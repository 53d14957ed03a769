"""Run an Argo CD ``health.lua`` the way Argo CD does, in a real Lua interpreter (lupa).

Argo CD runs health scripts in gopher-lua, a Lua 5.1, with only the base, table and package libraries
(plus a reduced ``os``) open, the live object as the global ``obj`` (JSON arrays become 1-based
tables, null fields are absent), and takes the returned table's ``status`` and ``message``. We run the
same script in lupa's Lua 5.1 with an environment holding just the base functions and ``table``, so a
script that leaned on ``string``, ``math`` or ``os`` would fail here as it could in Argo CD.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lupa import lua51

# Argo CD's health statuses (gitops-engine's HealthStatusCode); anything else becomes Unknown there.
STATUSES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")

_SANDBOX = """
local script, name, obj = ...
local env = {
  assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = pcall,
  rawequal = rawequal, rawget = rawget, rawset = rawset, select = select, tonumber = tonumber,
  tostring = tostring, type = type, unpack = unpack, getmetatable = getmetatable,
  setmetatable = setmetatable, _VERSION = _VERSION, table = table, obj = obj,
}
local chunk, err = loadstring(script, name)
if chunk == nil then error(err) end
setfenv(chunk, env)
return chunk()
"""


class HealthScriptError(RuntimeError):
    """The script failed, returned no table, or returned a status Argo CD does not know."""


def _to_lua(runtime: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        return runtime.table_from({k: _to_lua(runtime, v) for k, v in value.items() if v is not None})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)  # e.g. a YAML timestamp: the API server hands Argo CD strings


def run_health(script_path: Path, obj: Mapping[str, Any]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(register_eval=False, register_builtins=False)
    sandbox = runtime.eval(f"function(...) {_SANDBOX} end")
    try:
        result = sandbox(script_path.read_text(), script_path.name, _to_lua(runtime, obj))
    except lua51.LuaError as exc:
        raise HealthScriptError(f"{script_path}: {exc}") from exc
    if lua51.lua_type(result) != "table":
        raise HealthScriptError(f"{script_path} returned {result!r}, not a table")
    health = {str(k): str(v) for k, v in result.items()}
    if health.get("status") not in STATUSES:
        raise HealthScriptError(
            f"{script_path} returned status {health.get('status')!r}, not one of {STATUSES}"
        )
    return health
