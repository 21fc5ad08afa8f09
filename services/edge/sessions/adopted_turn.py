"""A turn a dead edge left running, carried on by the edge that re-adopted its session.

The ``session/prompt`` request went to the adapter from the dead process, and its
answer can no longer reach the client that asked (that connection is gone). The turn
itself goes on: :func:`resume` takes it up from the event log — its id (the prompt's
event id), its prompt and what it streamed so far (so the stored turn is whole) — and
waits for the adapter's answer to that request, which arrives on the new link as an
answer to an id it never asked (``AdapterLink.on_unmatched``) — a v2 agent's turn ends
at its ``idle`` state instead, as a prompt's does there; a permission request or an
elicitation of the turn still open is asked again
(:mod:`services.edge.sessions.open_questions`). The answer ends the turn as a turn ends
here: stored (fenced by the new claim), its end state logged, and every client told with
a ``turn_complete`` update — a numbered, logged event that a client attaching later
replays.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import STOP_CANCELLED
from services.edge.adapter.link import AdapterLink
from services.edge.adapter.requests import read_prompt_result
from services.edge.backends.errors import ServiceError
from services.edge.sessions import open_questions
from services.edge.sessions.clients import report_turn_end, turn_complete
from services.edge.sessions.open_questions import OpenQuestions
from services.edge.sessions.turn import TURN_COMPLETED, TURN_FAILED, Turn, TurnAccumulator

if TYPE_CHECKING:
    from services.common.acp.v2.agent_wire import TurnEnd
    from services.edge.sessions.session import EdgeSession

__all__ = ["RunningTurn", "listen", "read_running", "resume"]

log = get_logger("edge.adopted_turn")

_KIND_PROMPT: Final = "prompt"
_KIND_UPDATE: Final = "update"
#: How long the turn waits for the adapter's answer (a dead adapter ends the session first).
_ANSWER_WAIT_SECS: Final = 24 * 3600.0


@dataclass
class RunningTurn:
    """The turn the store marks running for a session: read before the adapter's link
    reads anything (:func:`read_running`), taken up once it is attached (:func:`resume`)."""

    turn_id: int
    #: The prompt's text.
    text: str
    #: What its clients were told so far.
    updates: list[dict[str, Any]]
    #: Its permission requests and elicitations, and the answers the agent got.
    questions: OpenQuestions
    #: The adapter's answer to the predecessor's prompt (v1 shape), once it comes.
    answer: asyncio.Future[dict[str, Any]]


async def read_running(session: EdgeSession) -> RunningTurn | None:
    """The turn the store marks running for ``session``, or None when none runs."""
    questions = OpenQuestions()
    turn_id, text, updates = await _running_turn(session, questions)
    if not turn_id:
        return None
    answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    return RunningTurn(turn_id, text, updates, questions, answer)


def listen(running: RunningTurn, link: AdapterLink, adapter_session_id: str) -> None:
    """Have ``running.answer`` set by what ends the predecessor's turn on ``link``: a v1
    agent's answer to the prompt (an id this link never asked), a v2 agent's ``idle``.
    Call before the link reads the adapter's lines: the end may already wait there."""
    answer = running.answer

    def answered(message: dict[str, Any]) -> None:
        result = message.get("result")
        if not answer.done() and (isinstance(result, dict) or "error" in message):
            answer.set_result(message)

    if link.v2 is not None and link.speaks_v2:  # v2: the turn ends at the agent's idle
        ended = link.v2.adopt_turn(adapter_session_id)
        ended.add_done_callback(lambda f: None if f.cancelled() or f.exception() else
                                answered(_v1_answer(f.result())))
    else:
        link.on_unmatched(answered)


