"""Direct vs through acpgate: one scripted run of ACP steps against a real adapter, twice.

:func:`run_script` drives a peer — the adapter itself on stdio, or ``acpgate acp``
with that adapter as its default agent — in raw JSON lines, the same steps on
both, and records what a client sees: the ``initialize`` result, each step's
result or error, the ``session/update`` kinds and the other notifications.
:func:`differences` lists where the two runs differ once the expected
differences are taken out (:func:`comparable`):

- session ids (each side has its own), and ids the agent makes per run;
- ``_meta.acpgate`` anywhere, and ``data.acpgate`` of errors (acpgate's own
  additions), ``_meta.zeroclaw`` and ``agentInfo`` of ``initialize``;
- token counts the agent's own timing decides: all of the cancelled turn's result
  (``usage``, ``_meta.quota``: how much of the interrupted model call counts
  depends on when the cancel lands), and ``_meta.quota.model_usage`` of every
  result (claude-agent-acp's is the session's running total, its background
  requests such as titles included as they finish);
- in ``agentCapabilities``: what acpgate decides itself — ``loadSession``, the
  ``sessionCapabilities`` it serves from its store (``list``, ``delete``,
  ``resume``, ``close``, ``additionalDirectories``), ``fork`` (acpgate's for
  every agent: ``test_real_adapters.test_fork``),
  ``promptCapabilities.embeddedContext`` (always on), and what acpgate withholds
  because it cannot do what the capability asks of a host
  (:data:`services.edge.dialect.passed_caps.WITHHELD`: ``mcpCapabilities.acp``,
  codex-acp 2.6's ``sessionCapabilities.subagents``, …); a capability acpgate
  does not know is withheld too, and shows up here by name.

Anything else that differs is a loss (or an addition) of acpgate's, and fails
the tier by name.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.edge.dialect.passed_caps import WITHHELD
from tests.e2e.harness import AcpProcess
from tests.realagents.fake_models import SLOW_TRIGGER, TOOL_TRIGGER

#: Real adapters boot Node/Rust runtimes and their CLIs: generous waits, never asserted on.
SLOW_WAIT = 120.0
CLIENT_INFO = {"name": "acpgate-tier", "version": "1"}
#: An extension method no agent serves: both sides must answer it alike.
PROBE_METHOD = "_acpgate_tier/probe"
#: ``sessionCapabilities`` acpgate decides itself (see the module doc).
OWN_SESSION_CAPS = ("list", "delete", "resume", "close", "additionalDirectories", "fork")
#: The prompts the script sends, in order (a restore replays them).
PROMPTS = ("hello", TOOL_TRIGGER, SLOW_TRIGGER)
#: The step whose token counts are the agent's to vary (module doc).
CANCELLED_STEP = "prompt cancelled"
#: Values the agent makes per run (timestamps, generated ids), replaced before comparing.
_PER_RUN = (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"),
            re.compile(r"\d{12,}"))


@dataclass
class Observed:
    """What a client saw of one run."""

    initialize: dict[str, Any] = field(default_factory=dict)
    #: Step name → the response's ``result``, or ``{"error": ...}``.
    steps: dict[str, Any] = field(default_factory=dict)
    kinds: set[str] = field(default_factory=set)
    notifications: set[str] = field(default_factory=set)
    session_id: str = ""
    text: dict[str, str] = field(default_factory=dict)


def _answer(resp: dict[str, Any]) -> Any:
    return resp["result"] if "result" in resp else {"error": resp.get("error")}


def _seen(obs: Observed, step: str, messages: list[dict[str, Any]]) -> None:
    text = []
    for m in messages:
        method = m.get("method")
        if method == "session/update" and "id" not in m:
            update = m["params"].get("update", {})
            obs.kinds.add(str(update.get("sessionUpdate")))
            if update.get("sessionUpdate") == "agent_message_chunk":
                text.append(str(update.get("content", {}).get("text", "")))
        elif method and "id" not in m:
            obs.notifications.add(method)
    obs.text[step] = "".join(text)


def _call(peer: AcpProcess, obs: Observed, step: str, method: str,
          params: dict[str, Any]) -> Any:
    before, resp = peer.call(method, params, SLOW_WAIT)
    _seen(obs, step, before)
    obs.steps[step] = _answer(resp)
    return obs.steps[step]


def _allow(params: dict[str, Any]) -> dict[str, Any]:
    option = next(o for o in params["options"] if o["kind"] == "allow_once")
    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}


def run_script(peer: AcpProcess, workspace: str, *, ask_mode: str = "",
               before_new: Callable[[AcpProcess, Observed], None] | None = None) -> Observed:
    """The scripted steps (module doc) on ``peer``; ``before_new`` runs between
    ``initialize`` and ``session/new`` (e.g. ``authenticate``)."""
    obs = Observed()
    obs.initialize = _call(peer, obs, "initialize", "initialize", {
        "protocolVersion": 1, "clientInfo": CLIENT_INFO, "clientCapabilities": {}})
    if before_new is not None:
        before_new(peer, obs)
    new = _call(peer, obs, "session/new", "session/new", {"cwd": workspace, "mcpServers": []})
    sid = obs.session_id = new["sessionId"]
    if ask_mode:
        _call(peer, obs, "set_mode ask", "session/set_mode", {"sessionId": sid,
                                                              "modeId": ask_mode})
    _call(peer, obs, "prompt hello", "session/prompt", {
        "sessionId": sid, "prompt": [{"type": "text", "text": PROMPTS[0]}]})
    peer.handlers["session/request_permission"] = _allow
    try:
        _call(peer, obs, "prompt tool", "session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": PROMPTS[1]}]})
    finally:
        peer.handlers.clear()
    _call(peer, obs, "set_mode bogus", "session/set_mode", {"sessionId": sid,
                                                            "modeId": "no-such-mode"})
    models = new.get("models") or {}
    others = [m["modelId"] for m in models.get("availableModels", [])
              if m.get("modelId") != models.get("currentModelId")]
    _call(peer, obs, "set_model", "session/set_model", {
        "sessionId": sid, "modelId": others[0] if others else "no-such-model"})
    _call(peer, obs, "extension", PROBE_METHOD, {"sessionId": sid, "x": 1})
    rid = peer.request_async("session/prompt", {
        "sessionId": sid, "prompt": [{"type": "text", "text": PROMPTS[2]}]})
    first, _ = peer.read_until(
        lambda m: m.get("method") == "session/update"
        and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
        and "tick" in str(m["params"]["update"].get("content")), SLOW_WAIT)
    peer.notify("session/cancel", {"sessionId": sid})
    rest, resp = peer.response(rid, SLOW_WAIT)
    _seen(obs, CANCELLED_STEP, first + rest)
    obs.steps[CANCELLED_STEP] = _answer(resp)
    return obs


def _strip_meta(value: Any) -> Any:
    """``value`` without ``acpgate`` keys in any ``_meta`` or error ``data`` (and without
    the ``_meta`` or ``data`` left empty by that)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "acpgate":
                continue
            item = _strip_meta(item)
            if key in ("_meta", "data") and item == {} and value[key] != {}:
                continue
            out[key] = item
        return out
    if isinstance(value, list):
        return [_strip_meta(v) for v in value]
    return value


