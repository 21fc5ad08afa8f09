"""The ACP remote transport's protocol constants (RFD "Streamable HTTP & WebSocket
Transport"): the headers, content types and method sets the transport routes by, and
nothing more. Kept beside :mod:`services.common.protocol`, whose method names they use.
"""

from __future__ import annotations

from typing import Final

from services.common.protocol import (
    M_SESSION_CANCEL,
    M_SESSION_CLOSE,
    M_SESSION_FORK,
    M_SESSION_LOAD,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    M_SESSION_RESUME,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    M_SESSION_SET_MODEL,
)

H_CONNECTION_ID: Final = "Acp-Connection-Id"
H_SESSION_ID: Final = "Acp-Session-Id"
CONTENT_TYPE_JSON: Final = "application/json"
CONTENT_TYPE_SSE: Final = "text/event-stream"
#: Methods whose POST must name its session in ``Acp-Session-Id`` (400 without): the ones
#: every official client sends it for (a client may send it for any method with a sessionId).
SESSION_HEADER_METHODS: Final = frozenset({
    M_SESSION_PROMPT, M_SESSION_CANCEL, M_SESSION_CLOSE, M_SESSION_SET_MODE,
    M_SESSION_SET_CONFIG_OPTION, M_SESSION_SET_MODEL})
#: Methods whose answer goes on the connection stream: they bring a session to a connection
#: that has no stream for it yet (new, load, resume, fork).
CONNECTION_STREAM_METHODS: Final = frozenset({
    M_SESSION_NEW, M_SESSION_LOAD, M_SESSION_RESUME, M_SESSION_FORK})
#: The cookie a load balancer can route a reconnecting client back to this host by.
AFFINITY_COOKIE: Final = "acpgate_affinity"
#: The notification (SSE ``event: error``) a resumed stream gets when events it asks for
#: with ``Last-Event-ID`` are no longer held.
M_REPLAY_GAP: Final = "_acpgate/replay_gap"
