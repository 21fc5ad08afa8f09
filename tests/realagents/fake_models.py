"""A local model provider for real adapters: Anthropic Messages, OpenAI Responses and the
Gemini API (:mod:`tests.realagents.fake_gemini`).

Real adapters (claude-agent-acp, codex-acp, gemini-cli) run their own model loops; this
server stands in for the provider at the model boundary, the only fake in the
real-adapter tier. It decides each reply from the request alone, so whatever
extra requests an adapter makes (title generation, warm-ups, retries) get a
sensible answer:

- the last user input is a tool result → a text reply quoting it (``TOOL_DONE``);
- the last user text contains :data:`TOOL_TRIGGER` → one tool call
  (claude: ``Bash``; codex: ``exec_command``; gemini: ``run_shell_command``) writing
  :data:`TOOL_MARKER`;
- it contains :data:`SLOW_TRIGGER` → text streamed slowly (for cancel tests);

both only in a request that offers tools: side requests (titles, summaries)
quote the user's text too and always get a short text reply;
- otherwise a short text reply streamed in a few deltas (:data:`HELLO`).

Every request is recorded (path and JSON body; headers without credentials).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.agent.fake_http import LoopbackServer, Recorded, read_request, write_chunk, write_head
from tests.realagents import fake_gemini

TOOL_TRIGGER = "please run the tool"
SLOW_TRIGGER = "please stream slowly"
TOOL_MARKER = "tool-ran.txt"
TOOL_COMMAND = f"echo acpgate > {TOOL_MARKER}"
HELLO = ["Hello ", "from the ", "fake model."]
#: Pause between the slow stream's deltas, and how many it sends.
SLOW_DELAY_SECS = 0.25
SLOW_DELTAS = 240

_SECRET_HEADERS = ("authorization", "x-api-key", "api-key", fake_gemini.KEY_HEADER)


@dataclass
class _Plan:
    """What to answer: text deltas, or one tool call."""

    deltas: list[str] = field(default_factory=list)
    tool: bool = False
    slow: bool = False


def _texts(content: Any) -> list[str]:
    """Text pieces of an Anthropic or Responses content value."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                out.append(block["text"])
    return out