def _ids(value: Any, ids: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _ids(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_ids(v, ids) for v in value]
    if isinstance(value, str):
        for sid in ids:
            value = value.replace(sid, "<session>") if sid else value
        for pattern in _PER_RUN:
            value = pattern.sub("<per-run>", value)
    return value


def _uncounted(value: Any, keys: tuple[str, ...], counting: bool = False) -> Any:
    """``value`` with the numbers under ``keys`` replaced by ``<n>``."""
    if isinstance(value, dict):
        return {k: _uncounted(v, keys, counting or k in keys) for k, v in value.items()}
    if isinstance(value, list):
        return [_uncounted(v, keys, counting) for v in value]
    if counting and isinstance(value, int | float) and not isinstance(value, bool):
        return "<n>"
    return value


def comparable_initialize(result: dict[str, Any]) -> dict[str, Any]:
    """An ``initialize`` result less what acpgate decides itself (module doc)."""
    out = copy.deepcopy(result)
    out.pop("agentInfo", None)
    caps = out.get("agentCapabilities", {})
    caps.pop("loadSession", None)
    for key in OWN_SESSION_CAPS:
        caps.get("sessionCapabilities", {}).pop(key, None)
    if caps.get("sessionCapabilities") == {}:
        caps.pop("sessionCapabilities")
    caps.get("promptCapabilities", {}).pop("embeddedContext", None)
    for name in WITHHELD:
        parent, _, key = name.partition(".")
        if isinstance(caps.get(parent), dict):
            caps[parent].pop(key, None)
    meta = out.get("_meta")
    if isinstance(meta, dict):
        meta.pop("zeroclaw", None)
        if not meta:
            out.pop("_meta")
    return _strip_meta(out)


def comparable(obs: Observed, ids: tuple[str, ...]) -> dict[str, Any]:
    """Everything :func:`differences` compares of one run."""
    steps = {k: _uncounted(v, ("usage", "quota") if k == CANCELLED_STEP else ("model_usage",))
             for k, v in obs.steps.items() if k != "initialize"}
    return {
        "initialize": comparable_initialize(obs.initialize),
        "steps": _ids(_strip_meta(steps), ids),
        "kinds": sorted(obs.kinds),
        "notifications": sorted(obs.notifications),
    }


def differences(direct: Observed, through: Observed) -> list[str]:
    """Where the run through acpgate differs from the direct one (expected differences
    taken out), one line each; [] when none."""
    ids = (direct.session_id, through.session_id)
    a, b = comparable(direct, ids), comparable(through, ids)
    out: list[str] = []
    _diff("", a, b, out)
    return out


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            where = f"{path}.{key}" if path else key
            if key not in b:
                out.append(f"{where}: lost through acpgate (direct: {a[key]!r:.200})")
            elif key not in a:
                out.append(f"{where}: added by acpgate ({b[key]!r:.200})")
            else:
                _diff(where, a[key], b[key], out)
    elif a != b:
        out.append(f"{path}: direct {a!r:.300} / through acpgate {b!r:.300}")


def replayed(peer: AcpProcess, method: str, params: dict[str, Any]) -> tuple[Any, list[str]]:
    """``session/load`` (``method``) and what its replay shows: one line per replayed update,
    ``<kind>: <text>`` (text chunks joined per run of one kind)."""
    before, resp = peer.call(method, params, SLOW_WAIT)
    lines: list[str] = []
    for m in before:
        if m.get("method") != "session/update" or "id" in m:
            continue
        update = m["params"]["update"]
        kind = update.get("sessionUpdate")
        if kind not in ("user_message_chunk", "agent_message_chunk"):
            continue
        text = str(update.get("content", {}).get("text", ""))
        if lines and lines[-1].startswith(f"{kind}: "):
            lines[-1] += text
        else:
            lines.append(f"{kind}: {text}")
    return _answer(resp), lines
