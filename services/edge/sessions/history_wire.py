"""Stored history back on the wire, one page at a time (SPEC §8).

A restore reads the stored conversation as the session service's pages
(``StreamHistory``: at most 500 items and about 1 MiB each, a larger item alone)
and never holds more than one page: each page becomes

- ``session/update`` payloads replaying it to the client (:class:`Replay`, which
  remembers only the names of the tool calls seen so far, for their results);
- the built-in agent's history items (:func:`history_meta`), sent as one
  ``_acpgate/history_append`` chunk;
- lines of the plain transcript an external adapter that cannot restore itself
  gets with its first prompt (:class:`CarryOver`), of which only the newest
  :data:`CARRY_OVER_MAX_CHARS` characters are kept, with a note saying so.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, Final

import orjson

from services.common.history_roles import ROLE_NAME_BY_PB
from services.common.protocol import (
    CANCEL_MARKER,
    CANCEL_TOOL_CALL_PREFIX,
    CANCEL_TOOL_NAME,
    META_ACPGATE,
    META_STOP_REASON,
    U_AGENT_MESSAGE,
    U_AGENT_THOUGHT,
    U_TOOL_CALL,
    U_TOOL_CALL_UPDATE,
    U_USER_MESSAGE,
)
from services.edge.backends.session_types import HistoryItem

__all__ = ["CARRY_OVER_MAX_CHARS", "CarryOver", "Replay", "history_meta", "replay_updates",
           "transcript"]

_Role = HistoryItem.Role
ROLE_USER = _Role.ROLE_USER
ROLE_ASSISTANT = _Role.ROLE_ASSISTANT
ROLE_THOUGHT = _Role.ROLE_THOUGHT
ROLE_TOOL_CALL = _Role.ROLE_TOOL_CALL
ROLE_TOOL_RESULT = _Role.ROLE_TOOL_RESULT

#: The most characters of prior conversation carried into an external adapter's first
#: prompt (about 250k tokens): the newest part is kept.
CARRY_OVER_MAX_CHARS: Final = 1_000_000
#: What precedes a carry-over that had to leave its oldest part out.
CARRY_OVER_CUT_NOTE: Final = (
    "[acpgate: this conversation is longer than the {limit} characters carried over; "
    "its oldest {dropped} characters are left out and the newest {kept} follow.]"
)
_SEPARATOR: Final = "\n\n"


def _loads(text: str) -> Any:
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def cancel_marker_update(session_id: str) -> dict[str, Any]:
    """The ``turn-cancelled`` tool_call update of SPEC §7 (the built-in agent's dialect)."""
    return {
        "sessionUpdate": U_TOOL_CALL,
        "toolCallId": f"{CANCEL_TOOL_CALL_PREFIX}{session_id}",
        "name": CANCEL_TOOL_NAME,
        "title": CANCEL_TOOL_NAME,
        "kind": "think",
        "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": CANCEL_MARKER}}],
    }


class Replay:
    """Replay updates of one stored conversation, page by page (SPEC §8 session/load).

    A tool result names its call; the call may be on an earlier page, so its name, title
    and kind are remembered (not the call itself: its arguments may be large).

    A turn stored as cancelled (its user item's ``status``) replays what was
    streamed before the cancel; its ``user_message_chunk`` carries
    ``_meta.acpgate.stopReason: "cancelled"``, and with ``marker_for`` (the built-in
    agent's dialect: the session id) the turn ends with the SPEC §7 ``turn-cancelled``
    update, as the client saw it live. Call :meth:`finish` after the last page.
    """

    def __init__(self, marker_for: str = "") -> None:
        self._calls: dict[str, tuple[str, str, str]] = {}
        self._marker_for = marker_for
        #: The turn being replayed was cancelled: its marker is due before the next turn.
        self._open_cancel = False

    def finish(self) -> list[dict[str, Any]]:
        """The updates due after the last page (the last turn's cancel marker)."""
        if self._open_cancel and self._marker_for:
            self._open_cancel = False
            return [cancel_marker_update(self._marker_for)]
        return []

    def updates(self, items: Sequence[HistoryItem]) -> list[dict[str, Any]]:
        """The ``update`` objects of ``items`` (the next page), in order."""
        out: list[dict[str, Any]] = []
        calls = self._calls
        for item in items:
            role = item.role
            if role == ROLE_USER:
                out.extend(self.finish())
                upd: dict[str, Any] = {"sessionUpdate": U_USER_MESSAGE,
                                       "content": {"type": "text", "text": item.text}}
                if item.status:
                    upd["_meta"] = {META_ACPGATE: {META_STOP_REASON: item.status}}
                    self._open_cancel = True
                out.append(upd)
            elif role == ROLE_ASSISTANT:
                out.append({"sessionUpdate": U_AGENT_MESSAGE,
                            "content": {"type": "text", "text": item.text}})
            elif role == ROLE_THOUGHT:
                out.append({"sessionUpdate": U_AGENT_THOUGHT,
                            "content": {"type": "text", "text": item.text}})
            elif role == ROLE_TOOL_CALL:
                calls[item.tool_call_id] = (item.tool_name, item.title, item.tool_kind)
                upd = {
                    "sessionUpdate": U_TOOL_CALL, "toolCallId": item.tool_call_id,
                    "name": item.tool_name, "title": item.title or item.tool_name,
                    "kind": item.tool_kind or "other", "status": "completed",
                    "rawInput": _loads(item.arguments_json) or {},
                }
                content = _loads(item.content_json)
                if content:
                    upd["content"] = content
                out.append(upd)
            elif role == ROLE_TOOL_RESULT:
                call_name, call_title, call_kind = calls.get(item.tool_call_id, ("", "", ""))
                name = item.tool_name or call_name
                output = item.output
                content = _loads(item.content_json) or [
                    {"type": "content", "content": {"type": "text", "text": output}}]
                out.append({
                    "sessionUpdate": U_TOOL_CALL_UPDATE, "toolCallId": item.tool_call_id,
                    "status": item.status or "completed", "name": name,
                    "title": item.title or call_title or name,
                    "kind": item.tool_kind or call_kind or "other",
                    "rawOutput": output, "body": output, "content": content,
                })
        return out


