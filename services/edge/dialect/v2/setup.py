"""v2 session setup: ``session/new``, ``session/resume`` with ``replayFrom``, config options
(the modes among them) and ``auth/login`` / ``auth/logout`` — over the v1 handlers.

``session/resume``:

- no ``replayFrom``: v1 ``session/resume`` (nothing replayed);
- ``{"type": "start"}``: v1 ``session/load`` (the stored history, then a live turn's
  updates), translated to v2 like any update;
- ``{"type": "_acpgate_event", "eventId": N}``: the session's events from its event N on
  (``_meta.acpgate.eventId`` of what the client saw), exactly: v1 ``session/resume`` after
  N - 1 — of a live (detached) session from its ring, and from its log in the store where
  the ring no longer reaches; of a session no longer live (on any host sharing the store)
  from its log (``_meta.acpgate.replay``: ``events``).

A v2 agent's child session is no session to resume (refused while its parent is live:
:func:`~.background.refuse_child`). A replay ends with ``replay_complete``; every resume then sends the current
``state_update`` before its answer (with the agent's background list, when it reported
one) — both made once the replay and what the session streamed during it went out, so
the state is the one they end in (a turn's end is never behind it). Results carry ``configOptions`` (with the agent's
modes as a ``category: "mode"`` option), never ``modes``.
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.config import is_mode_option
from services.common.acp.v2.names import (
    MODE_CONFIG_ID,
    MSG_BAD_REPLAY,
    REPLAY_ACPGATE_EVENT,
    REPLAY_START,
    STATE_IDLE,
    STATE_RUNNING,
    U2_REPLAY_COMPLETE,
)
from services.common.acp.v2.requests import BadV2Params, setup_params_v1
from services.common.jsonrpc import Answered, JsonRpcError
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    INVALID_PARAMS,
    M_LOGOUT,
    META_ACPGATE,
    META_AFTER_EVENT_ID,
    META_WORKSPACE_DIR,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers import agent_calls, modes, new, restore
from services.edge.dialect.v2 import background
from services.edge.params import session_id
from services.edge.sessions.feed import event_id_of

__all__ = ["auth_login", "auth_logout", "session_new", "session_resume",
           "session_set_config_option"]


def _v1_params(params: dict[str, Any]) -> dict[str, Any]:
    try:
        return setup_params_v1(params)
    except BadV2Params as exc:
        raise JsonRpcError(INVALID_PARAMS, str(exc)) from None


def _setup_result(conn: DialectConnection, sid: str, v1: dict[str, Any], *,
                  with_id: bool) -> dict[str, Any]:
    """A v1 setup result in v2 shape; the session's translator learns its modes and options."""
    assert conn.wire is not None
    translator = conn.wire.session(sid)
    translator.modes = v1.get("modes")
    translator.config_options = v1.get("configOptions")
    out: dict[str, Any] = {"sessionId": sid} if with_id else {}
    out["configOptions"] = translator.config_options_v2()
    if isinstance(v1.get("availableCommands"), list):  # a v2 agent's, as it gave them
        out["availableCommands"] = v1["availableCommands"]
    meta = v1.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    if isinstance(v1.get("workspaceDir"), str):  # the built-in agent's, at the top in v1
        ours = meta.get(META_ACPGATE)
        meta[META_ACPGATE] = {**(ours if isinstance(ours, dict) else {}),
                              META_WORKSPACE_DIR: v1["workspaceDir"]}
    if meta:
        out["_meta"] = meta
    return out


async def session_new(conn: DialectConnection, params: dict[str, Any]) -> Answered:
    """v2 ``session/new``: v1's, with v2 MCP entries and a v2 result (the session's updates
    still follow the answer)."""
    out = await new.session_new(conn, _v1_params(params))
    return Answered(_setup_result(conn, out.result["sessionId"], out.result, with_id=True),
                    out.then)


