"""Session RPCs on the event log, for trusted callers (the edge): append batches, replay.

``ReadEvents`` is what a replay reads: with ``with_history``, the stored history items
of the turns written before the session's log began (a session older than its log, or a
fork), then the logged events; with ``running_turn_only``, only the running turn's events
(an edge re-adopting the session reads no more, however long its log). A prompt event of a turn that ended cancelled,
interrupted or failed carries that stop reason in ``_meta.acpgate.stopReason``: the store knows
how a turn ended, the event as relayed could not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc
import orjson

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.protocol import META_ACPGATE, META_STOP_REASON, REFUSED_QUOTA
from services.session.api.convert import entry_to_pb
from services.session.api.history_pages import cut_pages
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.store import (
    TURN_RUNNING,
    EventChunk,
    LoggedEvent,
    Quota,
    SessionBatch,
    SessionNotFound,
    TurnMark,
)

__all__ = ["EventRpcs"]

log = get_logger("session.servicer")

#: Turn ends a replayed prompt is marked with (a completed turn's prompt is as it was).
_MARKED_ENDS = frozenset({"cancelled", "interrupted", "failed"})


def _batch(part: pb.SessionEvents) -> SessionBatch:
    """A session's part as the store takes it: its chunks as they came (not split)."""
    return SessionBatch(
        part.session_id, (), [TurnMark(t.turn_id, t.state, t.at_ms) for t in part.turns],
        holder=part.holder_instance_id or None, generation=part.claim_generation,
        chunks=[EventChunk(c.first_event_id, c.last_event_id, c.turn_id, c.kind, c.payload,
                           c.at_ms, c.prefix, c.form) for c in part.chunks])


def marked_prompt(payload: bytes, state: str) -> bytes:
    """A prompt event's ``session/update`` line with ``_meta.acpgate.stopReason: state``
    (as it was when it cannot be read)."""
    try:
        message = orjson.loads(payload)
        update = message["params"]["update"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return payload
    if not isinstance(update, dict):
        return payload
    meta = update.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    ours = meta.get(META_ACPGATE)
    meta[META_ACPGATE] = {**(ours if isinstance(ours, dict) else {}), META_STOP_REASON: state}
    update["_meta"] = meta
    return orjson.dumps(message)


def _as_pb(events: Iterable[LoggedEvent], states: dict[int, str]) -> list[pb.LogEvent]:
    out = []
    for e in events:
        payload = e.payload
        if e.kind == "prompt" and states.get(e.turn_id) in _MARKED_ENDS:
            payload = marked_prompt(payload, states[e.turn_id])
        out.append(pb.LogEvent(event_id=e.event_id, turn_id=e.turn_id, kind=e.kind,
                               payload=payload, at_ms=e.at))
    return out


class EventRpcs(RpcBase):
    """AppendEvents, ReadEvents and InterruptTurns (no visibility check)."""

    async def AppendEvents(self, request: pb.AppendEventsRequest,
                           context: Ctx) -> pb.AppendEventsResponse:
        """A batch of many sessions' events in one transaction (group commit)."""
        store = self._cfg.store
        refused = await self._store.append_events(
            [_batch(p) for p in request.sessions],
            quota=Quota(store.max_session_bytes, store.max_token_bytes))
        for part, why in zip(request.sessions, refused, strict=True):
            if why.startswith(REFUSED_QUOTA):
                log.warning("events_over_quota", session_id=part.session_id,
                            reason=why.removeprefix(REFUSED_QUOTA))
            elif why:
                log.warning("events_refused", session_id=part.session_id, why=why,
                            holder=part.holder_instance_id, generation=part.claim_generation)
        return pb.AppendEventsResponse(refused=refused)

    async def ReadEvents(self, request: pb.ReadEventsRequest,
                         context: Ctx) -> AsyncIterator[pb.EventPage]:
        """The session's log (and the history before it) in pages, oldest first."""
        sid = request.session_id
        await self._get(sid, context)
        try:
            start = await self._store.log_start(sid)
            states = await self._store.turn_states(sid)
            after = request.after_event_id
            if request.running_turn_only:
                running = [turn for turn, state in states.items() if state == TURN_RUNNING]
                if not running:
                    return
                after = max(after, max(running) - 1)  # the turn's id is its prompt's event id
            elif request.with_history:
                async for rows in self._store.iter_history_pages(sid):
                    older = [entry_to_pb(r) for r in rows if not start or r.turn < start]
                    for page in cut_pages(older):
                        yield pb.EventPage(items=page.items)
                    if len(older) < len(rows):
                        break
            async for events in self._store.iter_events(
                    sid, after=after, before=request.before_event_id):
                yield pb.EventPage(events=_as_pb(events, states))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))

    async def InterruptTurns(self, request: pb.InterruptTurnsRequest,
                             context: Ctx) -> pb.InterruptTurnsResponse:
        """Running turns nobody will end → interrupted."""
        count = await self._store.interrupt_turns(instance_id=request.instance_id,
                                                  session_id=request.session_id)
        if count:
            log.info("turns_interrupted", count=count, instance=request.instance_id,
                     session_id=request.session_id)
        return pb.InterruptTurnsResponse(interrupted=count)