def replay_updates(items: Sequence[HistoryItem],
                   marker_for: str = "") -> list[dict[str, Any]]:
    """The replay updates of a whole (short) conversation: :class:`Replay` on one page."""
    replay = Replay(marker_for)
    return replay.updates(items) + replay.finish()


def history_meta(items: Sequence[HistoryItem]) -> list[dict[str, Any]]:
    """The built-in agent's history items of ``items`` (docs/contracts.md)."""
    out: list[dict[str, Any]] = []
    for item in items:
        role = ROLE_NAME_BY_PB.get(item.role)
        if role is None:
            continue
        entry: dict[str, Any] = {"role": role}
        if item.text:
            entry["text"] = item.text
        if item.tool_call_id:
            entry["toolCallId"] = item.tool_call_id
        if item.tool_name:
            entry["toolName"] = item.tool_name
        if item.tool_kind:
            entry["toolKind"] = item.tool_kind
        if item.title:
            entry["title"] = item.title
        if item.role == ROLE_TOOL_CALL:
            args = _loads(item.arguments_json)
            entry["arguments"] = args if isinstance(args, dict) else {}
        if item.role == ROLE_TOOL_RESULT:
            entry["output"] = item.output
            entry["status"] = item.status or "completed"
        elif item.role == ROLE_USER and item.status:  # a cancelled turn
            entry["status"] = item.status
        out.append(entry)
    return out


def _line(item: HistoryItem) -> str | None:
    """One item of the plain transcript (None: not part of it)."""
    role = item.role
    if role == ROLE_USER:
        if item.status:  # a cancelled turn
            return f"User ({item.status} turn): {item.text}"
        return f"User: {item.text}"
    if role == ROLE_ASSISTANT:
        return f"Assistant: {item.text}"
    if role == ROLE_TOOL_CALL:
        return f"Tool call {item.tool_name or item.title}: {item.arguments_json}"
    if role == ROLE_TOOL_RESULT:
        return f"Tool result ({item.status or 'completed'}): {item.output}"
    return None


class CarryOver:
    """The plain transcript of a conversation read page by page, bounded: the newest
    ``max_chars`` characters (oldest lines dropped first, a single longer line cut to its
    end), and a note saying what was left out."""

    def __init__(self, max_chars: int = CARRY_OVER_MAX_CHARS) -> None:
        self._max = max_chars
        self._lines: collections.deque[str] = collections.deque()
        self._size = 0
        self._dropped = 0

    def add(self, items: Sequence[HistoryItem]) -> None:
        """Take the next page's items."""
        for item in items:
            line = _line(item)
            if line is None:
                continue
            if len(line) > self._max:
                self._dropped += len(line) - self._max
                line = line[-self._max:]
            self._lines.append(line)
            self._size += len(line) + len(_SEPARATOR)
            while self._size - len(_SEPARATOR) > self._max:
                old = self._lines.popleft()
                self._size -= len(old) + len(_SEPARATOR)
                self._dropped += len(old) + len(_SEPARATOR)

    def text(self) -> str | None:
        """The transcript kept (None when there was nothing to carry over)."""
        if not self._lines:
            return None
        body = _SEPARATOR.join(self._lines)
        if not self._dropped:
            return body
        note = CARRY_OVER_CUT_NOTE.format(limit=self._max, dropped=self._dropped, kept=len(body))
        return note + _SEPARATOR + body


def transcript(items: Sequence[HistoryItem],
               max_chars: int = CARRY_OVER_MAX_CHARS) -> str:
    """The transcript of a whole conversation ("" for none): :class:`CarryOver` on one page."""
    carry = CarryOver(max_chars)
    carry.add(items)
    return carry.text() or ""
