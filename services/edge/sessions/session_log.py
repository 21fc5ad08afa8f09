"""What an edge session hands its event log: turns, prompts and the client's actions.

The relayed updates themselves go from :meth:`EdgeSession._relay` straight to
:meth:`~services.edge.sessions.event_log.EventLog.updates`; a :class:`SessionLog` covers
the rest. A prompt is logged as the ``user_message_chunk`` a replay sends for it, under
an event id of its own (the turn's id); an action (a client's cancel, a permission request
or an elicitation as relayed and the answer the agent got, a mode, config or model change
the agent accepted) as JSON under an event id of its own — what acpgate did, never what a
client merely claimed.
Ids come from the session's feed, so the log is one sequence with what the clients saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from services.common.protocol import (
    M_ELICITATION_CREATE,
    M_REQUEST_PERMISSION,
    META_ACPGATE,
    META_EVENT_ID,
    U_USER_MESSAGE,
)
from services.edge.adapter.relay_lines import update_prefix
from services.edge.sessions.event_log import EventLog
from services.edge.sessions.feed import SessionFeed

__all__ = ["KIND_CANCEL", "KIND_CONFIG", "KIND_PERMISSION", "LOGGED_QUESTIONS", "TURN_RUNNING",
           "SessionLog"]

KIND_PROMPT: Final = "prompt"
KIND_CANCEL: Final = "cancel"
#: A question to the human (one of :data:`LOGGED_QUESTIONS`) as relayed (``method``, the
#: adapter's ``requestId``, the ``params`` the client got), logged before the client is
#: asked, and the answer the agent got (``method``, ``requestId``, ``answer``): an edge
#: re-adopting the session asks again what has no answer
#: (services.edge.sessions.open_questions). One kind for both methods: the store knows it.
KIND_PERMISSION: Final = "permission"
#: The adapter requests logged as :data:`KIND_PERMISSION` events: a permission request and
#: an elicitation (a form the agent asks the human to fill in).
LOGGED_QUESTIONS: Final = frozenset({M_REQUEST_PERMISSION, M_ELICITATION_CREATE})
KIND_CONFIG: Final = "config"
TURN_RUNNING: Final = "running"


class SessionLog:
    """One session's writer to the edge's event log, its ids from the session's feed.

    ``running_turn``: the id of the turn running now (0: none), which an action is logged
    under."""

    def __init__(self, event_log: EventLog, session_id: str, feed: SessionFeed,
                 running_turn: Callable[[], int]) -> None:
        self._log = event_log
        self._sid = session_id
        self._feed = feed
        self._running_turn = running_turn

    def turn_started(self) -> int:
        """A turn starts: its id (the prompt's event id) taken and returned, its state
        running."""
        turn_id = self._feed.reserve_id()
        self._log.turn(self._sid, turn_id, TURN_RUNNING)
        return turn_id

    def turn_ended(self, turn_id: int, end_state: str) -> None:
        """Turn ``turn_id`` ended in ``end_state``."""
        if turn_id:
            self._log.turn(self._sid, turn_id, end_state)

    def prompt(self, turn_id: int, text: str) -> None:
        """The prompt of turn ``turn_id`` as a replay shows it (a ``user_message_chunk``)."""
        if not turn_id:
            return
        update = {"sessionUpdate": U_USER_MESSAGE, "content": {"type": "text", "text": text},
                  "_meta": {META_ACPGATE: {META_EVENT_ID: turn_id}}}
        line = update_prefix(self._sid) + orjson.dumps(update).decode() + "}}"
        self._log.action(self._sid, turn_id, turn_id, KIND_PROMPT, line.encode())

    def action(self, kind: str, payload: dict[str, Any]) -> None:
        """A client action of ``kind`` (its params as JSON), under an event id of its own."""
        try:
            body = orjson.dumps(payload)
        except TypeError:
            body = orjson.dumps({"unencodable": True})
        self._log.action(self._sid, self._feed.reserve_id(), self._running_turn(), kind, body)

    async def settled(self, wait_secs: float) -> bool:
        """Wait until what was handed in so far is stored (True), or ``wait_secs`` passed
        (False: the store is unreachable); True at once when it never will be (the log off,
        this session's log lost)."""
        return await self._log.settled(self._sid, wait_secs)

    def config(self, method: str, **accepted: str | bool) -> None:
        """A mode, config option or model change the agent accepted (``method``: the client's
        request): the values acpgate relayed and the agent took, never the client's other
        params."""
        self.action(KIND_CONFIG, {"method": method, **accepted})