def _plan_anthropic(body: dict[str, Any]) -> _Plan:
    # Claude Code may append a role "system" message after the user's: look at the last user one.
    users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if isinstance(content, list):
        # Claude Code may put the next prompt into the message holding the last tool result:
        # only text after the last tool_result is new input.
        results = [i for i, b in enumerate(content)
                   if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            after = content[results[-1] + 1:]
            if not any(t.strip() for t in _texts(after)):
                quoted = "".join(_texts(content[results[-1]].get("content")))[:200]
                return _Plan([f"TOOL_DONE: {quoted}"])
            content = after
    return _plan_text(" ".join(_texts(content)), bool(body.get("tools")))


def _responses_turn(body: dict[str, Any]) -> bool:
    """A Responses request is a turn (not a side request) when it offers tools, or asks for
    no structured output: codex-acp 2.6's side requests (titles) ask for a JSON schema, and
    its turns on a catalog model (``gpt-6.1-sol``) come without ``tools``."""
    text = body.get("text")
    return bool(body.get("tools")) or not (isinstance(text, dict) and text.get("format"))


def _plan_responses(body: dict[str, Any]) -> _Plan:
    items = body.get("input") or []
    turn = _responses_turn(body)
    if isinstance(items, str):
        return _plan_text(items, turn)
    last = items[-1] if items else {}
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        output = last.get("output")
        return _Plan([f"TOOL_DONE: {str(output)[:200]}"])
    users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
    text = " ".join(_texts(users[-1].get("content"))) if users else ""
    return _plan_text(text, turn)


def _plan_text(text: str, has_tools: bool = False) -> _Plan:
    # Side requests (title generation, summaries) offer no tools: they get text.
    if TOOL_TRIGGER in text and has_tools:
        return _Plan(tool=True)
    if SLOW_TRIGGER in text and has_tools:
        return _Plan([f"tick {i} " for i in range(SLOW_DELTAS)], slow=True)
    return _Plan(list(HELLO))


def _sse(name: str | None, data: dict[str, Any]) -> bytes:
    prefix = f"event: {name}\n" if name else ""
    return prefix.encode() + b"data: " + orjson.dumps(data) + b"\n\n"


# ----------------------------------------------------------------- Anthropic


def _anthropic_events(body: dict[str, Any], plan: _Plan) -> list[bytes]:
    model = body.get("model", "claude-fake")
    start = {"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 1}}}
    out = [_sse("message_start", start)]
    if plan.tool:
        out.append(_sse("content_block_start", {
            "type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": "toolu_fake_1", "name": "Bash", "input": {}}}))
        args = orjson.dumps({"command": TOOL_COMMAND, "description": "Write the marker"}).decode()
        out.append(_sse("content_block_delta", {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": args}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        stop = "tool_use"
    else:
        out.append(_sse("content_block_start", {
            "type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}))
        out.extend(_sse("content_block_delta", {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": d}}) for d in plan.deltas)
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        stop = "end_turn"
    out.append(_sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": 7}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def _anthropic_json(body: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg_fake_sync", "type": "message", "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": [{"type": "text", "text": "Fake title"}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 2}}


# ----------------------------------------------------------------- Responses


def _responses_events(body: dict[str, Any], plan: _Plan) -> list[bytes]:
    model = body.get("model", "gpt-fake")
    resp = {"id": "resp_fake", "object": "response", "model": model, "status": "in_progress",
            "output": []}
    out = [_sse("response.created", {"type": "response.created", "response": resp})]
    if plan.tool:
        args = orjson.dumps({"cmd": TOOL_COMMAND, "sandbox_permissions": "require_escalated",
                             "justification": "Write the marker file?"}).decode()
        item = {"type": "function_call", "id": "fc_fake_1", "call_id": "call_fake_1",
                "name": "exec_command", "arguments": args, "status": "completed"}
        out.append(_sse("response.output_item.added", {
            "type": "response.output_item.added", "output_index": 0, "item": item}))
        out.append(_sse("response.output_item.done", {
            "type": "response.output_item.done", "output_index": 0, "item": item}))
    else:
        msg_id = "msg_fake_1"
        out.append(_sse("response.output_item.added", {
            "type": "response.output_item.added", "output_index": 0,
            "item": {"type": "message", "id": msg_id, "role": "assistant", "status": "in_progress",
                     "content": []}}))
        out.extend(_sse("response.output_text.delta", {
            "type": "response.output_text.delta", "item_id": msg_id, "output_index": 0,
            "content_index": 0, "delta": d}) for d in plan.deltas)
        out.append(_sse("response.output_item.done", {
            "type": "response.output_item.done", "output_index": 0,
            "item": {"type": "message", "id": msg_id, "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "".join(plan.deltas),
                                  "annotations": []}]}}))
    done = {**resp, "status": "completed",
            "usage": {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 18}}
    out.append(_sse("response.completed", {"type": "response.completed", "response": done}))
    return out


# ----------------------------------------------------------------- Gemini


def _plan_gemini(body: dict[str, Any]) -> _Plan:
    output = fake_gemini.function_response(fake_gemini.last_user(body))
    if output is not None:
        return _Plan([f"TOOL_DONE: {output}"])
    return _plan_text(fake_gemini.user_text(body), fake_gemini.offers_tools(body))


def _gemini_events(plan: _Plan) -> list[bytes]:
    if plan.tool:
        return [fake_gemini.sse_data(fake_gemini.call_chunk(TOOL_COMMAND))]
    last = len(plan.deltas) - 1
    return [fake_gemini.sse_data(fake_gemini.text_chunk(d, last=i == last))
            for i, d in enumerate(plan.deltas)]


# ----------------------------------------------------------------- server


class FakeModelServer(LoopbackServer):
    """``async with FakeModelServer() as srv: srv.url`` (``http://127.0.0.1:<port>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []
        #: Gemini API requests refused for want of the tier's key.
        self.refused_keys = 0
        #: Connections being answered: a slow stream whose client neither reads nor hangs
        #: up (a cancelled turn of an adapter that keeps its socket) is cut at the end.
        self._answering: set[asyncio.Task[None]] = set()

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._answering):
            task.cancel()
        await asyncio.gather(*self._answering, return_exceptions=True)
        await super().__aexit__(*exc)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._answering.add(task)
        try:
            request = await read_request(reader)
            if request is not None:
                await self._answer(request, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._answering.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, request: Recorded, writer: asyncio.StreamWriter) -> None:
        body = request.body
        self.requests.append(Recorded(
            request.method, request.path,
            {k: v for k, v in request.headers.items() if k not in _SECRET_HEADERS}, body))
        if not isinstance(body, dict):
            await self._send(writer, 200, "application/json", [b"{}"])
            return
        route = request.path.split("?", 1)[0]
        if "/models/" in route and request.headers.get(fake_gemini.KEY_HEADER) \
                != fake_gemini.GEMINI_KEY:
            self.refused_keys += 1
            await self._send(writer, 403, "application/json",
                             [orjson.dumps(fake_gemini.KEY_REFUSED)])
        elif route.endswith("/messages"):
            if body.get("stream"):
                plan = _plan_anthropic(body)
                await self._send(writer, 200, "text/event-stream",
                                 _anthropic_events(body, plan), slow=plan.slow)
            else:
                await self._send(writer, 200, "application/json",
                                 [orjson.dumps(_anthropic_json(body))])
        elif ":streamGenerateContent" in route:
            plan = _plan_gemini(body)
            await self._send(writer, 200, "text/event-stream", _gemini_events(plan),
                             slow=plan.slow)
        elif route.endswith(":generateContent"):
            await self._send(writer, 200, "application/json",
                             [orjson.dumps(fake_gemini.side_answer(body))])
        elif route.endswith(":countTokens"):
            await self._send(writer, 200, "application/json", [b'{"totalTokens": 13}'])
        elif route.endswith("/responses"):
            plan = _plan_responses(body)
            await self._send(writer, 200, "text/event-stream",
                             _responses_events(body, plan), slow=plan.slow)
        else:
            await self._send(writer, 404, "application/json",
                             [b'{"error":{"type":"not_found","message":"fake: unknown route"}}'])

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, ctype: str, chunks: list[bytes],
                    *, slow: bool = False) -> None:
        await write_head(writer, status, {"Content-Type": ctype})
        for chunk in chunks:
            await write_chunk(writer, chunk)
            if slow:
                await asyncio.sleep(SLOW_DELAY_SECS)
        await write_chunk(writer, b"")
