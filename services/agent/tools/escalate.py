"""escalate_to_human: the agent hands a decision it should not make alone to the human (SPEC §6).

The seed routes approvals "through ask_user/escalate_to_human" over the same
back-channel as a tool approval. Where ``ask_user`` asks a question with a
fixed list of answers, an escalation is a situation — a one-line ``summary``,
optional ``context``, an ``urgency`` (``low``/``medium``/``high``/``critical``)
— that the human approves or rejects before the agent goes on. It goes out as
``session/request_permission`` with the options ``allow-once`` ("Approve") and
``reject-once`` ("Reject"), or, when the client advertised elicitation, as an
``elicitation/create`` form with the decision and an optional free-text reply.
Anything but an approval denies: a rejection, a dismissal, no answer within
``session_timeout_secs``, a client that failed or left — and the model is
told which. The tool is the question itself, so it never needs approval, and
asking a human is never dangerous, so every autonomy level has it.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from services.agent.outcome import cancel_reason, cancel_timeout_secs, read_answer, selected_option
from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolError,
    ToolResult,
    require_str,
)
from services.common.protocol import (
    APPROVAL_TOOL_CALL_PREFIX,
    APPROVAL_TOOL_KIND,
    CANCEL_REASON_CLIENT_ERROR,
    CANCEL_REASON_CLIENT_GONE,
    CANCEL_REASON_TIMEOUT,
    M_ELICITATION_CREATE,
    M_REQUEST_PERMISSION,
    OPTION_ALLOW_ONCE,
    OPTION_REJECT_ONCE,
)

URGENCY_LEVELS = ("low", "medium", "high", "critical")
DEFAULT_URGENCY = "medium"
#: An escalation is one decision: approve or reject (no "always": it is not a tool grant).
ESCALATION_OPTIONS = (
    {"optionId": OPTION_ALLOW_ONCE, "name": "Approve", "kind": "allow_once"},
    {"optionId": OPTION_REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
)
#: The elicitation form's fields and the decision values.
DECISION_FIELD = "decision"
REPLY_FIELD = "reply"
APPROVE = "approve"
REJECT = "reject"
#: Longest reply passed back to the model, and longest context shown to the user.
MAX_REPLY_CHARS = 4000
MAX_CONTEXT_CHARS = 8000


@dataclass(frozen=True)
class Escalation:
    """What the human is shown."""

    summary: str
    urgency: str
    context: str

    @property
    def title(self) -> str:
        """The request's one-line title: ``[HIGH] <summary>``."""
        return f"[{self.urgency.upper()}] {self.summary}"

    @property
    def message(self) -> str:
        """The full text: urgency, summary, context, and what the answer means."""
        lines = [f"[{self.urgency.upper()}] The agent escalates a decision to you.",
                 f"Summary: {self.summary}"]
        if self.context:
            lines.append(f"Context: {self.context}")
        lines.append("Approve to let the agent go on; reject to stop it.")
        return "\n".join(lines)


def _read(args: dict[str, Any]) -> Escalation:
    summary = " ".join(require_str(args, "summary").split())
    if not summary:
        raise ToolError("missing required string argument `summary`")
    urgency = args.get("urgency", DEFAULT_URGENCY)
    if urgency is None:
        urgency = DEFAULT_URGENCY
    if urgency not in URGENCY_LEVELS:
        raise ToolError(f"invalid urgency {urgency!r}: must be one of {', '.join(URGENCY_LEVELS)}")
    context = args.get("context")
    context = context.strip() if isinstance(context, str) else ""
    if len(context) > MAX_CONTEXT_CHARS:
        cut = len(context) - MAX_CONTEXT_CHARS
        context = f"{context[:MAX_CONTEXT_CHARS]}… [{cut} more characters not shown]"
    return Escalation(summary, urgency, context)


def _approved(reply: str) -> ToolResult:
    text = "The user approved the escalation: go on."
    return ToolResult(output=f"{text} Their reply: {reply}" if reply else text)


def _rejected(reply: str) -> ToolResult:
    text = "The user rejected the escalation: do not go on with it."
    return ToolResult(output=f"{text} Their reply: {reply}" if reply else text, ok=False)


def _denied(why: str) -> ToolResult:
    return ToolResult(output=f"The escalation was denied automatically: {why}.", ok=False)


