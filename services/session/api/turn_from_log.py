"""A turn's history items built from the session's event log.

The edge keeps at most a bounded part of a running turn's text; a longer turn
*spills*, and its ``AppendTurn`` names the turn's log id instead of carrying its items.
The service reads that turn's ``update`` events (stored before the turn: the edge
flushes its log first) and runs them through the same
:class:`~services.common.turn_items.TurnAccumulator` the edge would have, so the
stored items are the same either way; a chunk of assistant text chunks gives its texts
as stored, the way the edge hands the accumulator a text it already took out.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.logs import get_logger
from services.common.turn_items import TurnAccumulator
from services.session.store.event_log import EventLogStore

__all__ = ["turn_items_from_log"]

log = get_logger("session.turn_from_log")

_KIND_UPDATE: Final = "update"


def _update_of(payload: bytes) -> dict[str, Any] | None:
    """The ``params.update`` object of a logged ``session/update`` line, or None."""
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    update = params.get("update") if isinstance(params, dict) else None
    return update if isinstance(update, dict) else None


async def turn_items_from_log(store: EventLogStore, session_id: str, turn_id: int
                              ) -> tuple[list[pb.HistoryItem], str | None]:
    """The items of turn ``turn_id`` after its user item, and its last plan (JSON, or
    None), from the logged updates of that turn in event order."""
    acc = TurnAccumulator(user_text="")
    skipped = 0
    async for chunks in store.iter_chunks(session_id, after=turn_id):
        updates: list[dict[str, Any] | str] = []
        for chunk in chunks:
            if chunk.turn_id != turn_id or chunk.kind != _KIND_UPDATE:
                continue
            # Assistant text chunks as stored: their texts, without rebuilding and parsing
            # each one's line (a long turn is mostly these).
            texts = chunk.texts()
            if texts is not None:
                updates.extend(texts)
                continue
            for event in chunk.split():
                update = _update_of(event.payload)
                if update is None:
                    skipped += 1
                else:
                    updates.append(update)
        acc.add_many(updates)
    if skipped:
        log.warning("turn_events_unreadable", session_id=session_id, turn_id=turn_id,
                    count=skipped)
    return acc.items[1:], acc.plan_json
