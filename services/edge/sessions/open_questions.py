"""Questions a dead edge left open, asked again by the edge that re-adopted them.

An agent's ``session/request_permission`` or ``elicitation/create`` is logged as relayed
(a ``permission`` event: the method, the agent's JSON-RPC id and the params the client got)
before the client is asked, and the answer the agent got after (a ``permission`` event
with the same id and the ``answer``) — stored before the agent gets it
(:meth:`~services.edge.sessions.session.EdgeSession.relay_to_client`), so a request the
agent has its answer to is never asked again, and the agent never gets two answers to
one id. When the edge relaying it dies, the agent still waits for an answer to that id. The edge that re-adopts the session
reads the running turn's events (:mod:`services.edge.sessions.adopted_turn`), feeding each
to :class:`OpenQuestions`; every request logged without an answer is asked again
(:func:`ask_again`) exactly as a live one is — of every controller attached, or of the
next one to attach (the session is re-adopted detached), under a fresh client-side id —
and the answer goes to the agent under its original id.

A request the dead edge had read but whose event was not yet stored
(the event log's group commit, at most ``COMMIT_SECS`` plus one ``AppendEvents``) is
lost: the agent waits until the turn is cancelled. So is an answer stored whose write
to the agent's pipe the dead edge had not made yet (the loop iteration after the store
acknowledged it).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from services.common.jsonrpc import JsonRpcId
from services.common.logs import get_logger
from services.edge.sessions.session_log import KIND_PERMISSION, LOGGED_QUESTIONS

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["OpenQuestion", "OpenQuestions", "ask_again"]

log = get_logger("edge.open_questions")


@dataclass(frozen=True, slots=True)
class OpenQuestion:
    """One logged request without a logged answer: the agent's id, its method and params."""

    request_id: JsonRpcId
    method: str
    params: dict[str, Any]


def _key(request_id: Any) -> str | None:
    """How ids are matched (their string form, as JSON-RPC answers are); None: no id."""
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return str(request_id)


class OpenQuestions:
    """The questions of a stretch of the log still waiting for their answer."""

    def __init__(self) -> None:
        self._open: dict[str, OpenQuestion] = {}

    def see(self, kind: str, payload: bytes) -> None:
        """One logged event (any kind; only requests and answers count)."""
        if kind != KIND_PERMISSION:
            return
        body: Any = None
        with contextlib.suppress(orjson.JSONDecodeError):
            body = orjson.loads(payload)
        if not isinstance(body, dict) or (key := _key(body.get("requestId"))) is None:
            return
        if "answer" in body:
            self._open.pop(key, None)
            return
        params, method = body.get("params"), body.get("method")
        if method in LOGGED_QUESTIONS and isinstance(params, dict):
            self._open[key] = OpenQuestion(body["requestId"], method, params)

    def clear(self) -> None:
        """A new turn began: what was asked before is not this turn's."""
        self._open.clear()

    def open(self) -> list[OpenQuestion]:
        """The unanswered requests, in the order they were asked."""
        return list(self._open.values())


def ask_again(session: EdgeSession, questions: list[OpenQuestion]) -> None:
    """Ask each of ``questions`` again (module doc), in the background."""
    for question in questions:
        session.runtime.spawn(_ask(session, question))


async def _ask(session: EdgeSession, question: OpenQuestion) -> None:
    log.info("question_asked_again", session_id=session.session_id, method=question.method)
    answer = await session.relay_to_client(question.method, dict(question.params),
                                           request_id=question.request_id)
    adapter = session.adapter
    if adapter is not None and not session.released:
        adapter.link.answer(question.request_id, answer)
