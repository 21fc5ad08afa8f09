"""The approval gate: autonomy, auto_approve/always_ask, and the client's answer (SPEC §6, §12).

Every denial comes back as a plain sentence that says who denied the call, so
the model can tell the user (or try something else).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.agent.enforce import matches_any, needs_approval
from services.agent.outcome import cancel_reason, cancel_timeout_secs, read_answer, selected_option
from services.agent.tools.base import ClientRequest
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    APPROVAL_TOOL_CALL_PREFIX,
    APPROVAL_TOOL_KIND,
    CANCEL_REASON_CLIENT_ERROR,
    CANCEL_REASON_CLIENT_GONE,
    CANCEL_REASON_TIMEOUT,
    M_REQUEST_PERMISSION,
    OPTION_ALLOW_ALWAYS,
    OPTION_ALLOW_ONCE,
    PERMISSION_OPTIONS,
)

log = get_logger("agent.approval")


@dataclass(frozen=True)
class Decision:
    """Whether a tool call may run; ``reason`` is the sentence for the model when not."""

    allowed: bool
    reason: str = ""


def permission_params(session_id: str, tool: str, summary: str,
                      arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The exact ``session/request_permission`` params of SPEC §6.

    ``kind`` is always ``execute`` (SPEC §6 gives it literally); the tool's own
    kind is on the ``tool_call`` update that precedes the request.
    ``rawInput.arguments`` (an extra key next to SPEC's ``tool`` and ``summary``)
    carries the complete arguments, so a client can show everything that would run.
    """
    return {
        "sessionId": session_id,
        "options": [dict(o) for o in PERMISSION_OPTIONS],
        "toolCall": {
            "toolCallId": f"{APPROVAL_TOOL_CALL_PREFIX}{uuid.uuid4()}",
            "title": f"Approve {tool}?",
            "kind": APPROVAL_TOOL_KIND,
            "status": "pending",
            "rawInput": {"tool": tool, "summary": summary, "arguments": dict(arguments)},
            "content": [{"type": "content", "content": {"type": "text", "text": summary}}],
        },
    }


class ApprovalGate:
    """Decides per tool call; remembers ``allow-always`` for the rest of the session."""

    def __init__(self, session_id: str, client_request: ClientRequest,
                 timeout_secs: float) -> None:
        self._session_id = session_id
        self._request = client_request
        self._timeout = timeout_secs
        self.always_allowed: set[str] = set()

    async def decide(self, policy: SecurityPolicy, tool: str, mutating: bool,
                     summary: str, arguments: Mapping[str, Any]) -> Decision:
        """Allow or deny one call of ``tool`` (``summary`` shown, ``arguments`` in full)."""
        if policy.autonomy == "readonly" and mutating:
            return Decision(False, f"The `{tool}` call was denied by the session policy: "
                                   "autonomy is readonly (no writes, no shell).")
        if not needs_approval(policy, tool):
            return Decision(True)
        # always_ask beats a remembered allow-always: those tools ask every time.
        if tool in self.always_allowed and not matches_any(tool, policy.always_ask):
            return Decision(True)
        params = permission_params(self._session_id, tool, summary, arguments)
        try:
            result = await self._request(M_REQUEST_PERMISSION, params, self._timeout)
        except TimeoutError:
            log.info("approval_timeout", session_id=self._session_id, tool=tool)
            return self._timed_out(tool)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("approval_failed", session_id=self._session_id, tool=tool,
                     error=type(exc).__name__)
            return _client_failed(tool)
        answer = read_answer(result)
        option = selected_option(answer)
        if option is not None:
            if option == OPTION_ALLOW_ONCE:
                return Decision(True)
            if option == OPTION_ALLOW_ALWAYS:
                self.always_allowed.add(tool)
                return Decision(True)
            return Decision(False, f"The user denied the `{tool}` call.")
        # The edge answers "cancelled" on the client's behalf and says why (docs/contracts.md).
        reason = cancel_reason(answer)
        log.info("approval_cancelled", session_id=self._session_id, tool=tool,
                 reason=reason or "user")
        if reason == CANCEL_REASON_TIMEOUT:
            return self._timed_out(tool, cancel_timeout_secs(answer))
        if reason in (CANCEL_REASON_CLIENT_ERROR, CANCEL_REASON_CLIENT_GONE):
            return _client_failed(tool)
        return Decision(False, f"The `{tool}` call was denied: the user dismissed the "
                               "approval request.")

    def _timed_out(self, tool: str, waited_secs: int | None = None) -> Decision:
        """The denial after no answer; ``waited_secs`` is the edge's timeout when it timed out."""
        secs = waited_secs if waited_secs is not None else int(self._timeout)
        return Decision(False, f"The `{tool}` call was denied automatically: the user gave "
                               f"no answer within {secs} seconds.")


def _client_failed(tool: str) -> Decision:
    return Decision(False, f"The `{tool}` call was denied automatically: the approval "
                           "request could not be answered (the client failed or left).")

