"""v2 ``session/prompt``: acknowledged at once, the turn reported as ``state_update`` s.

The prompt is answered with its ``messageId`` as soon as acpgate accepted it; before
that answer the client gets ``state_update running`` and its own message echoed
(``user_message_chunk`` s with that id). The turn runs as a v1 turn (a prompt sent
while one runs waits for it: v2 lets an agent take a prompt at any time); when it
ends the client gets an idle ``state_update`` with the stop reason and the usage —
or ``stopReason: "error"`` with the error the v1 prompt would have answered.

``idempotencyKey``: a prompt whose key this session saw already is not run again; it
is answered with the first one's ``messageId``. The keys live with the live session in
the edge's memory (the newest :data:`MAX_KEYS` of each, none longer than
:data:`MAX_KEY_CHARS`): a retry after a reconnect to the same edge is recognised, one
after the session was released or the edge restarted is not.

A prompt is answered before its turn runs, so nothing else bounds what waits: past
:data:`MAX_WAITING` prompts accepted and not yet ended, a session's next one is -32002.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import OrderedDict
from typing import Any

from services.common.acp.v2.names import (
    MSG_LONG_IDEMPOTENCY_KEY,
    MSG_PROMPTS_WAITING,
    STATE_RUNNING,
)
from services.common.acp.v2.updates import new_message_id
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS, SESSION_BUSY
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.turns import start_turn
from services.edge.params import session_id
from services.edge.sessions.session import EdgeSession

__all__ = ["MAX_KEYS", "session_prompt"]

#: The idempotency keys remembered per live session.
MAX_KEYS = 256
#: The longest idempotency key (a client's retry token: a UUID is 36).
MAX_KEY_CHARS = 256
#: The prompts of one session accepted and not yet ended (the running one among them).
MAX_WAITING = 64
#: Live session → its idempotency keys (key → the prompt's message id).
_KEYS: weakref.WeakKeyDictionary[EdgeSession, OrderedDict[str, str]] = \
    weakref.WeakKeyDictionary()
#: Live session → how many of its prompts were accepted and have not ended.
_WAITING: weakref.WeakKeyDictionary[EdgeSession, int] = weakref.WeakKeyDictionary()


def _keep_key(session: EdgeSession, key: str, message_id: str) -> None:
    """Remember that ``key``'s prompt is message ``message_id`` (the newest keys only)."""
    keys = _KEYS.setdefault(session, OrderedDict())
    keys[key] = message_id
    while len(keys) > MAX_KEYS:
        keys.popitem(last=False)


def _ended(session: EdgeSession) -> None:
    """One of ``session``'s accepted prompts ended (its task is done, however)."""
    _WAITING[session] = _WAITING.get(session, 1) - 1


async def session_prompt(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """v2 ``session/prompt`` (module doc)."""
    wire = conn.wire
    assert wire is not None  # only a v2 connection's table has this handler
    sid = session_id(params)
    session = conn.active_session(sid)
    if not isinstance(params.get("prompt"), list):
        raise JsonRpcError(INVALID_PARAMS, "prompt must be an array of content blocks")
    message_id = new_message_id()
    key = params.get("idempotencyKey")
    if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
        raise JsonRpcError(INVALID_PARAMS, MSG_LONG_IDEMPOTENCY_KEY.format(max=MAX_KEY_CHARS))
    key = key if isinstance(key, str) and key else None
    earlier = _KEYS[session].get(key) if key is not None and session in _KEYS else None
    if earlier is not None:
        return {"messageId": earlier}
    if _WAITING.get(session, 0) >= MAX_WAITING:  # refused: its key is not kept
        raise JsonRpcError(SESSION_BUSY, MSG_PROMPTS_WAITING.format(session_id=sid,
                                                                    max=MAX_WAITING))
    if key is not None:
        _keep_key(session, key, message_id)
    _WAITING[session] = _WAITING.get(session, 0) + 1  # counted before the first await
    translator = wire.session(sid)
    try:
        await conn.send_many(wire.updates(sid, [*translator.state(STATE_RUNNING),
                                                *translator.user_message(params["prompt"],
                                                                         message_id)]))
    except BaseException:  # not accepted after all: a retry with its key is a new prompt
        _ended(session)
        keys = _KEYS.get(session)
        if key is not None and keys is not None and keys.get(key) == message_id:
            del keys[key]
        raise
    v1 = {k: v for k, v in params.items() if k != "idempotencyKey"}
    # Accepted: the turn runs (after the running one) in a task of its own.
    conn.runtime.spawn(_run(conn, sid, v1, message_id)).add_done_callback(
        lambda _: _ended(session))
    return {"messageId": message_id}


async def _run(conn: DialectConnection, sid: str, params: dict[str, Any],
               message_id: str) -> None:
    """Run the turn (after the running one) and report its end to the client."""
    wire = conn.wire
    assert wire is not None
    translator = wire.session(sid)
    error: dict[str, Any] | None = None
    result: Any = None
    stop = "end_turn"
    cancelled = False
    try:
        task = await start_turn(conn, params, queue=True, message_id=message_id)
        outcome = await asyncio.shield(task)
        stop, result = outcome.stop_reason, outcome.result
    except JsonRpcError as exc:
        error = {"code": exc.code, "message": exc.message}
    except asyncio.CancelledError:  # the session was released under the turn
        stop, cancelled = "cancelled", True
    with contextlib.suppress(ConnectionError, OSError):
        await conn.send_many(wire.updates(sid, translator.idle(stop, result, error)))
    if cancelled:
        raise asyncio.CancelledError
