"""An edge that starts takes up the sessions its dead predecessor served.

``acpgate serve`` restarts an edge worker that dies (``kill -9``, a crash). Its
sessions' adapters did not die with it: their leases were opened with
``keep_on_loss`` (services.lifecycle.api.keep_on_loss), so the lifecycle service keeps them and
their pipes for a while, and the session rows still carry this worker's claim (its
name, ``<instance>/w<k>``, is its successor's). At start, before its event log marks a
dead predecessor's running turns interrupted, the new edge lists the live sessions
claimed under its name and re-adopts each (:func:`readopt`):

- takes the claim again (a new generation: whatever the dead process still had in
  flight is fenced off);
- attaches again on the row's lease (``open{lease_id}``) and takes the adapter's pipes
  over the fd socket — a grant only the service credential redeems — or relays over
  the stream; its request ids start above any its predecessor used; a v2 agent's
  translation is set up again, for the version the session's row recorded when its agent
  was started (:func:`adopted_protocol`: an adapter upgraded, or an ``auto`` alias whose
  profile changed meanwhile, does not change what this agent process speaks; a row
  written before versions were recorded falls back to the alias's profile) — the agent
  is not asked ``initialize`` again;
- rebuilds the session from the store (row, agent; a new feed whose event ids, taken
  from the clock, continue above what was logged) and leaves it *detached*, exactly as
  a dropped connection does: its owner re-attaches with ``session/attach``
  (``after_message``: the log replays what the ring of this process never held);
- a turn running when the predecessor died — the store's turn marks say so, committed
  with the turn's first events, where the session service's activity report may lag by
  its tick and a predecessor that stepped down for a hot restart left a note
  (:mod:`services.edge.sessions.running_note`) — runs on
  (:mod:`services.edge.sessions.adopted_turn`): the agent's answer to the lost
  ``session/prompt`` ends it — logged, stored, and told to the clients as
  ``turn_complete``; a permission request or an elicitation of it still open is asked
  again.

A session that cannot be re-adopted (its lease gone, the agent exited) has its running
turns marked interrupted and its claim dropped: it is stored but not running.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from services.common.acp.schema import ClientCapabilities
from services.common.acp.v2.names import PROTOCOL_V2
from services.common.logs import get_logger
from services.common.protocol import PROTOCOL_VERSION
from services.edge.adapter.agent_meta import foreign
from services.edge.adapter.caps import recorded_capabilities, recorded_version
from services.edge.adapter.client import SETUP_TIMEOUT_SECS, AdapterClient
from services.edge.adapter.link import AdapterLink
from services.edge.backends.errors import ServiceError
from services.edge.backends.lifecycle import AttachSpec
from services.edge.backends.session_types import LiveSession, ResolvedAgent, SessionRow
from services.edge.sessions import adopted_turn
from services.edge.sessions.clients import DetachedPort, detach
from services.edge.sessions.running_note import note_path, take_note
from services.edge.sessions.session import EdgeSession

if TYPE_CHECKING:
    from services.edge.sessions.hub import EdgeHub

__all__ = ["adopted_protocol", "readopt"]

log = get_logger("edge.readopt")

#: A re-adopted link's first request id: above any id a predecessor used (the edge counts
#: from 0 per adapter; this is the clock in ms, ~1.7e12).
def _first_id() -> int:
    return int(time.time() * 1000)


def adopted_protocol(row: SessionRow, agent: ResolvedAgent) -> tuple[int, int]:
    """The ``protocol`` setting a re-adopted link runs with, and the version its agent's
    ``initialize`` chose: the row's recorded version (exactly that one), else the alias's
    setting and the version its recorded profile names (module doc)."""
    if row.protocol_version in (PROTOCOL_VERSION, PROTOCOL_V2):
        return row.protocol_version, row.protocol_version
    return agent.protocol, recorded_version(agent.adapter_capabilities_json)


async def readopt(rt: EdgeHub[EdgeSession]) -> tuple[list[str], list[str]]:
    """Re-adopt the live sessions claimed under this edge's name (module doc): the ids
    re-adopted, and those given up (their turns to mark interrupted)."""
    if not rt.gateway_instance_id:
        return [], []
    noted = await asyncio.to_thread(take_note, note_path(rt.cfg.data_dir, rt.gateway_instance_id),
                                    rt.gateway_instance_id)
    try:
        live = await rt.session_service.list_live_sessions()
    except ServiceError as exc:
        log.warning("readopt_listing_failed", code=exc.code)
        return [], []
    mine = [s for s in live
            if s.session.claim.instance_id == rt.gateway_instance_id]
    if not mine:
        return [], []
    done = await asyncio.gather(*(_readopt_one(rt, s) for s in mine), return_exceptions=True)
    adopted = [s.session.session_id for s, ok in zip(mine, done, strict=True) if ok is True]
    lost = [s.session.session_id for s, ok in zip(mine, done, strict=True) if ok is not True]
    for s, ok in zip(mine, done, strict=True):
        if isinstance(ok, BaseException):
            log.warning("session_not_readopted", session_id=s.session.session_id,
                        why=f"{type(ok).__name__}: {ok}")
    log.info("sessions_readopted", adopted=len(adopted), given_up=len(lost),
             noted_running=len(noted))
    return adopted, lost


async def _readopt_one(rt: EdgeHub[EdgeSession], live: LiveSession) -> bool:
    row = live.session
    sid = row.session_id
    if not row.lease_id or not row.adapter_session_id:
        raise ValueError("the row names no lease or adapter session")
    row = await rt.claims.claim(sid)  # a new generation: the dead process's writes are fenced
    agent = await rt.session_service.resolve_restore_agent(sid)
    session = EdgeSession(rt, DetachedPort(ClientCapabilities()), row, rt.clock)
    session.confirmed = True
    protocol, version = adopted_protocol(row, agent)
    link = AdapterLink(rt.lifecycle, AttachSpec(lease_id=row.lease_id, keep_on_loss=True),
                       foreign=foreign(agent), protocol=protocol, first_id=_first_id())
    if link.v2 is not None:  # the version its initialize chose
        link.v2.adopt(version)
    client = AdapterClient(link, sid, session, agent)
    client.adapter_session_id = row.adapter_session_id
    client.agent_capabilities = recorded_capabilities(agent.adapter_capabilities_json)
    session.bind_adapter(client, ClientCapabilities())
    session.lease_id = row.lease_id
    running = await adopted_turn.read_running(session)  # the store says whether a turn runs
    if running is not None:  # its end may wait in the pipe already
        adopted_turn.listen(running, link, row.adapter_session_id)
    link.begin()
    try:
        await link.attached(SETUP_TIMEOUT_SECS)
    except BaseException:
        await rt.claims.release(sid)
        raise
    if running is not None:
        await adopted_turn.resume(session, running)
    rt.activate(session)
    detach(session, float(rt.cfg.gateway.detach_grace_secs))
    log.info("session_readopted", session_id=sid, lease_id=row.lease_id,
             turn_running=session.turn is not None)
    return True


async def give_up(rt: EdgeHub[EdgeSession], session_ids: list[str]) -> None:
    """Sessions not re-adopted: their running turns interrupted, their claims dropped."""
    for sid in session_ids:
        try:
            await rt.session_service.interrupt_turns(session_id=sid)
        except ServiceError as exc:
            log.warning("interrupt_turns_failed", session_id=sid, code=exc.code)
        await rt.claims.release(sid)
