"""SPEC §4 and §7: ``session/prompt``, ``session/cancel``, ``session/stop``, ``session/close``,
and ACP ``$/cancel_request`` of a pending ``session/prompt`` (a turn cancel).

The handlers decide whether a request may run; the :class:`EdgeSession` runs
the turn, applies the cancel and is released through the runtime. The prompt
goes to the built-in agent as SPEC §4 text, to an external adapter as the
client's ContentBlocks it can take (:mod:`services.edge.adapter.prompt_blocks`), with
the client's other params as they came (its ``_meta``, fields of later ACP
versions; never ``_meta.acpgate``). The result is the built-in agent's dialect
or the external agent's result whole (:mod:`services.edge.sessions.prompt_result`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.attach_protocol import U_PROMPT_RECEIVED
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    M_SESSION_CANCEL,
    M_SESSION_CLOSE,
    M_SESSION_PROMPT,
    META_PROMPT_QUEUEING,
    MSG_SESSION_BUSY,
    SESSION_BUSY,
)
from services.edge.adapter.prompt_blocks import adapter_prompt, spec4_prompt
from services.edge.dialect.dispatch import DialectConnection
from services.edge.errors import not_found
from services.edge.params import passed_params, session_id
from services.edge.sessions.clients import report_turn_end, turn_complete
from services.edge.sessions.prompt_result import TurnOutcome, client_result
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.turn import Turn


def queues_prompts(session: EdgeSession) -> bool:
    """Whether the session's agent advertised that it queues a prompt sent while a turn runs
    (claude-agent-acp's ``agentCapabilities._meta.claudeCode.promptQueueing``): acpgate then
    queues it too (it runs once the turn ends) instead of answering -32002."""
    adapter = session.adapter
    if adapter is None or adapter.builtin:
        return False
    meta = adapter.agent_capabilities.meta or {}
    vendor = meta.get(META_PROMPT_QUEUEING[0])
    return isinstance(vendor, dict) and vendor.get(META_PROMPT_QUEUEING[1]) is True


#: The params of session/prompt acpgate reads itself (the rest passes to an external agent).
_OWN_PROMPT_KEYS = frozenset({"sessionId", "session_id", "prompt"})


async def session_prompt(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §4: id, active, busy (slot before blobs), prompt, then the turn."""
    running = await start_turn(conn, params)
    return client_result(session_id(params), await asyncio.shield(running))


async def start_turn(conn: DialectConnection, params: dict[str, Any], *, queue: bool = False,
                     message_id: str = "") -> asyncio.Task[TurnOutcome]:
    """Reserve the session's turn (waiting for the running one when ``queue`` or the agent
    queues prompts; else -32002 while one runs), tell the session's other clients what was
    asked (as message ``message_id`` when given) and start the turn; returns its task."""
    sid = session_id(params)
    session = conn.active_session(sid)
    turn = session.reserve_turn()
    while turn is None and (queue or queues_prompts(session)):  # as the agent would: after
        await session.wait_turn()
        conn.still_served()  # a revoked token's queued prompt never runs
        session = conn.active_session(sid)
        turn = session.reserve_turn()
    if turn is None:
        raise JsonRpcError(SESSION_BUSY, MSG_SESSION_BUSY.format(session_id=sid))
    # The session's other clients see what was asked before the answer streams (attach RFD).
    echo = {"sessionUpdate": U_PROMPT_RECEIVED, "prompt": params.get("prompt"),
            "sentBy": session.clients.info_of(conn)}
    if message_id:
        echo["messageId"] = message_id
    await session.publish_own([echo], not_for=conn)
    # The turn runs in a task of its own: a connection that goes away (its handlers
    # cancelled) leaves it running when the session detaches; a release
    # cancels the turn itself (EdgeRuntime.release).
    running = conn.runtime.spawn(_turn(conn, session, turn, params))
    running.add_done_callback(_seen)  # its failure is the handler's, if one still waits
    return running


def _seen(task: asyncio.Task[TurnOutcome]) -> None:
    """Mark a turn task's failure retrieved: the handler that would have answered it with
    the failure may be gone (its connection closed), the turn's end is not an error then."""
    if not task.cancelled():
        task.exception()


async def _turn(conn: DialectConnection, session: EdgeSession, turn: Turn,
                params: dict[str, Any]) -> TurnOutcome:
    """Read the prompt and run the turn (:func:`session_prompt`); the slot is freed after,
    and a client attached since (not ``conn``) is told the turn ended."""
    outcome = await _run(session, turn, params)
    await report_turn_end(session, conn, turn_complete(outcome.stop_reason, outcome.result))
    return outcome


async def _run(session: EdgeSession, turn: Turn, params: dict[str, Any]) -> TurnOutcome:
    try:
        adapter = session.adapter
        raw = params.get("prompt")
        if adapter is None or adapter.builtin:
            prompt = await spec4_prompt(raw, session.workspace_dir)
        else:
            prompt = await adapter_prompt(raw, adapter.agent_capabilities.prompt_capabilities,
                                          session.workspace_dir)
        return await session.run_turn(turn, prompt, passed_params(params, _OWN_PROMPT_KEYS))
    finally:
        session.release_turn(turn)


async def session_cancel(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §7: interrupt the running turn; idle or unknown → {}."""
    sid = session_id(params)  # a request without one is -32602 (§1); notifications: silence
    session = conn.sessions.get(sid)
    if session is not None:
        session.touch()
        session.cancel(asked_by=M_SESSION_CANCEL)
    return {}


async def cancel_request(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """ACP ``$/cancel_request``: a pending ``session/prompt`` is cancelled like
    ``session/cancel`` (it then answers ``stopReason: cancelled``); other requests run on
    (the protocol lets a receiver finish them) and unknown ids are ignored."""
    request_id = params.get("requestId")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return {}
    pending = conn.rpc.serving(request_id)
    if pending is None or pending[0] != M_SESSION_PROMPT:
        return {}
    conn.refuse_observer(M_SESSION_CANCEL, pending[1])  # as a session/cancel would be
    return await session_cancel(conn, pending[1])


async def session_stop(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §7: leave the active set now, let the turn finish, release."""
    sid = session_id(params)
    session = conn.active_session(sid)
    conn.runtime.remove(session)
    conn.forget_session(sid, session)
    await session.wait_turn()
    await conn.runtime.release(session, "stop")
    return {"sessionId": sid, "stopped": True}


async def session_close(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §7: cancel the turn, leave the active set, wait, release.

    Without a store (SPEC §2's in-memory fallback) every close is SESSION_NOT_FOUND, active
    session or not, and nothing is touched: the seed lists close with load and resume
    there. Close deactivates a session *to its stored record*, and there is none to keep
    or come back to; the capability is not advertised, and ``session/stop`` ends an
    in-memory session.
    """
    sid = session_id(params)
    if not conn.runtime.persistent:
        raise not_found(sid)
    session = conn.active_session(sid)
    conn.runtime.remove(session)
    conn.forget_session(sid, session)
    session.cancel(asked_by=M_SESSION_CLOSE)
    await session.wait_turn()
    await conn.runtime.release(session, "close")
    return {}
