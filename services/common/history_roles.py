"""The session contract's ``HistoryItem.Role`` enum ↔ the history role names.

The names themselves are ``HISTORY_ROLE_*`` in :mod:`services.common.protocol`;
this is the one mapping between them and the generated enum, shared by the
session service (store records ↔ messages) and the edge (messages ↔
``_meta.acpgate.history``), which must not import the session service.
"""

from __future__ import annotations

from typing import Final

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.protocol import (
    HISTORY_ROLE_ASSISTANT,
    HISTORY_ROLE_THOUGHT,
    HISTORY_ROLE_TOOL_CALL,
    HISTORY_ROLE_TOOL_RESULT,
    HISTORY_ROLE_USER,
)

__all__ = ["PB_ROLE_BY_NAME", "ROLE_NAME_BY_PB"]

#: ``HistoryItem.Role`` value → role name (``ROLE_UNSPECIFIED`` has no name).
ROLE_NAME_BY_PB: Final[dict[pb.HistoryItem.Role.ValueType, str]] = {
    pb.HistoryItem.ROLE_USER: HISTORY_ROLE_USER,
    pb.HistoryItem.ROLE_ASSISTANT: HISTORY_ROLE_ASSISTANT,
    pb.HistoryItem.ROLE_THOUGHT: HISTORY_ROLE_THOUGHT,
    pb.HistoryItem.ROLE_TOOL_CALL: HISTORY_ROLE_TOOL_CALL,
    pb.HistoryItem.ROLE_TOOL_RESULT: HISTORY_ROLE_TOOL_RESULT,
}
#: Role name → ``HistoryItem.Role`` value.
PB_ROLE_BY_NAME: Final[dict[str, pb.HistoryItem.Role.ValueType]] = {
    name: value for value, name in ROLE_NAME_BY_PB.items()
}
