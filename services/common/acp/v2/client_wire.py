"""The v2 side of one client connection, at the JSON-RPC line level (pure, sans-I/O).

acpgate's session machinery speaks v1 lines; a connection that negotiated v2 passes
what it sends through :meth:`ClientWire.outbound` and what it reads through
:meth:`ClientWire.inbound`:

- ``session/update`` notifications are translated per session
  (:class:`~.updates.SessionTranslator`);
- an update of a v2 agent's child session, carried on its parent's stream, is sent as
  the child's own ``session/update`` (:func:`~.subagents.unwrap`); a subagent form
  acpgate did not make (a v1 agent's, its ids its own), or a child's card made for v1
  clients (:mod:`.child_cards`), is not sent;
- ``session/request_permission`` requests get v2's ``title``/``subject``, preceded by a
  ``requires_action`` state; the client's answer to one is followed by ``running``;
- JSON-RPC batches (an array of requests and notifications) are split for the peer, and
  their answers gathered into one array, sent once the last one is ready; an empty
  batch is one ``Invalid Request`` with id null, an invalid entry its own.

Every other line passes unchanged. Only v2 connections pay for any of this.

What is kept per session (its translator, its unanswered permission requests) is the
connection's to let go: :meth:`ClientWire.forget` when a session ends for it; a
permission request acpgate withdraws (``$/cancel_request``) is forgotten by itself (and
the client told ``running`` when it was the last one its session waited on). The
translators of sessions the connection no longer serves (the ``live`` predicate) are
swept whenever their number doubled since the last sweep, so a long-lived connection
holds what its live sessions need, whatever it missed to forget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import orjson

from services.common.acp.v2.child_cards import is_card
from services.common.acp.v2.names import STATE_REQUIRES_ACTION, STATE_RUNNING
from services.common.acp.v2.requests import permission_request_v2
from services.common.acp.v2.subagents import acpgate_made, unwrap
from services.common.acp.v2.updates import SessionTranslator
from services.common.protocol import (
    INVALID_REQUEST,
    M_CANCEL_REQUEST,
    M_REQUEST_PERMISSION,
    M_SESSION_UPDATE,
    MSG_INVALID_REQUEST,
)

__all__ = ["SWEEP_FLOOR", "ClientWire"]

#: Translators a connection holds before the first sweep of those it no longer serves
#: (then twice what the previous sweep kept, never less than this).
SWEEP_FLOOR = 64


#: How acpgate writes a ``session/update`` line, and the starts of an update that is a
#: message chunk with its ``messageId`` (the relay's common case: passed on unparsed).
_UPDATE_HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
_UPDATE_KEY = '"update":{'
_CHUNKS_WITH_ID = tuple(f'"sessionUpdate":"{kind}","messageId":' for kind in (
    "agent_message_chunk", "agent_thought_chunk"))


def _chunk_head(line: str) -> str | None:
    """For a ``session/update`` line whose update is an agent message or thought chunk that
    names its message first (nothing to translate, so it is not parsed): the line up to its
    ``"messageId":``; else None. (A string value cannot hold these unescaped quotes, so the
    first ``"update":{`` after the session id is the update's.)

    Every line that starts with the head so found is such a line too: its first
    ``"update":{`` is the same one, inside the head. So a run of chunks is recognised by one
    parse of this kind and a ``startswith`` per line (:meth:`ClientWire.outbound`)."""
    if not line.startswith(_UPDATE_HEAD):
        return None
    at = line.find(_UPDATE_KEY, len(_UPDATE_HEAD))
    if at <= 0:
        return None
    start = at + len(_UPDATE_KEY)
    for marker in _CHUNKS_WITH_ID:
        if line.startswith(marker, start):
            return line[:start + len(marker)]
    return None


def _line(message: dict[str, Any]) -> str:
    return orjson.dumps(message).decode()


def _note(sid: str, update: dict[str, Any]) -> str:
    return _line({"jsonrpc": "2.0", "method": M_SESSION_UPDATE,
                  "params": {"sessionId": sid, "update": update}})


def _invalid(entry_id: Any = None) -> str:
    return _line({"jsonrpc": "2.0", "id": entry_id,
                  "error": {"code": INVALID_REQUEST, "message": MSG_INVALID_REQUEST}})


def _key(request_id: Any) -> str:
    return orjson.dumps(request_id).decode()


@dataclass
class _Batch:
    waiting: set[str]
    answers: list[str] = field(default_factory=list)


class ClientWire:
    """The v2 translation of one client connection (module doc)."""

    def __init__(self, live: Callable[[str], bool] | None = None) -> None:
        self.sessions: dict[str, SessionTranslator] = {}
        #: Our permission requests not answered yet: request id key → session id.
        self._asking: dict[str, str] = {}
        #: Open batches, and which one each awaited request id belongs to.
        self._batch_of: dict[str, _Batch] = {}
        #: Whether the connection still serves a session (None: every session kept).
        self._live = live
        self._sweep_at = SWEEP_FLOOR

    def session(self, sid: str) -> SessionTranslator:
        """The translator of session ``sid`` (made on first use)."""
        found = self.sessions.get(sid)
        if found is None:
            if len(self.sessions) >= self._sweep_at:
                self._sweep()
            found = self.sessions[sid] = SessionTranslator()
        return found

    def forget(self, sid: str) -> None:
        """Session ``sid`` ended for this connection: its translator and its unanswered
        permission requests go (a later line of it starts afresh)."""
        self.sessions.pop(sid, None)
        if self._asking:
            for key in [k for k, asked in self._asking.items() if asked == sid]:
                del self._asking[key]

    def held(self) -> int:
        """How many entries the connection's per-session state holds (translators and
        unanswered permission requests)."""
        return len(self.sessions) + len(self._asking)

    def _sweep(self) -> None:
        """Forget the sessions the connection no longer serves."""
        live = self._live
        if live is not None:
            for sid in [sid for sid in self.sessions if not live(sid)]:
                self.forget(sid)
        self._sweep_at = max(SWEEP_FLOOR, 2 * len(self.sessions))

    def updates(self, sid: str, updates: list[dict[str, Any]]) -> list[str]:
        """v2 updates of session ``sid`` as ``session/update`` lines."""
        return [_note(sid, u) for u in updates]

    # ------------------------------------------------------------------ outbound

    def outbound(self, lines: list[str]) -> list[str]:
        """What acpgate sends (v1 lines), as the v2 client is to get it."""
        if not lines:
            return lines
        # A run of streamed text, the common case: the lines of one message share their
        # head, so one C-level startswith per line recognises them (no Python call each).
        head = _chunk_head(lines[0])
        if head is not None and all(map(str.startswith, lines, repeat(head))):
            return lines
        out: list[str] = []
        for line in lines:
            if (head is not None and line.startswith(head)) or _chunk_head(line) is not None:
                out.append(line)
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                out.append(line)
                continue
            if not isinstance(message, dict):
                out.append(line)
                continue
            method = message.get("method")
            if method == M_SESSION_UPDATE:
                out.extend(self._update(message, line))
            elif method == M_REQUEST_PERMISSION and "id" in message:
                out.extend(self._permission(message))
            elif method == M_CANCEL_REQUEST and self._asking:
                out.extend(self._withdrawn(message, line))
            elif method is None and self._batch_of:
                out.extend(self._answer(message, line))
            else:
                out.append(line)
        return out

    def _update(self, message: dict[str, Any], line: str) -> list[str]:
        params = message.get("params")
        if not isinstance(params, dict):
            return [line]
        sid = params.get("sessionId")
        update = params.get("update")
        if not isinstance(sid, str) or not isinstance(update, dict):
            return [line]
        if is_card(update):
            return []  # a v1 client's view of a child: this client gets the child's session
        child = unwrap(update)
        if child is not None:
            return self.updates(child[0], [child[1]])
        if not acpgate_made(update):
            return []  # an agent's own subagent form: its ids are no sessions of acpgate's
        translated = self.session(sid).translate(update)
        if len(translated) == 1 and translated[0] is update:
            return [line]
        return self.updates(sid, translated)

    def _permission(self, message: dict[str, Any]) -> list[str]:
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        sid = params.get("sessionId")
        out: list[str] = []
        if isinstance(sid, str):
            self._asking[_key(message["id"])] = sid
            out = self.updates(sid, self.session(sid).state(STATE_REQUIRES_ACTION))
        out.append(_line({**message, "params": permission_request_v2(params)}))
        return out

    def _withdrawn(self, message: dict[str, Any], line: str) -> list[str]:
        """acpgate withdrew a request: a permission request's session no longer waits on
        this client for it (``running`` again when it waited on nothing else)."""
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        sid = self._asking.pop(_key(request_id), None)
        translator = self.sessions.get(sid) if sid is not None else None
        if translator is None or translator.foreground != STATE_REQUIRES_ACTION \
                or sid in self._asking.values():
            return [line]
        assert sid is not None
        return [line, *self.updates(sid, translator.state(STATE_RUNNING))]

    def _answer(self, message: dict[str, Any], line: str) -> list[str]:
        key = _key(message.get("id"))
        batch = self._batch_of.pop(key, None)
        if batch is None:
            return [line]
        batch.answers.append(line)
        batch.waiting.discard(key)
        if batch.waiting:
            return []
        return ["[" + ",".join(batch.answers) + "]"]

    # ------------------------------------------------------------------ inbound

    def inbound(self, line: str) -> tuple[list[str], list[str]]:
        """A line the client sent → (the lines for the JSON-RPC peer, in order; the lines
        to send the client after they were handed over)."""
        stripped = line.lstrip() if isinstance(line, str) else line
        if isinstance(stripped, str) and stripped.startswith("["):
            return self._batch(line)
        if self._asking and isinstance(line, str) and '"method"' not in line:
            return [line], self._answered(line)
        return [line], []

    def _answered(self, line: str) -> list[str]:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(message, dict) or "method" in message:
            return []
        sid = self._asking.pop(_key(message.get("id")), None)
        if sid is None:
            return []
        return self.updates(sid, self.session(sid).state(STATE_RUNNING))

    def _batch(self, line: str) -> tuple[list[str], list[str]]:
        try:
            entries = orjson.loads(line)
        except orjson.JSONDecodeError:
            return [line], []  # the peer answers the parse error
        if not isinstance(entries, list) or not entries:
            return [], [_invalid()]
        feed: list[str] = []
        invalid: list[str] = []
        waiting: set[str] = set()
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("method"), str):
                invalid.append(_invalid())
                continue
            if entry.get("id") is not None:
                waiting.add(_key(entry["id"]))
            feed.append(_line(entry))
        if waiting:
            batch = _Batch(waiting, list(invalid))
            for key in waiting:
                self._batch_of[key] = batch
            return feed, []
        return feed, (["[" + ",".join(invalid) + "]"] if invalid else [])
