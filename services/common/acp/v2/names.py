"""ACP v2 names acpgate uses (methods, update kinds, states, messages); its error codes are in
:mod:`services.common.protocol` with every other code.

Normative source: the v2 schema of ``@agentclientprotocol/sdk`` 2.4.0
(``schema/v2/schema.json``, vendored under ``protos/acp/v2/``).
"""

from __future__ import annotations

from typing import Final

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
M_AUTH_LOGIN: Final = "auth/login"
M_AUTH_LOGOUT: Final = "auth/logout"
M_TOOL_CALL_CANCEL: Final = "tool_call/cancel"
M_TERMINAL_CANCEL: Final = "terminal/cancel"

# Error messages v2 names (its codes are in services.common.protocol).
MSG_UNSUPPORTED_VERSION: Final = "Unsupported protocol version {requested}"
MSG_V2_SESSION_NOT_FOUND: Final = "Session not found: {session_id}"

# session/update kinds v2 adds or keeps.
U2_USER_MESSAGE_CHUNK: Final = "user_message_chunk"
U2_AGENT_MESSAGE_CHUNK: Final = "agent_message_chunk"
U2_AGENT_THOUGHT_CHUNK: Final = "agent_thought_chunk"
U2_USER_MESSAGE: Final = "user_message"
U2_STATE: Final = "state_update"
U2_TOOL_CALL_UPDATE: Final = "tool_call_update"
U2_TOOL_CALL_CONTENT_CHUNK: Final = "tool_call_content_chunk"
U2_PLAN_UPDATE: Final = "plan_update"
U2_CONFIG_OPTION: Final = "config_option_update"
U2_AVAILABLE_COMMANDS: Final = "available_commands_update"
U2_NOTICE: Final = "notice"
U2_REPLAY_COMPLETE: Final = "replay_complete"
#: acpgate's own update kinds, as a v2 client gets them: v2 reserves names without a
#: leading ``_`` for the protocol, so each one is prefixed.
OWN_KIND_PREFIX: Final = "_acpgate_"

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
