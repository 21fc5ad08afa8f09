"""ACP v2 names acpgate uses (methods, update kinds, states, messages); its error codes are in
:mod:`services.common.protocol` with every other code.

Normative source: the v2 schema of ``@agentclientprotocol/sdk`` 2.4.0
(``schema/v2/schema.json``, vendored under ``protos/acp/v2/``). Its method names and update
kinds are generated from it (:mod:`services.common.acp.names`) and kept here under the names
acpgate uses.
"""

from __future__ import annotations

from typing import Final

from services.common.acp import names as acp_names

PROTOCOL_V1: Final = 1
PROTOCOL_V2: Final = 2
#: The versions acpgate serves to clients, oldest first.
SUPPORTED_VERSIONS: Final = (PROTOCOL_V1, PROTOCOL_V2)
#: An agent's ``protocol = "auto"``: offer 2, speak what the agent answers.
PROTOCOL_AUTO: Final = -1


def protocol_number(value: int | str) -> int:
    """``[agents.<alias>] protocol`` as a number: :data:`PROTOCOL_AUTO`, 1 or 2."""
    if isinstance(value, int) and value in SUPPORTED_VERSIONS:
        return value
    return PROTOCOL_AUTO if value == "auto" else PROTOCOL_V1

# Methods new or renamed in v2.
M_AUTH_LOGIN: Final = acp_names.M2_AUTH_LOGIN
M_AUTH_LOGOUT: Final = acp_names.M2_AUTH_LOGOUT
M_TOOL_CALL_CANCEL: Final = acp_names.M2_TOOL_CALL_CANCEL
M_TERMINAL_CANCEL: Final = acp_names.M2_TERMINAL_CANCEL

#: What a v2 client's ``tool_call/cancel`` / ``terminal/cancel`` gets on a v1 agent.
MSG_NO_V1_CANCEL: Final = ("{method} is not available: the session's agent speaks ACP v1, "
                           "which cannot cancel one tool call or terminal (session/cancel "
                           "cancels the turn)")

#: A v2 client's ``session/resume`` of a child session.
MSG_CHILD_SETUP: Final = ("Session {session_id} is a subagent session of {parent}: its "
                          "updates come with its parent's (resume {parent})")

# Error messages v2 names (its codes are in services.common.protocol).
MSG_UNSUPPORTED_VERSION: Final = "Unsupported protocol version {requested}"
MSG_V2_SESSION_NOT_FOUND: Final = "Session not found: {session_id}"
#: A ``session/prompt`` whose ``idempotencyKey`` is longer than the edge remembers.
MSG_LONG_IDEMPOTENCY_KEY: Final = "idempotencyKey must be at most {max} characters"
#: A ``session/prompt`` past the prompts that may wait for one session's turn (-32002).
MSG_PROMPTS_WAITING: Final = ("Session {session_id} has {max} prompts waiting for its turn "
                              "already: send more once they ran (session/cancel ends the "
                              "running one)")

# session/update kinds v2 adds or keeps.
U2_USER_MESSAGE_CHUNK: Final = acp_names.U2_USER_MESSAGE_CHUNK
U2_AGENT_MESSAGE_CHUNK: Final = acp_names.U2_AGENT_MESSAGE_CHUNK
U2_AGENT_THOUGHT_CHUNK: Final = acp_names.U2_AGENT_THOUGHT_CHUNK
U2_USER_MESSAGE: Final = acp_names.U2_USER_MESSAGE
U2_STATE: Final = acp_names.U2_STATE_UPDATE
U2_TOOL_CALL_UPDATE: Final = acp_names.U2_TOOL_CALL_UPDATE
U2_TOOL_CALL_CONTENT_CHUNK: Final = acp_names.U2_TOOL_CALL_CONTENT_CHUNK
U2_PLAN_UPDATE: Final = acp_names.U2_PLAN_UPDATE
U2_CONFIG_OPTION: Final = acp_names.U2_CONFIG_OPTION_UPDATE
U2_AVAILABLE_COMMANDS: Final = acp_names.U2_AVAILABLE_COMMANDS_UPDATE
U2_NOTICE: Final = acp_names.U2_NOTICE
#: From RFDs newer than the vendored v2 schema (not generated): session replay, and the
#: Subagent Sessions RFD (completed with v2's Preview).
U2_REPLAY_COMPLETE: Final = "replay_complete"
U2_SUBAGENT_UPDATE: Final = "subagent_update"
U2_SESSION_MESSAGE: Final = "session_message"
U2_SESSION_MESSAGE_CHUNK: Final = "session_message_chunk"
#: acpgate's own kind (v1 side) carrying an update of a v2 agent's child session on its
#: parent's stream: ``{sessionId: <acpgate's child id>, update: <the child's v2 update>}``.
OWN_CHILD_UPDATE: Final = "subagent_session_update"
#: acpgate's own update kinds, as a v2 client gets them: v2 reserves names without a
#: leading ``_`` for the protocol, so each one is prefixed.
OWN_KIND_PREFIX: Final = "_acpgate_"

#: A v1 client's card of a child session (:mod:`.child_cards`): a tool call acpgate makes
#: on the parent, its id acpgate's prefix and the child's id; its title when the child has
#: none; the most characters of the child's answer it shows (the last ones).
CHILD_CARD_KIND: Final = "think"
CHILD_CARD_ID_PREFIX: Final = "acpgate-subagent-"
CHILD_CARD_TITLE: Final = "Subagent"
CHILD_CARD_TEXT_CHARS: Final = 16_000
#: What the translation keeps of an agent's choosing, per adapter (:mod:`.agent_wire`):
#: the agent's sessions it tracks (acpgate's own setup requests always get one; an update
#: naming another session past the bound is dropped), each session's tool calls (past the
#: bound the oldest is forgotten: a later update of it starts it anew), and each tool
#: call's accumulated content (chunks, and characters as JSON): past either bound a
#: chunk still reaches v2 clients, v1's content stays as it was.
MAX_AGENT_SESSIONS: Final = 16
MAX_TOOL_CALLS_KEPT: Final = 1024
MAX_CALL_CONTENT_CHUNKS: Final = 256
MAX_CALL_CONTENT_CHARS: Final = 256 * 1024
#: v1 tool call statuses a card takes.
TOOL_IN_PROGRESS: Final = "in_progress"
TOOL_COMPLETED: Final = "completed"
TOOL_FAILED: Final = "failed"

# state_update states.
STATE_RUNNING: Final = "running"
STATE_IDLE: Final = "idle"
STATE_REQUIRES_ACTION: Final = "requires_action"
STOP_ERROR: Final = "error"

# Replay cursors of session/resume.
REPLAY_START: Final = "start"
#: acpgate's own cursor: ``{"type": "_acpgate_event", "eventId": N}`` replays from event N
#: (inclusive) of a live session's numbered updates (``_meta.acpgate.eventId``).
REPLAY_ACPGATE_EVENT: Final = "_acpgate_event"
MSG_BAD_REPLAY: Final = "Unsupported replayFrom: the types are start and " + REPLAY_ACPGATE_EVENT

#: The mode config option acpgate makes of a v1 agent's ``modes``.
MODE_CONFIG_ID: Final = "mode"
CATEGORY_MODE: Final = "mode"
#: The plan id a v1 agent's one plan gets.
V1_PLAN_ID: Final = "plan"
#: A permission request's title when the v1 request names no tool call title.
DEFAULT_PERMISSION_TITLE: Final = "Permission requested"
