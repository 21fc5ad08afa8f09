"""SPEC §8: ``session/load`` and ``session/resume`` — a stored session on a fresh adapter.

:func:`restore` runs the steps in order: reserve a slot → read the row, if this
connection may see it (a session it may not see is "not found", active or not;
a child session an agent runs is refused naming its parent, which is what
restores it), and count the slot against the principal it belongs to → check the MCP servers
it would start (the list the request passes, else the stored one;
:mod:`services.edge.dialect.mcp_admission`) → mark the id as being restored here (no
second restore of it may race this one) → resolve the agent, the session's
extra roots and its policy → take the session's claim for this host (another
live host serving it: "Session already active") → spawn the adapter →
seed the adapter with the conversation and those MCP servers → set the stored
mode and config values again → replay (load) or send the stored plan (resume)
→ mark the session active (storing a newly passed MCP list and extra roots). A
step that fails answers the request with its error and gives back what the
earlier steps took. The result is the adapter's own, whole, with its ``modes``,
``configOptions`` and ``models`` as they are after the re-apply
(:func:`services.edge.sessions.prompt_result.setup_result`).

``session/resume`` of a session this very connection holds already is answered
at once with the session's current state (what an agent answers a resume of a
session it has open); anyone else's still gets "Session already
active", and a ``session/load`` always does.

The history is never held whole: seeding and replay each read the
stored pages (``StreamHistory``) one at a time and pass each one on before the
next is read — to the agent, answered chunk by chunk; to the client, through its
bounded send queue (:mod:`services.edge.sessions.history_wire`).

``additionalDirectories`` in the request replace the stored ones (resolved by
the same rules as on session/new); without them the stored ones apply. Nothing
is written to the row before this host holds its claim.

Seeding depends on the agent: the built-in agent is resumed with
``_meta.acpgate.historyFollows`` and gets the history in ``_acpgate/history_append``
chunks; an external agent restores its own session when it can (same agent,
advertised resume/load); otherwise a fresh adapter session is opened and the
newest part of the transcript is carried over into its first prompt.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from services.common.attach_protocol import HISTORY_AFTER_MESSAGE, HISTORY_FULL, ROLE_CONTROLLER
from services.common.jsonrpc import JsonRpcError, notification_line
from services.common.mcp_policy import ClientMcpRules
from services.common.policy import SecurityPolicy
from services.common.principals import principal_of_owner
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    M_SESSION_LOAD,
    M_SESSION_RESUME,
    M_SESSION_UPDATE,
    META_ACPGATE,
    META_AFTER_EVENT_ID,
    META_PARENT_SESSION_ID,
    MSG_INTERNAL_ERROR,
    MSG_SESSION_ALREADY_ACTIVE,
    MSG_SUBAGENT_RESTORE,
    U_PLAN,
    session_key_for,
)
from services.edge.adapter.client import AdapterClient
from services.edge.adapter.failures import restore_error
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import ResolvedAgent, SessionRow
from services.edge.dialect.a2a.views import session_id_of_key
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.elsewhere import with_live_at
from services.edge.dialect.handlers.param_checks import check_restore
from services.edge.dialect.mcp_admission import admitted_servers, client_mcp_rules
from services.edge.dialect.visibility import visible_row
from services.edge.errors import not_found, service_error
from services.edge.params import (
    additional_directories,
    client_cwd,
    encode_mcp_servers,
    passed_params,
    restore_mcp_servers,
    session_id,
)
from services.edge.sessions.clients import DetachedPort, leave
from services.edge.sessions.feed import event_id_of
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.joining import HISTORY_LIVE, join
from services.edge.sessions.log_replay import replay_log
from services.edge.sessions.prompt_result import setup_result
from services.edge.sessions.registry import SessionRegistry
from services.edge.sessions.seeding import (
    carry_over,
    restore_external,
    resume_builtin,
)
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.session_setup import (
    SessionHome,
    mark_active,
    reserved_slot,
    session_policy,
    setting_up,
    spawn_adapter,
)
from services.edge.sessions.session_state import reapply

#: What makes the lines that end a restore's replay (:func:`restore`).
Then = Callable[[], list[str]]

#: The params of session/load and resume acpgate reads itself (the rest passes to an
#: external agent that restores its own session, or opens a fresh one).
_OWN_RESTORE_KEYS = frozenset({"sessionId", "session_id", "cwd", "workspaceDir",
                               "workspace_dir", "mcpServers", "additionalDirectories"})


async def session_load(conn: DialectConnection, params: dict[str, Any], *,
                       then: Then | None = None) -> dict[str, Any]:
    """SPEC §8: restore and replay the stored history (``then``: :func:`restore`)."""
    return await restore(conn, params, replay=True, then=then)


async def session_resume(conn: DialectConnection, params: dict[str, Any], *,
                         then: Then | None = None) -> dict[str, Any]:
    """SPEC §8: restore; replay only the stored plan (``then``: :func:`restore`)."""
    return await restore(conn, params, replay=False, then=then)


async def restore(conn: SessionHome, params: dict[str, Any], *,
                  replay: bool, then: Then | None = None) -> dict[str, Any]:
    """Bring stored session ``params.sessionId`` back on this connection (steps: module doc).
    ``then`` makes lines sent before the answer, after the replay and whatever the session
    streamed before them (made at that point, so they may say the session's state)."""
    rt = conn.runtime
    sid = session_id(params)
    client_cwd(params, remote=conn.remote)  # not used (SPEC §8), but checked like any
    if not rt.persistent:
        raise not_found(sid)
    mine = conn.sessions.get(sid)
    if not replay and mine is not None and not mine.released \
            and rt.registry.active.get(sid) is mine and mine.adapter is not None:
        mine.touch()
        await _send_then(conn, then)
        return setup_result(mine.adapter.setup_result, mine.state.result_fields(),
                            builtin=mine.adapter.builtin,
                            restored_id=sid if mine.adapter.restored_itself else "")
    live = rt.registry.active.get(sid)
    if live is not None and isinstance(conn, DialectConnection) \
            and isinstance(live.port, DetachedPort) and live.principal == conn.caller.principal:
        return await _reattach(conn, live, params, replay=replay, then=then)
    extra = additional_directories(params)
    checks = (lambda: check_restore(conn, sid, extra)) if isinstance(conn, DialectConnection) \
        else None
    async with reserved_slot(rt, conn.caller.principal, explain=conn.remote,
                             validate=checks) as slot:
        row = await visible_row(rt, conn.caller, sid)
        if row.subagent:
            raise subagent_refused(row)
        # The operator may restore any principal's session: it counts against that one.
        await slot.charge(principal_of_owner(row.ownership.owner_session_key))
        client_mcp = client_mcp_rules(conn)
        mcp, passed = restore_mcp_servers(params, row.mcp_servers_json)
        # A stored list is checked like a passed one: it may come from the local user, or
        # from a time the gateway allowed more. Refused: nothing was taken yet.
        mcp = await admitted_servers(client_mcp, mcp, stored=not passed)
        with _restoring(rt.registry, sid):
            agent, row = await _resolve_agent(rt, row, extra, local_user=not conn.remote)
            policy = await _policy(rt, agent, row, local_user=not conn.remote)
            try:
                await rt.claims.claim(sid)
            except JsonRpcError as exc:  # live elsewhere: say where
                raise await with_live_at(conn, sid, exc) from None
            session = _restored_session(conn, row, agent)
            async with setting_up(conn, session):  # a failure from here drops the claim too
                # The agent's own updates meanwhile (its commands, a mode set again) are new
                # events: they follow the replay of the older ones.
                session.clients.hold()
                client = await spawn_adapter(conn, session, agent, policy)
                adapter_sid = await _seed(session, client, row, agent, policy, mcp, client_mcp,
                                          passed_params(params, _OWN_RESTORE_KEYS),
                                          M_SESSION_LOAD if replay else M_SESSION_RESUME)
                session.state.on_setup(client.setup_result)
                await reapply(session.state, client, row)
                if replay:
                    await replay_history(conn, session, fresh=True)
                elif (after := _named_after(params)) is not None:  # from the log
                    await replay_log(conn.send_many, session, after=after,
                                     before=session.feed.first_id, with_history=False)
                else:
                    await _replay_plan(conn, sid, row)
                await session.clients.release_held()
                await mark_active(
                    conn, session, adapter_sid,
                    agent.alias if agent.alias != row.agent_alias else None,
                    mcp_servers_json=encode_mcp_servers(mcp) if passed else None,
                    additional_directories=row.additional_directories if extra is not None
                    else None)
    await _send_then(conn, then)
    return setup_result(client.setup_result, session.state.result_fields(),
                        builtin=client.builtin, restored_id=sid if client.restored_itself else "")


async def _reattach(conn: DialectConnection, session: EdgeSession, params: dict[str, Any], *,
                    replay: bool, then: Then | None) -> dict[str, Any]:
    """Attach a detached session of the caller's own principal to ``conn`` as its controller:
    ``session/load`` replays the stored history and the live turn's updates;
    ``session/resume`` what the connection that left was not handed (after
    ``_meta.acpgate.afterEventId``, when the client names the last update it saw) — then
    what it streams from now on (:func:`services.edge.sessions.joining.join`)."""
    sid = session.session_id
    adapter = session.adapter
    detached = session.port
    if adapter is None or not isinstance(detached, DetachedPort):
        raise not_found(sid)
    conn.sessions[sid] = session
    try:
        if replay:
            await join(session, conn, role=ROLE_CONTROLLER, policy=HISTORY_FULL,
                       send_history=lambda: replay_history(conn, session), then=then)
        else:
            await join(session, conn, role=ROLE_CONTROLLER, policy=HISTORY_AFTER_MESSAGE,
                       after=_after_event(params, detached.delivered), fallback=HISTORY_LIVE,
                       then=then)
    except BaseException:
        conn.forget_session(sid)
        leave(session, conn, grace_secs=conn.detach_grace_secs)
        raise
    if conn.input_ended:
        raise JsonRpcError(INTERNAL_ERROR, MSG_INTERNAL_ERROR)  # nobody to answer
    return setup_result(adapter.setup_result, session.state.result_fields(),
                        builtin=adapter.builtin,
                        restored_id=sid if adapter.restored_itself else "")


async def _send_then(conn: SessionHome, then: Then | None) -> None:
    """Send what ``then`` makes now (the session's own updates go to this connection
    directly, in order)."""
    if then is not None and (lines := then()):
        await conn.send_many(lines)


def subagent_refused(row: SessionRow, message: str = MSG_SUBAGENT_RESTORE) -> JsonRpcError:
    """The answer to a restore (or, with ``message``, a fork) of a child session an agent
    runs: it has no agent session of its own (a fresh adapter would give an empty session),
    so its parent is named."""
    parent = session_id_of_key(row.ownership.parent_session_key)
    return JsonRpcError(INVALID_PARAMS, message.format(
        session_id=row.session_id, parent=parent), {META_PARENT_SESSION_ID: parent})


def _after_event(params: dict[str, Any], delivered: int) -> int:
    """The event id a resume replays after: the client's ``_meta.acpgate.afterEventId``, else
    the newest one handed to the connection that left."""
    named = _named_after(params)
    return named if named is not None else delivered


def _named_after(params: dict[str, Any]) -> int | None:
    """The client's ``_meta.acpgate.afterEventId``, if it named one."""
    meta = params.get("_meta")
    ours = meta.get(META_ACPGATE) if isinstance(meta, dict) else None
    return event_id_of(ours.get(META_AFTER_EVENT_ID)) if isinstance(ours, dict) else None


# ---------------------------------------------------------------------- steps


@contextlib.contextmanager
def _restoring(registry: SessionRegistry, sid: str) -> Iterator[None]:
    """Mark ``sid`` as being restored; -32602 if it is active or being restored already."""
    if sid in registry.active or sid in registry.restoring:
        raise JsonRpcError(INVALID_PARAMS, MSG_SESSION_ALREADY_ACTIVE.format(session_id=sid))
    registry.restoring.add(sid)
    try:
        yield
    finally:
        registry.restoring.discard(sid)


async def _resolve_agent(rt: EdgeHub[EdgeSession], row: SessionRow, extra: list[str] | None,
                         *, local_user: bool,
                         ) -> tuple[ResolvedAgent, SessionRow]:
    """The agent the session is restored onto (its own, or the fallback), and the row as the
    restore uses it: with the request's additional directories, if it gave any (resolved
    here, under the local user's rule when ``local_user``; stored only once the session is
    active on this host)."""
    sid = row.session_id
    try:
        agent = await rt.session_service.resolve_restore_agent(sid)
        if extra is not None:
            ws = await rt.session_service.resolve_workspace(
                agent.alias, row.workspace_dir, additional_directories=extra,
                local_user=local_user)
            row = dataclasses.replace(row, additional_directories=ws.additional_directories)
    except ServiceError as exc:
        if exc.kind is Failure.INVALID:
            raise service_error(exc) from None  # an unusable directory: say which
        raise service_error(exc, sid) from None
    return agent, row


async def _policy(rt: EdgeHub[EdgeSession], agent: ResolvedAgent,
                  row: SessionRow, *, local_user: bool) -> SecurityPolicy:
    """The restored session's policy: its workspace and its extra roots; with its id, so a
    spawned session comes back no freer than its parent."""
    try:
        return await session_policy(rt, agent.alias, row.workspace_dir,
                                    row.additional_directories, row.session_id,
                                    local_user=local_user)
    except ServiceError as exc:
        raise service_error(exc, row.session_id) from None


def _restored_session(conn: SessionHome, row: SessionRow,
                      agent: ResolvedAgent) -> EdgeSession:
    """The edge session for ``row``; restored onto another agent, it gets a new key."""
    session = EdgeSession(conn.runtime, conn, row, conn.runtime.clock)
    session.alias = agent.alias
    if agent.alias != row.agent_alias:
        session.session_key = session_key_for(agent.alias, row.session_id)
    return session


async def _seed(session: EdgeSession, client: AdapterClient,
                row: SessionRow, agent: ResolvedAgent,
                policy: SecurityPolicy, mcp: list[Any], client_mcp: ClientMcpRules,
                extra: dict[str, Any], method: str) -> str:
    """Give the adapter the conversation (an external one: with ``extra``, the client's
    other params); returns the adapter's session id.

    An adapter's error is passed on exactly (``data.acpgate.during``: the client's
    ``method``); another failure answers "Failed to restore session: <cause>".
    """
    try:
        if agent.kind == AGENT_KIND_BUILTIN:
            return await resume_builtin(session.runtime, client, row, policy, mcp, client_mcp)
        if agent.alias == row.agent_alias and await restore_external(client, row, mcp, extra):
            return row.adapter_session_id
        return await carry_over(session.runtime, session, client, row, policy, mcp, extra)
    except Exception as exc:
        raise restore_error(exc, client.secrets, agent.alias, method) from None


async def replay_history(conn: SessionHome, session: EdgeSession, *,
                         fresh: bool = False) -> None:
    """session/load: what the session's clients saw, in order, from its event log (and the
    history stored before the log began), read and sent page by page (the client's send
    queue paces the reading); ``fresh``: a session restored just now, whose own updates
    went out live. A log that cannot be read gives the session up."""
    feed = session.feed
    # A live session's replay stops where its attachment's held-back events begin: the
    # live turn's first event, else the newest event now (what follows is sent live).
    before = feed.first_id if fresh else (feed.live_from or feed.last_id + 1)
    try:
        await replay_log(conn.send_many, session, before=before)
    except (ConnectionError, OSError):
        return  # the client left: setup notices (mark_active) and releases the session


async def _replay_plan(conn: SessionHome, sid: str, row: SessionRow) -> None:
    """session/resume: only the stored plan, if there is a readable one."""
    if not row.plan_json:
        return
    entries = _loads_list(row.plan_json)
    if entries is None:
        return
    update = {"sessionUpdate": U_PLAN, "entries": entries}
    with contextlib.suppress(ConnectionError, OSError):
        await conn.send(notification_line(M_SESSION_UPDATE, {"sessionId": sid, "update": update}))


def _loads_list(text: str) -> list[Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None
