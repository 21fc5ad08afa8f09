"""The edge's session runner: the turns of ``sessions_spawn`` and ``sessions_send``.

The session service decides (SpawnSession: the child's agent, workspace,
capped policy and ownership; SendToSession: whether the requester may send);
this module executes, with the same steps a client's session/new, session/resume
and session/prompt take:

- **spawn**: a slot against ``max_sessions`` and the requester's principal's
  share (a child belongs to its root's token), the row from SpawnSession, a lease
  and the child's adapter (``session/new`` with the decided policy), the child
  entered active in the requester's :class:`~services.edge.sessions.hosted_port.HostedPort`,
  then its first turn;
- **send**: the target as it runs now — on a client's connection, or hosted —
  or, when it runs nowhere, restored (``session/resume`` seeded with the stored
  conversation) into the requester's HostedPort; then the turn.

A turn is the ordinary :meth:`EdgeSession.run_turn` (streamed, stored in one
AppendTurn when it completes) with ``requested_by`` = the requester, so a
cancel of the requester cancels it. ``wait: false`` runs it in the background
(a runtime task) and answers at once.

Autonomy: a sent turn runs at most at the sender's level — the cap
SendToSession answers, carried in ``Turn.autonomy_cap`` to the built-in
agent; a spawned child's policy is capped by SpawnSession itself. Both calls
pass the requester's own turn cap, when another session started the turn it
runs, so that cap carries on down a chain of sends.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import (
    INTERNAL_ERROR,
    MSG_REQUESTER_CANCELLED,
    MSG_SESSION_BUSY,
    SESSION_BUSY,
    STOP_CANCELLED,
)
from services.edge.adapter.failures import setup_error
from services.edge.adapter.prompt_blocks import AdapterPrompt
from services.edge.backends.errors import ServiceError
from services.edge.dialect.handlers.restore import restore
from services.edge.errors import cause, service_error
from services.edge.sessions.hosted_port import hosted_port
from services.edge.sessions.prompt_result import TurnOutcome
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.session_setup import (
    creating,
    mark_active,
    reserved_slot,
    setting_up,
    spawn_adapter,
)
from services.edge.sessions.turn import Turn

__all__ = ["SpawnArgs", "send", "spawn"]

log = get_logger("edge.a2a")


@dataclass(frozen=True)
class SpawnArgs:
    """What ``sessions_spawn`` asked for."""

    agent: str
    prompt: str
    cwd: str = ""
    label: str = ""
    wait: bool = True


async def spawn(requester: EdgeSession, args: SpawnArgs) -> dict[str, Any]:
    """A child session of ``args.agent`` for ``requester``, and its first turn."""
    rt = requester.runtime
    home = hosted_port(requester)
    sid = str(uuid.uuid4())
    async with reserved_slot(rt, requester.principal), creating(rt.registry, sid):
        try:
            got = await rt.session_service.spawn_session(
                requester.store_key, sid, agent_alias=args.agent, cwd=args.cwd,
                label=args.label, gateway_instance_id=rt.gateway_instance_id,
                host=rt.claims.host, public_url=rt.claims.public_url,
                requester_turn_cap=_turn_cap(requester),
                # The child works where the requester does, for the requester's user.
                local_user=not home.remote)
        except ServiceError as exc:
            raise service_error(exc) from None
        except BaseException:  # given up half-way: the row may exist (it stays, inactive)
            rt.spawn(rt.claims.release(sid))
            raise
        rt.claims.held(got.session)  # the generation its writes are fenced by
        child = EdgeSession(rt, home, got.session, rt.clock)
        policy = got.policy
        async with setting_up(home, child):
            client = await spawn_adapter(home, child, got.agent, policy)
            try:
                adapter_sid = await client.new_session(got.session.workspace_dir, [], policy)
            except Exception as exc:
                raise setup_error(got.agent.alias, exc, client.secrets) from None
            await mark_active(home, child, adapter_sid)
    log.info("session_spawned", session_id=sid, agent=child.alias,
             parent_session_id=requester.session_id)
    about = {"sessionId": sid, "agent": child.alias, "cwd": child.workspace_dir}
    return await _turn(requester, child, args.prompt, args.wait, about)


async def send(requester: EdgeSession, target_id: str, message: str,
               wait: bool) -> dict[str, Any]:
    """``message`` as a turn of session ``target_id``, if ``requester`` may send to it."""
    rt = requester.runtime
    try:
        sent = await rt.session_service.send_to_session(
            requester.store_key, target_id, requester_turn_cap=_turn_cap(requester))
    except ServiceError as exc:
        raise service_error(exc, target_id) from None  # hidden or missing: "Session not found"
    target = rt.registry.active.get(target_id)
    if target is None:  # it runs nowhere: bring it up for the requester
        await restore(hosted_port(requester), {"sessionId": target_id}, replay=False)
        target = rt.registry.active[target_id]
    about = {"sessionId": target_id, "agent": target.alias}
    return await _turn(requester, target, message, wait, about, sent.autonomy_cap)


def _turn_cap(requester: EdgeSession) -> str:
    """The autonomy cap of the turn ``requester`` runs now ("" = none)."""
    turn = requester.turn
    return turn.autonomy_cap if turn is not None else ""


async def _turn(requester: EdgeSession, target: EdgeSession, text: str, wait: bool,
                about: dict[str, Any], autonomy_cap: str = "") -> dict[str, Any]:
    """Run ``text`` as a turn of ``target`` for ``requester``, at most at ``autonomy_cap``
    ("" = the target's own level); busy → -32002."""
    asking = requester.turn
    if asking is not None and asking.cancelled:  # cancelled while this was being set up
        raise JsonRpcError(INTERNAL_ERROR, MSG_REQUESTER_CANCELLED)
    turn = target.reserve_turn()
    if turn is None:
        raise JsonRpcError(SESSION_BUSY, MSG_SESSION_BUSY.format(session_id=target.session_id))
    turn.requested_by = requester
    turn.autonomy_cap = autonomy_cap
    if not wait:
        requester.runtime.spawn(_background(target, turn, text))
        return {**about, "status": "running"}
    try:
        result = await _run(target, turn, text)
    except JsonRpcError as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"session {target.session_id} ({target.alias}): "
                                           f"{exc.message}") from None
    stop = result.stop_reason
    return {**about, "status": "cancelled" if stop == STOP_CANCELLED else "completed",
            "stopReason": stop, "reply": result.text}


async def _run(target: EdgeSession, turn: Turn, text: str) -> TurnOutcome:
    try:  # a tool's message is plain text: one text block, stored as it is
        return await target.run_turn(turn, AdapterPrompt([{"type": "text", "text": text}], text))
    finally:
        target.release_turn(turn)


async def _background(target: EdgeSession, turn: Turn, text: str) -> None:
    """A ``wait: false`` turn: its outcome is in the store (or the log), nobody awaits it."""
    try:
        result = await _run(target, turn, text)
        log.info("background_turn_done", session_id=target.session_id,
                 stop_reason=result.stop_reason)
    except Exception as exc:
        log.warning("background_turn_failed", session_id=target.session_id, why=cause(exc))
