"""The adapter's ``session/update`` lines recognised by shape, relayed without a re-encode.

The edge relays every ``session/update`` of an adapter with the session id
rewritten (SPEC §1, §5). Parsing the whole line into dicts, replacing
``params.sessionId`` and encoding the message again was the largest share of
``acpgate acp``'s CPU per relayed update (bench/PROFILE.md). Most adapters
(the built-in agent, the ACP SDKs) write every update in one compact shape::

    {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"<id>","update":U}}

A line that is exactly that — this adapter's own session id, and ``U`` on its
own one JSON object (``orjson.loads`` refuses trailing data, so nothing can hide
after it) — is a well-formed notification whose only other content is ``U``.
:class:`UpdateLines` parses ``U`` alone (the turn accumulator needs it) and
relays the line as the edge's prefix followed by the adapter's own bytes of
``U``: the same message the parsed path sends, the session id rewritten. ``U``
keeps the adapter's spelling (its whitespace, escapes and number forms), which
is the same JSON value. When ``U`` is an assistant text chunk whose text needs no
unescaping, not even ``U`` is parsed: the text is handed on as a ``str``
(:data:`~services.edge.sessions.turn.RelayedUpdate`). Every other line — another shape, key order, spacing
or session id, or one ``U`` that is not a lone object — goes through the
general JSON-RPC path as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from services.common.protocol import JSONRPC_VERSION, M_SESSION_UPDATE, U_AGENT_MESSAGE
from services.edge.adapter.agent_meta import carries_ours

#: One relayed update as the accumulator takes a burst: its ``update`` object, or (the
#: common case, read without parsing by this module) the text of
#: an ``agent_message_chunk`` with one text block.
RelayedUpdate = dict[str, Any] | str
#: A run of recognised updates (see :data:`RelayedUpdate`) and their relayed lines.
UpdateSink = Callable[[Sequence[RelayedUpdate], list[str]], Awaitable[None]]
#: The general path for a run of other lines (the JSON-RPC peer's ``feed_batch``).
LineSink = Callable[[list[str]], Awaitable[None]]

_SUFFIX = "}}"
#: The common update, an assistant text chunk, as the compact encoders write it: its text
#: is read without parsing when it needs no unescaping (:class:`UpdateLines`).
_CHUNK_TAIL = '"}}'
_CHUNK_HEAD = orjson.dumps({"sessionUpdate": U_AGENT_MESSAGE, "content": {
    "type": "text", "text": ""}}).decode()[: -len(_CHUNK_TAIL)]
#: How such a line ends: the text's closing quote, then the four objects'.
_CHUNK_END = _CHUNK_TAIL + _SUFFIX


def update_prefix(session_id: str) -> str:
    """Everything of a compact ``session/update`` line before its ``update`` object."""
    head = orjson.dumps({"jsonrpc": JSONRPC_VERSION, "method": M_SESSION_UPDATE,
                         "params": {"sessionId": session_id, "update": None}}).decode()
    return head[: -len("null" + _SUFFIX)]


class UpdateLines:
    """Splits an adapter's lines into runs: recognised updates, and everything else."""

    def __init__(self) -> None:
        self._ids: tuple[str, str] = ("", "")
        self._in = ""
        self._out = ""

    def _prefixes(self, adapter_session_id: str, edge_session_id: str) -> tuple[str, str]:
        if self._ids != (adapter_session_id, edge_session_id):
            self._ids = (adapter_session_id, edge_session_id)
            self._in = update_prefix(adapter_session_id)
            self._out = update_prefix(edge_session_id)
        return self._in, self._out

    async def relay(self, lines: Sequence[str], adapter_session_id: str, edge_session_id: str,
                    updates: UpdateSink, others: LineSink, *, screen: bool = False) -> None:
        """Hand ``lines`` on in stream order: runs of recognised updates to ``updates``
        (already rewritten), runs of other lines to ``others``. ``screen`` (an external
        agent's lines): an update carrying ``_meta.acpgate``, or of a kind only acpgate sends,
        goes to ``others``, whose path screens it (:mod:`services.edge.adapter.agent_meta`)."""
        if not adapter_session_id:  # no session yet: nothing can be recognised
            await others(list(lines))
            return
        prefix, out_prefix = self._prefixes(adapter_session_id, edge_session_id)
        start = len(prefix)
        chunk = prefix + _CHUNK_HEAD
        text_at = len(chunk)
        chunk_min = text_at + len(_CHUNK_END)
        text_end = -len(_CHUNK_END)
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        parsed: list[RelayedUpdate] = []
        relayed: list[str] = []
        rest: list[str] = []
        for line in lines:
            update: RelayedUpdate | None = None
            if line.startswith(chunk) and line.endswith(_CHUNK_END) and len(line) >= chunk_min:
                text = line[text_at:text_end]
                # No quote, no escape, no control character: the JSON string's
                # value is its bytes, and the line is valid as it stands.
                if '"' not in text and "\\" not in text and text.isprintable():
                    update = text
            if update is None and line.startswith(prefix) and line.endswith(_SUFFIX):
                try:
                    value = loads(line[start:-2])
                except decode_error:
                    value = None
                if type(value) is dict and not (screen and carries_ours(value)):
                    update = value
            if update is not None:
                if rest:
                    await others(rest)
                    rest = []
                parsed.append(update)
                relayed.append(out_prefix + line[start:])
                continue
            if parsed:
                await updates(parsed, relayed)
                parsed, relayed = [], []
            rest.append(line)
        if parsed:
            await updates(parsed, relayed)
        if rest:
            await others(rest)
