"""Wire constants of live sessions shared by several clients (multi-client attach
RFD, Message ID RFD): methods, update kinds, roles, history policies and messages. Their
error codes and ``_meta`` keys are in :mod:`services.common.protocol`, with the rest of
ACP's constants.
"""

from __future__ import annotations

from typing import Final

from services.common.acp.names import (
    M_SESSION_LOAD,
    M_SESSION_RESUME,
    U_AGENT_MESSAGE_CHUNK,
    U_AGENT_THOUGHT_CHUNK,
    U_USER_MESSAGE_CHUNK,
)

#: Multi-client attach RFD: join a live session as controller or observer, and
#: leave it again without ending it.
M_SESSION_ATTACH: Final = "session/attach"
M_SESSION_DETACH: Final = "session/detach"
#: acpgate's notice to a client whose attachment it closed (``reason``: ``slow_client``,
#: ``session_ended``): that session's updates no longer reach it.
M_ATTACHMENT_CLOSED: Final = "_acpgate/attachment_closed"

#: Multi-client attach RFD: another controller's prompt, and a permission request answered
#: by another controller.
U_PROMPT_RECEIVED: Final = "prompt_received"
U_PERMISSION_RESOLVED: Final = "permission_resolved"
#: Multi-client attach RFD: a client left the session (``client``: its clientInfo, role).
U_CLIENT_DISCONNECTED: Final = "client_disconnected"
#: The chunk updates that carry a ``messageId`` (Message ID RFD).
MESSAGE_CHUNKS: Final = frozenset({U_AGENT_MESSAGE_CHUNK, U_AGENT_THOUGHT_CHUNK,
                                   U_USER_MESSAGE_CHUNK})

# ------------------------------------------------------------------ session attach
ROLE_CONTROLLER: Final = "controller"
ROLE_OBSERVER: Final = "observer"
ATTACH_ROLES: Final = (ROLE_CONTROLLER, ROLE_OBSERVER)
HISTORY_FULL: Final = "full"
HISTORY_PENDING_ONLY: Final = "pending_only"
HISTORY_NONE: Final = "none"
HISTORY_AFTER_MESSAGE: Final = "after_message"
HISTORY_POLICIES: Final = (HISTORY_FULL, HISTORY_PENDING_ONLY, HISTORY_NONE,
                           HISTORY_AFTER_MESSAGE)
#: Why acpgate closed an attachment (``_acpgate/attachment_closed``).
DROP_SLOW_CLIENT: Final = "slow_client"
DROP_SESSION_ENDED: Final = "session_ended"
MSG_OBSERVER: Final = ("Session {session_id} is attached as an observer: it only watches "
                       "(no prompt, cancel, permission answer, mode, config or model change, "
                       "stop, close, delete, load, resume or agent method); detach it and "
                       "attach as a controller to act on it")
MSG_BAD_ROLE: Final = "Invalid role: must be one of {roles}"
MSG_BAD_HISTORY_POLICY: Final = "Invalid historyPolicy: must be one of {policies}"
MSG_AFTER_MESSAGE_REQUIRED: Final = "historyPolicy after_message requires afterMessageId"
MSG_SESSION_LIVE_ELSEWHERE: Final = ("Session {session_id} is live on another host ({host}): "
                                     "{then}")
#: What the client does next, with the serving host's ``[gateway] public_url`` …
MSG_LIVE_ELSEWHERE_RECONNECT: Final = "reconnect to {url} and attach it there"
#: … and without one (none is ever guessed from a bind address).
MSG_LIVE_ELSEWHERE_NO_URL: Final = ("attach it there (that host has no [gateway] public_url "
                                    "configured)")
#: … and when a sibling edge worker of this host serves it: the front door hands
#: a connection carrying the worker's affinity cookie or ``?worker=k`` to that worker.
MSG_ATTACH_ON_SIBLING_WORKER: Final = (
    "Session {session_id} is live on edge worker {worker} of this host: reconnect with its "
    "affinity cookie, or to /acp?worker={worker}, and attach it there")
MSG_SESSION_NOT_RUNNING: Final = (
    "Session {session_id} is stored but not running (it ended with its last connection or an "
    "acpgate restart): restore it with session/load or session/resume")
#: The methods that bring a stored session back (``data.acpgate.restoreWith``).
RESTORE_METHODS: Final = (M_SESSION_LOAD, M_SESSION_RESUME)
MSG_NOT_ATTACHED: Final = "Session {session_id} is not attached to this connection"
#: An attach again as observer by the one controller of a session that cannot be detached.
MSG_ONLY_CONTROLLER: Final = (
    "Session {session_id} has no other controller: this connection cannot watch it as an "
    "observer only (session/close ends it)")
