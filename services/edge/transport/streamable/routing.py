"""Which stream each message of one Streamable HTTP connection takes (ACP RFD), sans I/O.

A connection has one connection-scoped stream and one stream per *attached*
session. The RFD's rules, and acpgate's for what the RFD leaves open:

- a session is attached once the client names it in ``Acp-Session-Id`` (a GET that
  opens its stream, a POST), or once a result carrying it as ``sessionId`` passes
  (``session/new``, ``session/fork``): from then on everything of that session
  goes on its stream, held there until the client reads it;
- a request or notification of the agent side whose ``params.sessionId`` names an
  attached session goes on that session's stream, anything else on the
  connection stream — so a client that has not opened a session's stream yet
  (the Python SDK's ``session/load``) still sees its messages, and learns the id;
- an answer to a client request goes where its request pointed: to the session it
  named (header or ``params.sessionId``) when that one is attached, except the
  answers of ``session/new|load|resume|fork``, which the RFD puts on the
  connection stream; everything else on the connection stream;
- the answer to ``initialize`` is captured for the POST that asked (200 + JSON).

POSTs are checked here too: 400 for a session-scoped method without
``Acp-Session-Id``, for a header that contradicts ``params.sessionId``, and for an
answer whose header names another session than the request it answers went to.
Nothing else of ACP is looked at: the method, the ``id``, a ``sessionId``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from services.common.protocol import M_INITIALIZE
from services.common.remote_transport import (
    CONNECTION_STREAM_METHODS,
    H_SESSION_ID,
    SESSION_HEADER_METHODS,
)

__all__ = ["CAPTURED", "CONNECTION", "Inbound", "Refusal", "Router", "classify", "id_key"]

#: The stream key of the connection-scoped stream (session streams are keyed by id).
CONNECTION: Final = None
#: What :meth:`Router.route` returns for the captured ``initialize`` answer.
CAPTURED: Final = "\0captured"
#: Sessions one connection may have attached at once (each a stream with a replay buffer).
MAX_SESSION_STREAMS: Final = 32
#: Agent→client requests remembered for the check of their answers (oldest dropped).
MAX_SENT_REQUESTS: Final = 4096

#: A JSON-RPC id as a key: its type and value, so 1 and "1" never meet.
IdKey = tuple[str, Any]
StreamKey = str | None


def id_key(value: Any) -> IdKey | None:
    """The key of a JSON-RPC ``id`` (string, number or null), else None."""
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return ("n", value)
    if value is None:
        return ("null", None)
    return None


def _session_of(obj: Any) -> str | None:
    if isinstance(obj, dict):
        sid = obj.get("sessionId")
        if isinstance(sid, str):
            return sid
    return None


@dataclass(frozen=True)
class Inbound:
    """A client message as the router sees it."""

    method: str | None
    #: The id's key when the message has an ``id`` member.
    id: IdKey | None
    has_id: bool
    params_session: str | None

    @property
    def is_response(self) -> bool:
        """An answer to one of the agent side's requests."""
        return self.method is None and self.has_id

    @property
    def is_initialize(self) -> bool:
        """An ``initialize`` request (the one POST answered with 200 + JSON)."""
        return self.method == M_INITIALIZE and self.has_id


def classify(message: dict[str, Any]) -> Inbound:
    """What routing needs of one client message."""
    method = message.get("method")
    return Inbound(method if isinstance(method, str) else None, id_key(message.get("id")),
                   "id" in message, _session_of(message.get("params")))


@dataclass(frozen=True)
class Refusal:
    """A POST refused before it reaches the dialect: the HTTP status and why."""

    status: int
    text: str


@dataclass(frozen=True)
class _Asked:
    """A client request waiting for its answer: the session it named, where its answer goes."""

    session: str | None
    to_connection: bool


class Router:
    """The routing state of one connection; ``evict`` frees a session slot when full
    (returns the session it detached, or None when every slot is in use)."""

    def __init__(self, evict: Callable[[], str | None] = lambda: None,
                 max_sessions: int = MAX_SESSION_STREAMS) -> None:
        self._evict = evict
        self.max_sessions = max_sessions
        #: Attached sessions, least recently attached first.
        self.attached: OrderedDict[str, None] = OrderedDict()
        self._asked: dict[IdKey, _Asked] = {}
        self._sent: OrderedDict[IdKey, StreamKey] = OrderedDict()
        #: The id of the ``initialize`` whose answer is captured, if one is pending.
        self.capture: IdKey | None = None

    # ------------------------------------------------------------ sessions

    def attach(self, sid: str) -> bool:
        """Attach ``sid`` (True), or False when every slot is taken and none can be freed."""
        if sid in self.attached:
            return True
        if len(self.attached) >= self.max_sessions:
            freed = self._evict()
            if freed is None:
                return False
            self.attached.pop(freed, None)
        self.attached[sid] = None
        return True

    def detach(self, sid: str) -> None:
        """Forget ``sid`` (its stream was dropped)."""
        self.attached.pop(sid, None)

    # ------------------------------------------------------------ client → agent

    def check(self, msg: Inbound, header: str | None) -> Refusal | None:
        """The RFD's 400s for one POSTed message (``header``: its ``Acp-Session-Id``)."""
        if msg.method is not None:
            if header is None and msg.method in SESSION_HEADER_METHODS:
                return Refusal(400, f"Missing {H_SESSION_ID}: {msg.method} is session-scoped")
            if header is not None and msg.params_session is not None \
                    and header != msg.params_session:
                return Refusal(400, f"Mismatched {H_SESSION_ID}: it names another session "
                                    "than params.sessionId")
        elif msg.is_response and header is not None and msg.id is not None:
            went_to = self._sent.get(msg.id, header)
            if went_to != header:
                return Refusal(400, f"Mismatched {H_SESSION_ID}: the request this answers "
                                    "was not sent on that session's stream")
        return None

    def accepted(self, msg: Inbound, header: str | None) -> None:
        """Note a POSTed message handed to the dialect (where its answer will go)."""
        if msg.is_response:
            if msg.id is not None:
                self._sent.pop(msg.id, None)
            return
        if msg.method is None or not msg.has_id or msg.id is None:
            return
        if msg.is_initialize:
            self.capture = msg.id
            return
        self._asked[msg.id] = _Asked(header or msg.params_session,
                                     msg.method in CONNECTION_STREAM_METHODS)

    # ------------------------------------------------------------ agent → client

    def route(self, message: Any) -> StreamKey:
        """The stream ``message`` (a JSON-RPC message of the dialect) goes on, or CAPTURED."""
        if not isinstance(message, dict):
            return CONNECTION
        key = id_key(message.get("id")) if "id" in message else None
        if "method" not in message:
            return self._route_answer(key, message)
        sid = _session_of(message.get("params"))
        stream = sid if sid is not None and sid in self.attached else CONNECTION
        if key is not None:
            self._sent[key] = stream
            while len(self._sent) > MAX_SENT_REQUESTS:
                self._sent.popitem(last=False)
        return stream

    def _route_answer(self, key: IdKey | None, message: dict[str, Any]) -> StreamKey:
        if key is not None and key == self.capture:
            self.capture = None
            return CAPTURED
        asked = self._asked.pop(key, None) if key is not None else None
        established = _session_of(message.get("result"))
        if established is not None:
            self.attach(established)
        if asked is None or asked.to_connection or asked.session is None:
            return CONNECTION
        return asked.session if asked.session in self.attached else CONNECTION
