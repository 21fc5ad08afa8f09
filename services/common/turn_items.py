"""One prompt turn's updates as stored history items (SPEC §5, §8).

:class:`TurnAccumulator` watches a turn's ``session/update`` payloads and builds the
session service's ``HistoryItem`` list for one ``AppendTurn``
(:meth:`TurnAccumulator.mark`: a cancelled turn, stored with what was streamed). The
edge runs it as a turn streams, keeping at most ``keep_chars`` of the turn's text: past
that it *spills* — drops what it kept and lets the session service build the turn's
items from the event log at the turn's end, with this same class.

A v2 agent's child session streams its text as the parent's thoughts marked
``_meta.acpgate.subagent`` (:mod:`services.common.acp.v2.subagents`): those are not the
parent's thinking and are not stored; the child's card (a tool call on the parent,
:mod:`services.common.acp.v2.child_cards`) is, its result the child's answer. A card (or
any tool call) that finishes after its turn was stored is stored on its own
(:func:`finished_calls`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acpgate_contracts.session.v1 import session_pb2
from services.common.acp.v2.subagents import marker
from services.common.logs import CountedWarning, get_logger
from services.common.protocol import (
    META_ACPGATE,
    META_MODEL_OUTPUT,
    U_AGENT_MESSAGE,
    U_AGENT_THOUGHT,
    U_PLAN,
    U_TOOL_CALL,
    U_TOOL_CALL_UPDATE,
)

log = get_logger("turn_items")

#: The warning of an update that failed to record (:attr:`TurnAccumulator.odd`).
ACCUMULATE_FAILED = "accumulate_failed"

#: An update as the edge's relay recognised it: the ``update`` object, or a text chunk's text.
RelayedUpdate = dict[str, Any] | str

Role = session_pb2.HistoryItem.Role
# Plain ints: protobuf enum attribute lookups are slow on the per-update path.
ROLE_USER = Role.ROLE_USER
ROLE_ASSISTANT = Role.ROLE_ASSISTANT
ROLE_THOUGHT = Role.ROLE_THOUGHT
ROLE_TOOL_CALL = Role.ROLE_TOOL_CALL
ROLE_TOOL_RESULT = Role.ROLE_TOOL_RESULT
_FINAL_STATUSES = ("completed", "failed")
_TURN_KINDS = frozenset({U_AGENT_MESSAGE, U_AGENT_THOUGHT, U_TOOL_CALL, U_TOOL_CALL_UPDATE, U_PLAN})


def _text_of(content: Any) -> str:
    """Text of an ACP ContentBlock (or of a list of tool-call content entries)."""
    if isinstance(content, dict):
        if content.get("type") == "text" and isinstance(content.get("text"), str):
            return str(content["text"])
        if content.get("type") == "content":
            return _text_of(content.get("content"))
        return ""
    if isinstance(content, list):
        return "".join(_text_of(c) for c in content)
    return ""


def _json(value: Any) -> str:
    return orjson.dumps(value).decode() if value is not None else ""


def _args_json(value: Any) -> str:
    """Tool arguments as a JSON object (the store's shape); other values are wrapped."""
    if value is None:
        return ""
    return _json(value if isinstance(value, dict) else {"value": value})


def _content_json(value: Any) -> str:
    """Tool-call content as a JSON array, or "" when absent or not a list."""
    return _json(value) if isinstance(value, list) and value else ""


def _model_output(update: dict[str, Any]) -> str:
    """``_meta.acpgate.modelOutput`` of a ``tool_call_update`` (the result the model saw when
    it is not ``rawOutput``: deliver_file's JSON); "" when absent or not a string."""
    meta = update.get("_meta")
    inner = meta.get(META_ACPGATE) if isinstance(meta, dict) else None
    value = inner.get(META_MODEL_OUTPUT) if isinstance(inner, dict) else None
    return value if isinstance(value, str) else ""


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


#: Chunks a text run keeps as separate strings before joining them into one block (a
#: 20-character chunk costs ~72 B as a str: bench/PROFILE.md).
TEXT_BLOCK_CHUNKS = 128
#: What one tool call item costs against ``keep_chars`` besides its text (an agent's
#: calls without text still fill the turn: each is an item kept, and an id).
TOOL_ITEM_CHARS = 64


@dataclass
class _TextRun:
    """Consecutive chunks of one role: joined blocks plus the latest (< TEXT_BLOCK_CHUNKS) chunks."""

    role: int
    parts: list[str]
    blocks: list[str] = field(default_factory=list)

    def compact(self) -> None:
        """Join the pending chunks into one block."""
        self.blocks.append("".join(self.parts))
        self.parts.clear()

    def joined(self) -> str:
        """The run's whole text."""
        return "".join(self.blocks) + "".join(self.parts)


@dataclass
class TurnAccumulator:
    """Accumulates one turn's updates into history items (user text first).

    Text chunks are joined into blocks every :data:`TEXT_BLOCK_CHUNKS` and once at the
    end: a turn of many thousands of chunks costs linear time and about its text's size.
    """

    user_text: str
    #: The last ``plan`` entries seen in this turn (JSON), or None.
    plan_json: str | None = None
    #: The most text (assistant, thought and tool output characters, tool calls' input and
    #: content, :data:`TOOL_ITEM_CHARS` per tool item) kept before the accumulator spills
    #: (0: no bound).
    keep_chars: int = 0
    #: Past ``keep_chars``: nothing more is kept, the turn's items come from the log.
    spilled: bool = False
    #: The turn's items were taken to be stored (:meth:`close`): what is relayed after is
    #: no longer this turn's (:func:`finished_calls`).
    closed: bool = False
    #: Told of each update that failed to record (an agent's malformed one): the
    #: session's, counted across its turns; else this accumulator's own.
    odd: CountedWarning | None = None
    _kept: int = 0
    _prefix: str = ""
    _entries: list[_TextRun | session_pb2.HistoryItem] = field(default_factory=list)
    _calls: dict[str, session_pb2.HistoryItem] = field(default_factory=dict)
    _results: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._entries.append(session_pb2.HistoryItem(role=ROLE_USER, text=self.user_text))
        if self.odd is None:
            self.odd = CountedWarning(log, ACCUMULATE_FAILED)

    def failed(self, exc: Exception, kind: object) -> None:
        """``add`` raised on an update: it is skipped, and said (counted, no traceback —
        a hostile agent repeats it at will)."""
        assert self.odd is not None
        self.odd(error=type(exc).__name__, kind=str(kind)[:64])

    def mark(self, stop_reason: str) -> None:
        """Mark the turn as ended by ``stop_reason`` other than ``end_turn`` (a cancelled
        turn is stored with what was streamed: the user item's ``status``)."""
        first = self._entries[0]
        if isinstance(first, session_pb2.HistoryItem):
            first.status = stop_reason

    def close(self) -> None:
        """The turn's items are being taken to be stored: the caller records nothing more
        here."""
        self.closed = True

    @property
    def text(self) -> str:
        """The streamed assistant text (the prompt result's ``content``; of a spilled turn,
        its first ``keep_chars``)."""
        if self.spilled:
            return self._prefix
        return "".join([entry.joined() for entry in self._entries
                        if type(entry) is _TextRun and entry.role == ROLE_ASSISTANT])

    def _kept_more(self, size: int) -> None:
        """``size`` more characters are kept: past ``keep_chars``, spill."""
        self._kept += size
        if self.keep_chars and self._kept > self.keep_chars and not self.spilled:
            self._prefix = self.text[:self.keep_chars]
            self.spilled = True
            del self._entries[1:]
            self._calls.clear()
            self._results.clear()
            self.plan_json = None

    @property
    def items(self) -> list[session_pb2.HistoryItem]:
        """The turn as history items, in order."""
        out: list[session_pb2.HistoryItem] = []
        for entry in self._entries:
            if isinstance(entry, _TextRun):
                out.append(session_pb2.HistoryItem(
                    role=entry.role, text=entry.joined()))  # type: ignore[arg-type]
            else:
                out.append(entry)
        return out

    def _append_text(self, role: int, text: str) -> None:
        last = self._entries[-1]
        if not (isinstance(last, _TextRun) and last.role == role):
            self._entries.append(last := _TextRun(role, []))
        last.parts.append(text)
        if len(last.parts) >= TEXT_BLOCK_CHUNKS:
            last.compact()
            self._kept_more(len(last.blocks[-1]))

    def add_many(self, updates: Sequence[RelayedUpdate]) -> list[dict[str, Any]]:
        """Record ``updates`` in order (as :meth:`add` each; a ``str`` is an assistant
        text chunk's text); returns those of other kinds (not part of the turn's
        history, e.g. mode or title changes).

        The common update, an assistant text chunk, is taken inline: a burst of
        thousands costs one loop, not a method call each. An update that fails
        to record is skipped and told to :attr:`odd`, never fatal.
        """
        if self.spilled:
            return _others(updates)
        others: list[dict[str, Any]] = []
        entries = self._entries
        run: _TextRun | None = None
        last = entries[-1]
        if type(last) is _TextRun and last.role == ROLE_ASSISTANT:
            run = last
        for index, update in enumerate(updates):
            text: str | None = None
            if isinstance(update, str):
                text = update
            else:
                kind = update.get("sessionUpdate")
                if kind == U_AGENT_MESSAGE:
                    content = update.get("content")
                    if type(content) is dict and content.get("type") == "text" \
                            and type(value := content.get("text")) is str:
                        text = value
                if text is None:
                    if type(kind) is str and kind in _TURN_KINDS:
                        try:
                            self.add(update)
                        except Exception as exc:  # never loses the relay or the turn
                            self.failed(exc, kind)
                            continue
                        last = entries[-1]
                        run = last if type(last) is _TextRun \
                            and last.role == ROLE_ASSISTANT else None
                    else:
                        others.append(update)
                    continue
            if text:
                if run is None:
                    run = _TextRun(ROLE_ASSISTANT, [])
                    entries.append(run)
                chunks = run.parts
                chunks.append(text)
                if len(chunks) >= TEXT_BLOCK_CHUNKS:
                    run.compact()
                    self._kept_more(len(run.blocks[-1]))
                    if self.spilled:
                        others.extend(_others(updates[index + 1:]))
                        return others
        return others

    def add(self, update: dict[str, Any]) -> None:
        """Record one ``update`` object (the ``params.update`` of a session/update)."""
        if self.spilled:
            return
        kind = update.get("sessionUpdate")
        if kind == U_AGENT_MESSAGE:
            content = update.get("content")
            # The common chunk (one text block) without the general walk; same result.
            if type(content) is dict and content.get("type") == "text":
                text = content.get("text")
                if type(text) is not str:
                    text = _text_of(content)
            else:
                text = _text_of(content)
            if text:
                self._append_text(ROLE_ASSISTANT, text)
        elif kind == U_AGENT_THOUGHT:
            if marker(update) is not None:
                return  # a v2 agent's child's text: its card (a tool call) holds its answer
            text = _text_of(update.get("content"))
            if text:
                self._append_text(ROLE_THOUGHT, text)
        elif kind == U_TOOL_CALL:
            self._tool_call(update)
        elif kind == U_TOOL_CALL_UPDATE:
            self._tool_update(update)
        elif kind == U_PLAN:
            entries = update.get("entries")
            self.plan_json = _json(entries if isinstance(entries, list) else [])

    def _tool_call(self, update: dict[str, Any]) -> None:
        # External adapters may omit ids and names or send odd shapes; the store
        # refuses such items, so they are normalised rather than losing the turn.
        call_id = str(update.get("toolCallId") or f"call-{len(self._calls) + 1}")
        title = update.get("title")
        name = update.get("name") or title or "tool"
        item = session_pb2.HistoryItem(
            role=ROLE_TOOL_CALL,
            tool_call_id=call_id,
            tool_name=str(name),
            tool_kind=str(update.get("kind") or "other"),
            title=str(title or name),
            arguments_json=_args_json(update.get("rawInput")),
            content_json=_content_json(update.get("content")),
        )
        self._kept_more(TOOL_ITEM_CHARS + len(call_id) + len(item.title) + len(item.tool_name)
                        + len(item.arguments_json) + len(item.content_json))
        if self.spilled:
            return
        self._entries.append(item)
        self._calls[call_id] = item
        if update.get("status") in _FINAL_STATUSES:
            self._tool_update(update)

    def _tool_update(self, update: dict[str, Any]) -> None:
        call_id = str(update.get("toolCallId") or "")
        call = self._calls.get(call_id)
        if call is not None:  # later fields refine the call (title, input, ...)
            if isinstance(update.get("title"), str):
                call.title = update["title"]
            if update.get("rawInput") is not None and not call.arguments_json:
                call.arguments_json = _args_json(update["rawInput"])
                self._kept_more(len(call.arguments_json))
                if self.spilled:
                    return
        status = update.get("status")
        if status not in _FINAL_STATUSES or call_id in self._results or not call_id:
            return
        self._results.add(call_id)
        output = update.get("rawOutput")
        text = _as_text(output) if output is not None else _text_of(update.get("content"))
        content_json = _content_json(update.get("content"))
        self._kept_more(TOOL_ITEM_CHARS + len(call_id) + len(text) + len(content_json))
        if self.spilled:
            return
        self._entries.append(session_pb2.HistoryItem(
            role=ROLE_TOOL_RESULT,
            tool_call_id=call_id,
            tool_name=call.tool_name if call else str(update.get("name") or ""),
            tool_kind=call.tool_kind if call else str(update.get("kind") or ""),
            title=call.title if call else str(update.get("title") or ""),
            text=_model_output(update),
            output=text,
            status=str(status),
            content_json=content_json,
        ))


def finished_calls(updates: Sequence[dict[str, Any]],
                   odd: CountedWarning | None = None) -> list[session_pb2.HistoryItem]:
    """The history items of what ``updates`` — relayed while no turn was accumulating —
    finished: a tool call (a v2 agent's child card, background work) that reached its final
    status after its turn was stored, as the turn would have stored it (its result, and the
    call itself when it was created finished). Anything else between turns is left to the
    event log."""
    done = [update for update in updates
            if update.get("sessionUpdate") in (U_TOOL_CALL, U_TOOL_CALL_UPDATE)
            and update.get("status") in _FINAL_STATUSES]
    if not done:
        return []
    acc = TurnAccumulator(user_text="", odd=odd)
    for update in done:
        try:
            acc.add(update)
        except Exception as exc:  # an odd update never loses the relay
            acc.failed(exc, update.get("sessionUpdate"))
    return acc.items[1:]


def _others(updates: Sequence[RelayedUpdate]) -> list[dict[str, Any]]:
    """The updates of ``updates`` that are not part of a turn's history."""
    return [u for u in updates if type(u) is dict and u.get("sessionUpdate") not in _TURN_KINDS]
