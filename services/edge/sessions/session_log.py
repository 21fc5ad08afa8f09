"""What an edge session hands its event log: turns, prompts and the client's actions.

The relayed updates themselves go from :meth:`EdgeSession._relay` straight to
:meth:`~services.edge.sessions.event_log.EventLog.updates`; this module covers the
rest. A prompt is logged as the ``user_message_chunk`` a replay sends for it, under
an event id of its own (the turn's id); an action (a client's cancel, the permission
answer the agent got, a mode, config or model change the agent accepted) as JSON under an
event id of its own — what acpgate did, never what a client merely claimed. Ids come from the
session's feed, so the log is one sequence with what the clients saw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from services.common.protocol import META_ACPGATE, META_EVENT_ID, U_USER_MESSAGE
from services.edge.adapter.relay_lines import update_prefix

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession
    from services.edge.sessions.turn import TurnState

__all__ = ["KIND_CANCEL", "KIND_CONFIG", "KIND_PERMISSION", "action", "config", "prompt",
           "turn_ended", "turn_started"]

KIND_PROMPT: Final = "prompt"
KIND_CANCEL: Final = "cancel"
KIND_PERMISSION: Final = "permission"
KIND_CONFIG: Final = "config"
TURN_RUNNING: Final = "running"


def turn_started(session: EdgeSession, turn: TurnState) -> None:
    """``turn`` starts: its id (the prompt's event id) taken, its state running."""
    turn.turn_id = session.feed.reserve_id()
    session.runtime.event_log.turn(session.session_id, turn.turn_id, TURN_RUNNING)


def turn_ended(session: EdgeSession, turn: TurnState) -> None:
    """``turn`` ended in ``turn.end_state``."""
    if turn.turn_id:
        session.runtime.event_log.turn(session.session_id, turn.turn_id, turn.end_state)


def prompt(session: EdgeSession, turn: TurnState, text: str) -> None:
    """The prompt of ``turn`` as a replay shows it (a ``user_message_chunk``)."""
    if not turn.turn_id:
        return
    update = {"sessionUpdate": U_USER_MESSAGE, "content": {"type": "text", "text": text},
              "_meta": {META_ACPGATE: {META_EVENT_ID: turn.turn_id}}}
    line = update_prefix(session.session_id) + orjson.dumps(update).decode() + "}}"
    session.runtime.event_log.action(session.session_id, turn.turn_id, turn.turn_id,
                                     KIND_PROMPT, line.encode())


def action(session: EdgeSession, kind: str, payload: dict[str, Any]) -> None:
    """A client action of ``kind`` (its params as JSON), under an event id of its own."""
    turn = session.turn
    try:
        body = orjson.dumps(payload)
    except TypeError:
        body = orjson.dumps({"unencodable": True})
    session.runtime.event_log.action(session.session_id, session.feed.reserve_id(),
                                     turn.turn_id if turn is not None else 0, kind, body)


def config(session: EdgeSession, method: str, **accepted: str | bool) -> None:
    """A mode, config option or model change the agent accepted (``method``: the client's
    request): the values acpgate relayed and the agent took, never the client's other params."""
    action(session, KIND_CONFIG, {"method": method, **accepted})