async def resume(session: EdgeSession, running: RunningTurn) -> None:
    r"""Take up ``running`` on ``session``, whose adapter link is attached and was
    :func:`listen`\ ed to before it read anything (module doc)."""
    turn_id, text, updates, questions = (running.turn_id, running.text, running.updates,
                                         running.questions)
    turn = Turn(session.turn_context, turn_id=turn_id)
    turn.acc = TurnAccumulator(user_text=text, odd=session.turn_context.odd)
    turn.acc.add_many(updates)
    session.turn = turn
    session.feed.turn_started()
    rt = session.runtime
    rt.event_log.running.setdefault(session.session_id, set()).add(turn_id)
    assert session.adapter is not None
    link = session.adapter.link
    if link.v2 is not None and link.speaks_v2:  # what the clients know of it stays known
        link.v2.adopt_turn(session.adapter.adapter_session_id, updates)
    rt.spawn(_finish(session, turn, running.answer))
    asked = questions.open()
    open_questions.ask_again(session, asked)
    log.info("adopted_turn_running", session_id=session.session_id, turn_id=turn_id,
             logged_updates=len(updates), open_questions=len(asked))


def _v1_answer(end: TurnEnd) -> dict[str, Any]:
    """A v2 agent's turn end as the answer to the prompt a v1 agent would have sent."""
    return {"error": end.error} if end.error is not None else {"result": end.result}


async def _running_turn(session: EdgeSession, questions: OpenQuestions,
                        ) -> tuple[int, str, list[dict[str, Any]]]:
    """The turn the store marks running: its id, its prompt's text and its updates (0:
    none runs); its questions and their answers go to ``questions``. Only that turn's
    events are read, however long the session's log."""
    pages = session.runtime.session_service.read_events(session.session_id,
                                                        running_turn_only=True)
    turn_id, text = 0, ""
    updates: list[dict[str, Any]] = []
    try:
        async for page in pages:
            for event in page.events:
                if event.kind == _KIND_PROMPT:
                    turn_id, text, updates = event.turn_id, _text_of(_update_of(event.payload)), []
                    questions.clear()
                elif event.kind == _KIND_UPDATE and turn_id and event.turn_id == turn_id:
                    update = _update_of(event.payload)
                    if isinstance(update, dict):
                        updates.append(update)
                elif turn_id and event.turn_id == turn_id:
                    questions.see(event.kind, event.payload)
    except ServiceError as exc:
        log.warning("adopted_turn_unread", session_id=session.session_id, code=exc.code)
    finally:
        await pages.aclose()
    return turn_id, text, updates


def _update_of(payload: bytes) -> Any:
    """The ``update`` of a logged ``session/update`` line (None when it is not one)."""
    with contextlib.suppress(ValueError):
        params = orjson.loads(payload).get("params")
        if isinstance(params, dict):
            return params.get("update")
    return None


def _text_of(update: Any) -> str:
    """A logged prompt's text (its ``user_message_chunk``)."""
    content = update.get("content") if isinstance(update, dict) else None
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else ""


async def _finish(session: EdgeSession, turn: Turn,
                  answer: asyncio.Future[dict[str, Any]]) -> None:
    """End ``turn`` with the adapter's answer (module doc); a session released first
    (its adapter died, its grace ended) ends it failed."""
    assert session.adapter is not None and turn.acc is not None
    exited: asyncio.Future[Any] = asyncio.ensure_future(
        session.adapter.link.exited(_ANSWER_WAIT_SECS))
    either: set[asyncio.Future[Any]] = {answer, exited}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        exited.cancel()
    stop = ""
    raw: Any = {}
    if answer.done() and not session.released:
        raw = answer.result().get("result")
        if isinstance(raw, dict):
            stop = read_prompt_result(raw).stop_reason
    try:
        if stop and (stop != STOP_CANCELLED or turn.keep):
            if stop == STOP_CANCELLED:
                turn.acc.mark(STOP_CANCELLED)
            await turn.store(read_prompt_result(raw), raw)
        turn.end_state = (STOP_CANCELLED if stop == STOP_CANCELLED
                          else TURN_COMPLETED if stop else TURN_FAILED)
        if stop:
            await report_turn_end(session, None, turn_complete(stop, raw))
    except JsonRpcError as exc:
        log.warning("adopted_turn_not_stored", session_id=session.session_id, why=exc.message)
        turn.end_state = TURN_FAILED
    finally:
        session.release_turn(turn)
        log.info("adopted_turn_ended", session_id=session.session_id, stop_reason=stop or None,
                 state=turn.end_state)
