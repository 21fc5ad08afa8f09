"""ask_user: a multiple-choice question to the user (SPEC §6).

With choices the question goes out as ``elicitation/create`` (form mode) when
the client advertised elicitation, else as ``session/request_permission`` with
one ``choice-<i>`` option per choice. Without choices it fails at once: ACP has
no free-form question channel here.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, ClassVar

from services.agent.outcome import cancel_reason, read_answer, selected_option
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
    CHOICE_OPTION_PREFIX,
    M_ELICITATION_CREATE,
    M_REQUEST_PERMISSION,
)

NO_CHOICES_ERROR = (
    "ask_user requires `choices` (a non-empty list of answers): free-form questions are not "
    "supported over ACP. Ask again with choices, or ask in your reply."
)


def _choices(args: dict[str, Any]) -> list[str]:
    raw = args.get("choices")
    if not isinstance(raw, list):
        return []
    return [str(c).strip() for c in raw if str(c).strip()]


class AskUserTool(ArgumentsPreview):
    """Asks the user to pick one of ``choices``."""

    name = "ask_user"
    kind = "other"
    mutating = False
    interactive = True
    description = ("Ask the user a question with a fixed list of `choices` (required); "
                   "returns the chosen answer.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        },
        "required": ["question", "choices"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask and return the answer; no answer / dismissal is reported as such."""
        question = require_str(args, "question")
        choices = _choices(args)
        if not choices:
            raise ToolError(NO_CHOICES_ERROR)
        try:
            if ctx.elicitation:
                answer = await self._elicit(question, choices, ctx)
            else:
                answer = await self._permission(question, choices, ctx)
        except TimeoutError:
            return ToolResult(output="The user did not answer in time.", ok=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # client gone or answered with an error
            return ToolResult(output=f"The question could not be asked: {exc}", ok=False)
        if answer is None:
            return ToolResult(output="The user dismissed the question without answering.",
                              ok=False)
        return ToolResult(output=f"The user answered: {answer}")

    async def _permission(self, question: str, choices: list[str], ctx: ToolContext) -> str | None:
        options = [
            {"optionId": f"{CHOICE_OPTION_PREFIX}{i}", "name": text, "kind": "allow_once"}
            for i, text in enumerate(choices)
        ]
        params = {
            "sessionId": ctx.session_id,
            "options": options,
            "toolCall": {
                "toolCallId": f"{APPROVAL_TOOL_CALL_PREFIX}{uuid.uuid4()}",
                "title": question,
                "kind": APPROVAL_TOOL_KIND,  # SPEC §6: ask_user uses the same request
                "status": "pending",
                "rawInput": {"tool": self.name, "summary": question, "choices": choices},
                "content": [{"type": "content", "content": {"type": "text", "text": question}}],
            },
        }
        result = await ctx.client_request(M_REQUEST_PERMISSION, params, ctx.request_timeout)
        answer = read_answer(result)
        option = selected_option(answer)
        if option is None:
            # A "cancelled" the edge gave on the client's behalf is not the user's dismissal.
            reason = cancel_reason(answer)
            if reason == CANCEL_REASON_TIMEOUT:
                raise TimeoutError
            if reason in (CANCEL_REASON_CLIENT_ERROR, CANCEL_REASON_CLIENT_GONE):
                raise ConnectionError("the client failed or left")
            return None
        if option.startswith(CHOICE_OPTION_PREFIX):
            index = option[len(CHOICE_OPTION_PREFIX):]
            if index.isdigit() and int(index) < len(choices):
                return choices[int(index)]
        return None

    async def _elicit(self, question: str, choices: list[str], ctx: ToolContext) -> str | None:
        params = {
            "sessionId": ctx.session_id,
            "mode": "form",
            "message": question,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "answer": {
                        "type": "string",
                        "title": question,
                        "oneOf": [{"const": c, "title": c} for c in choices],
                    }
                },
                "required": ["answer"],
            },
        }
        result = await ctx.client_request(M_ELICITATION_CREATE, params, ctx.request_timeout)
        if not isinstance(result, dict) or result.get("action") != "accept":
            return None
        content = result.get("content")
        answer = content.get("answer") if isinstance(content, dict) else None
        return str(answer) if answer is not None else None