DISMISSED = ToolResult(output="The user dismissed the escalation without deciding: treat it as "
                              "denied.", ok=False)
CLIENT_FAILED = "it could not be answered (the client failed or left)"


class EscalateToHumanTool(ArgumentsPreview):
    """Escalates a decision to the human; only an approval lets the agent go on."""

    name = "escalate_to_human"
    kind = "other"
    mutating = False
    interactive = True
    description = ("Escalate a decision you should not make alone to the user: a one-line "
                   "`summary`, optional `context`, `urgency` (low, medium, high, critical; "
                   "default medium). Waits for the user to approve or reject; anything but an "
                   "approval (a rejection, no answer in time) is a denial.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "One-line summary of the decision"},
            "context": {"type": "string", "description": "Details the user needs to decide"},
            "urgency": {"type": "string", "enum": list(URGENCY_LEVELS)},
        },
        "required": ["summary"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask; an approval (with the user's reply, if any) or a denial saying why."""
        escalation = _read(args)
        try:
            if ctx.elicitation:
                return await self._elicit(escalation, ctx)
            return await self._permission(escalation, ctx)
        except TimeoutError:
            return _denied(f"the user gave no answer within {int(ctx.request_timeout)} seconds")
        except asyncio.CancelledError:
            raise
        except Exception:  # client gone or answered with an error
            return _denied(CLIENT_FAILED)

    async def _permission(self, escalation: Escalation, ctx: ToolContext) -> ToolResult:
        params = {
            "sessionId": ctx.session_id,
            "options": [dict(o) for o in ESCALATION_OPTIONS],
            "toolCall": {
                "toolCallId": f"{APPROVAL_TOOL_CALL_PREFIX}{uuid.uuid4()}",
                "title": escalation.title,
                "kind": APPROVAL_TOOL_KIND,  # SPEC §6: the same request as an approval
                "status": "pending",
                "rawInput": {"tool": self.name, "summary": escalation.summary,
                             "urgency": escalation.urgency, "context": escalation.context},
                "content": [{"type": "content",
                             "content": {"type": "text", "text": escalation.message}}],
            },
        }
        result = await ctx.client_request(M_REQUEST_PERMISSION, params, ctx.request_timeout)
        answer = read_answer(result)
        option = selected_option(answer)
        if option == OPTION_ALLOW_ONCE:
            return _approved("")
        if option is not None:
            return _rejected("")
        # A "cancelled" the edge gave on the client's behalf is not the user's dismissal.
        reason = cancel_reason(answer)
        if reason == CANCEL_REASON_TIMEOUT:
            waited = cancel_timeout_secs(answer) or int(ctx.request_timeout)
            return _denied(f"the user gave no answer within {waited} seconds")
        if reason in (CANCEL_REASON_CLIENT_ERROR, CANCEL_REASON_CLIENT_GONE):
            return _denied(CLIENT_FAILED)
        return DISMISSED

    async def _elicit(self, escalation: Escalation, ctx: ToolContext) -> ToolResult:
        params = {
            "sessionId": ctx.session_id,
            "mode": "form",
            "message": escalation.message,
            "requestedSchema": {
                "type": "object",
                "title": escalation.title,
                "properties": {
                    DECISION_FIELD: {
                        "type": "string",
                        "title": "Decision",
                        "oneOf": [{"const": APPROVE, "title": "Approve"},
                                  {"const": REJECT, "title": "Reject"}],
                    },
                    REPLY_FIELD: {"type": "string", "title": "Reply to the agent (optional)"},
                },
                "required": [DECISION_FIELD],
            },
        }
        result = await ctx.client_request(M_ELICITATION_CREATE, params, ctx.request_timeout)
        action = result.get("action") if isinstance(result, dict) else None
        if action == "decline":
            return _rejected("")
        if action != "accept":
            # The edge answers "cancel" for the client too (no answer in time, client gone).
            return ToolResult(output="The escalation was not answered (dismissed, or no answer "
                                     "in time): treat it as denied.", ok=False)
        content = result.get("content")
        content = content if isinstance(content, dict) else {}
        reply = content.get(REPLY_FIELD)
        reply = " ".join(reply.split())[:MAX_REPLY_CHARS] if isinstance(reply, str) else ""
        if content.get(DECISION_FIELD) == APPROVE:
            return _approved(reply)
        return _rejected(reply)
