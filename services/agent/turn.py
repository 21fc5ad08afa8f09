"""The turn loop: stream the model, run its tool calls, repeat until it stops."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.agent import updates
from services.agent.conversation import (
    Message,
    ToolCall,
    close_cancelled,
    sanitize,
    trim_to_budget,
)
from services.agent.enforce import PolicyViolation
from services.agent.providers.base import (
    Provider,
    StreamDone,
    TextDelta,
    ThoughtDelta,
    ToolCallReady,
    UsageReport,
)
from services.agent.session import AgentSession
from services.agent.tools import tool_specs
from services.agent.tools.args import RAW_ARGS_KEY, one_line
from services.agent.tools.base import Tool, ToolError, ToolResult
from services.common.acp.schema import Usage
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_MAX_TURN_REQUESTS,
    STOP_REFUSAL,
)

log = get_logger("agent.turn")

#: (policy, the session's MCP notes) → the system prompt.
SystemPrompt = Callable[[SecurityPolicy, Sequence[str]], Awaitable[str]]
CANCELLED_TOOL_OUTPUT = "Cancelled by the client before the tool finished."


@dataclass
class TurnUsage:
    """Tokens used by one turn, summed over its model calls (kept on cancel too)."""

    input_tokens: int = 0
    output_tokens: int = 0
    #: Tokens of the last model call (what the conversation now fills of the context).
    context_tokens: int = 0

    def to_acp(self) -> Usage:
        """The prompt result's ``usage``."""
        return Usage(total_tokens=self.input_tokens + self.output_tokens,
                     input_tokens=self.input_tokens, output_tokens=self.output_tokens)