def _replay_kind(params: dict[str, Any]) -> tuple[str | None, int | None]:
    """The ``replayFrom`` type (None: no replay) and, for acpgate's cursor, its event id."""
    cursor = params.get("replayFrom")
    if cursor is None:
        return None, None
    kind = cursor.get("type") if isinstance(cursor, dict) else None
    if kind == REPLAY_START:
        return kind, None
    if kind == REPLAY_ACPGATE_EVENT:
        event = event_id_of(cursor.get("eventId"))
        if event is not None and event > 0:
            return kind, event
    raise JsonRpcError(INVALID_PARAMS, MSG_BAD_REPLAY)


async def session_resume(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """v2 ``session/resume`` (module doc)."""
    wire = conn.wire
    assert wire is not None
    sid = session_id(params)
    background.refuse_child(conn, sid)
    kind, event = _replay_kind(params)
    v1 = _v1_params(params)
    replayed = ""

    def tail() -> list[str]:
        """``replay_complete`` (after a replay) and the current state, made once the replay
        and what the session streamed during it went out: the state is the one they end in."""
        session = conn.sessions.get(sid)
        translator = wire.session(sid)
        translator.foreground = STATE_RUNNING if session is not None \
            and session.turn is not None else STATE_IDLE
        if session is not None and session.work.background is not None:
            translator.background = session.work.background  # the agent's list, now
        done = [{"sessionUpdate": U2_REPLAY_COMPLETE}] if replayed else []
        return wire.updates(sid, [*done, translator.snapshot()])

    if kind == REPLAY_ACPGATE_EVENT and event is not None:
        meta = v1.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        ours = meta.get(META_ACPGATE)
        meta[META_ACPGATE] = {**(ours if isinstance(ours, dict) else {}),
                              META_AFTER_EVENT_ID: event - 1}  # the cursor is inclusive
        v1["_meta"] = meta
        replayed = "events"
        out = await restore.session_resume(conn, v1, then=tail)
    elif kind is not None:
        replayed = "full"
        out = await restore.session_load(conn, v1, then=tail)
    else:
        out = await restore.session_resume(conn, v1, then=tail)
    result = _setup_result(conn, sid, out, with_id=False)
    if replayed:
        meta = result.setdefault("_meta", {})
        meta[META_ACPGATE] = {**meta.get(META_ACPGATE, {}), "replay": replayed}
    return result


async def session_set_config_option(conn: DialectConnection,
                                    params: dict[str, Any]) -> dict[str, Any]:
    """v2 ``session/set_config_option``: the mode option acpgate made of the agent's modes
    is the agent's v1 ``session/set_mode``; any other option its own."""
    wire = conn.wire
    assert wire is not None
    sid = session_id(params)
    conn.active_session(sid)  # before its translator is made: a client names any id
    translator = wire.session(sid)
    value = params.get("value")
    ours = isinstance(translator.modes, dict) and not any(
        is_mode_option(o) for o in (translator.config_options or ()) if isinstance(o, dict))
    if params.get("configId") == MODE_CONFIG_ID and ours:
        if not isinstance(value, str):
            raise JsonRpcError(INVALID_PARAMS, "value must be a mode id")
        await modes.session_set_mode(conn, {"sessionId": sid, "modeId": value})
        translator.set_mode(value)
        return {"configOptions": translator.config_options_v2()}
    v1 = {k: v for k, v in params.items() if not (k == "type" and v == "id")}
    out = await modes.session_set_config_option(conn, v1)
    if isinstance(out, dict) and isinstance(out.get("configOptions"), list):
        translator.config_options = out["configOptions"]
    return {"configOptions": translator.config_options_v2()}


async def auth_login(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """v2 ``auth/login``: v1 ``authenticate`` with the method id, on the default agent."""
    method_id = params.get("methodId")
    if not isinstance(method_id, str) or not method_id:
        raise JsonRpcError(INVALID_PARAMS, "methodId is required")
    out = await agent_calls.authenticate(conn, params)
    return out if isinstance(out, dict) else {}


async def auth_logout(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """v2 ``auth/logout``: the default agent's v1 ``logout`` (the built-in agent has no
    login to end)."""
    agent = await agent_calls.default_agent(conn)
    if agent.kind == AGENT_KIND_BUILTIN:
        return {}
    out = await agent_calls.connection_call(conn, M_LOGOUT, params, False)
    return out if isinstance(out, dict) else {}