class TurnRunner:
    """Runs prompt turns for the sessions of one agent."""

    def __init__(self, *, provider: Callable[[AgentSession], Provider], tools: dict[str, Tool],
                 max_tool_iterations: int, context_budget_chars: int,
                 system_prompt: SystemPrompt) -> None:
        #: The provider of a session's model.
        self._provider = provider
        self._tools = tools
        self._max_iterations = max(1, max_tool_iterations)
        self._budget = context_budget_chars
        self._system_prompt = system_prompt

    async def run(self, session: AgentSession, text: str, usage: TurnUsage) -> str:
        """One turn; returns the ACP stop reason.

        On a failure the turn's messages are dropped from the session again,
        matching the edge, which stores no failed turn. A cancelled turn is kept
        with what it produced until the cancel and the cancel marker, as the edge
        stores it (:func:`~services.agent.conversation.close_cancelled`).
        The turns no model call could see any more (beyond the context budget)
        are dropped first: the session holds about its budget, not its history.
        """
        session.messages = trim_to_budget(session.messages, self._budget)
        snapshot = len(session.messages)
        try:
            return await self._run(session, text, usage)
        except asyncio.CancelledError:
            # The tool calls that never got a result get one ("no result recorded"), so
            # the next turn's conversation stays valid for every provider.
            session.messages[snapshot:] = sanitize(session.messages[snapshot:])
            close_cancelled(session.messages)
            raise
        except BaseException:
            del session.messages[snapshot:]
            raise

    async def _run(self, session: AgentSession, text: str, usage: TurnUsage) -> str:
        send = session.context.send_update
        session.messages.append(Message(role="user", text=text))
        await session.mcp.before_turn()
        system = await self._system_prompt(session.policy, session.mcp.notes())
        readonly = session.policy.autonomy == "readonly"
        for _ in range(self._max_iterations):
            # Per model call: a lost MCP server that came back may list other tools.
            tools = session.tools(self._tools)
            specs = tool_specs(tools, readonly=readonly)
            context = trim_to_budget(session.messages, self._budget)
            parts: list[str] = []
            calls: list[ToolCall] = []
            stop = STOP_END_TURN
            call_usage = UsageReport()
            try:
                async for event in self._provider(session).stream(system, context, specs):
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
                        await send(updates.message_chunk(event.text))
                    elif isinstance(event, ThoughtDelta):
                        await send(updates.thought_chunk(event.text))
                    elif isinstance(event, ToolCallReady):
                        calls.append(self._unique(session, event.call))
                    elif isinstance(event, UsageReport):
                        call_usage = event  # cumulative per model call
                    elif isinstance(event, StreamDone):
                        stop = event.stop_reason
            except asyncio.CancelledError:
                if parts:  # what the client saw of this answer stays in the conversation
                    session.messages.append(Message(role="assistant", text="".join(parts)))
                raise
            usage.input_tokens += call_usage.input_tokens
            usage.output_tokens += call_usage.output_tokens
            usage.context_tokens = call_usage.input_tokens + call_usage.output_tokens
            session.messages.append(Message(role="assistant", text="".join(parts),
                                            tool_calls=calls))
            if not calls:
                await send(updates.usage_update(usage.context_tokens, self._budget // 4))
                if stop in (STOP_MAX_TOKENS, STOP_REFUSAL):
                    return stop
                return STOP_END_TURN
            for call in calls:
                session.messages.append(await self._run_tool(session, call, tools))
        return STOP_MAX_TURN_REQUESTS

    @staticmethod
    def _unique(session: AgentSession, call: ToolCall) -> ToolCall:
        """Tool call ids must be unique in a session; some servers repeat or omit them."""
        call_id = call.id
        if not call_id or call_id in session.call_ids:
            call_id = f"{call.id or 'call'}-{uuid.uuid4().hex[:8]}"
        session.call_ids.add(call_id)
        return ToolCall(id=call_id, name=call.name, arguments=call.arguments)

    async def _run_tool(self, session: AgentSession, call: ToolCall,
                        tools: dict[str, Tool]) -> Message:
        """Announce, approve, run and report one tool call; the result goes to the model."""
        ctx = session.context
        send = ctx.send_update
        tool = tools.get(call.name)
        kind = tool.kind if tool is not None else "other"
        args = call.arguments

        async def finish(result: ToolResult) -> Message:
            await send(updates.tool_call_update(call.id, call.name, kind, result.output,
                                                ok=result.ok, title=result.title,
                                                content=result.content,
                                                model_output=result.model_output))
            return Message(role="tool", text=result.model_text, tool_call_id=call.id,
                           tool_name=call.name, failed=not result.ok)

        if tool is None:
            await send(updates.tool_call(call.id, call.name, kind, args))
            why = session.mcp.unavailable(call.name)
            if why is None:
                why = f"Unknown tool `{call.name}`. Available: {', '.join(sorted(tools))}."
            return await finish(ToolResult(why, ok=False))
        if RAW_ARGS_KEY in args:
            await send(updates.tool_call(call.id, call.name, kind, args))
            return await finish(ToolResult(
                f"The arguments of `{call.name}` were not valid JSON; call it again with a "
                "JSON object.", ok=False))
        try:
            preview: dict[str, Any] = await tool.preview(args, ctx)
        except (ToolError, PolicyViolation, OSError):
            preview = {"rawInput": args}
        await send(updates.tool_call(call.id, call.name, kind, preview.get("rawInput", args),
                                     preview.get("content")))
        try:
            if not tool.interactive:
                decision = await session.gate.decide(session.policy, tool.name,
                                                     tool.mutating, one_line(args), args)
                if not decision.allowed:
                    return await finish(ToolResult(decision.reason, ok=False))
            result = await self._execute(tool, args, session)
            if result.finalize is not None:
                result = await result.finalize()
        except asyncio.CancelledError:
            # The client sees the call closed before the turn's "cancelled" result, and the
            # model the same result when the cancelled turn stays in the conversation.
            await send(updates.tool_call_update(call.id, call.name, kind, CANCELLED_TOOL_OUTPUT,
                                                ok=False))
            session.messages.append(Message(role="tool", text=CANCELLED_TOOL_OUTPUT,
                                            tool_call_id=call.id, tool_name=call.name,
                                            failed=True))
            raise
        return await finish(result)

    @staticmethod
    async def _execute(tool: Tool, args: dict[str, Any], session: AgentSession) -> ToolResult:
        """Run a tool, turning every failure into a result the model can read."""
        try:
            return await tool.run(args, session.context)
        except PolicyViolation as exc:
            return ToolResult(f"Refused by the session policy: {exc}", ok=False)
        except ToolError as exc:
            return ToolResult(str(exc), ok=False)
        except OSError as exc:
            return ToolResult(f"`{tool.name}` failed: {exc.strerror or exc}", ok=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("tool_crashed", tool=tool.name, session_id=session.id)
            return ToolResult(f"`{tool.name}` failed unexpectedly ({type(exc).__name__}).",
                              ok=False)
