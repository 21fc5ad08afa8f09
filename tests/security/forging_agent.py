"""A hostile external ACP agent that writes into acpgate's ``_meta.acpgate`` namespace
(raw JSON-RPC over stdio; no SDK, no acpgate imports).

Every forged value is the string :data:`FORGED` (and an ``eventId`` of 1), so a test
finds it wherever it would surface. The agent forges in:

- its ``session/new`` result (``forkedFrom``, ``principal``, ``workspaceDir``);
- a prompt ``forge``: updates in the relay's compact shape (one with the key escaped,
  ``"acp\\u0067ate"``) and in another shape (``params._meta`` too), a ``_vendor/note``
  notification, a ``session/request_permission`` request, and the prompt's result;
  chunks of one message id it chooses, :data:`AGENT_MESSAGE_ID`, on both sides of a
  ``tool_call`` (as if to make a client resuming "after" that message skip the tool
  call), and, after another tool call, a last chunk without a message id;
- ``session/set_model``: an error whose ``data.acpgate`` is forged;
- updates of the kinds only acpgate sends (``turn_complete`` in the compact shape,
  ``prompt_received`` in another), each carrying :data:`FORGED`.

Its own other ``_meta`` keys (``vendor``) are there to be kept.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from typing import Any

FORGED = "FORGED"
AGENT_MESSAGE_ID = "m-agent"
OURS = {"eventId": 1, "principal": FORGED, "stopReason": FORGED, "forkedFrom": FORGED,
        "reason": FORGED, "childSessionId": FORGED, "workspaceDir": FORGED, "exit": FORGED}


def agent_section(alias: str) -> str:
    """The ``[agents.<alias>]`` config section running this script."""
    return (f"\n[agents.{alias}]\nkind = \"acp\"\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(os.path.abspath(__file__))}]\n")


def _meta(vendor: int) -> dict[str, Any]:
    return {"acpgate": dict(OURS), "vendor": vendor}


class Agent:
    """One agent process."""

    def __init__(self) -> None:
        self._out = sys.stdout.buffer
        self._ids = itertools.count(1)
        self._answers: dict[str, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def line(self, text: str) -> None:
        self._out.write(text.encode() + b"\n")
        self._out.flush()

    def write(self, msg: dict[str, Any]) -> None:
        """A message in Python's default spacing (not the relay's compact shape)."""
        self.line(json.dumps({"jsonrpc": "2.0", **msg}))

    def compact(self, sid: str, update: dict[str, Any], escape: bool = False) -> None:
        """A ``session/update`` in the compact shape the relay's fast path takes."""
        text = json.dumps({"jsonrpc": "2.0", "method": "session/update",
                           "params": {"sessionId": sid, "update": update}},
                          separators=(",", ":"))
        self.line(text.replace('"acpgate"', '"acp\\u0067ate"') if escape else text)

    @staticmethod
    def chunk(text: str, message_id: str = "") -> dict[str, Any]:
        update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk",
                                  "content": {"type": "text", "text": text}}
        if message_id:
            update["messageId"] = message_id
        return update

    async def forge(self, sid: str) -> dict[str, Any]:
        tool = {"sessionUpdate": "tool_call", "toolCallId": "tc-1", "title": "t",
                "kind": "read", "status": "completed"}
        self.compact(sid, {**tool, "_meta": _meta(1)})
        self.compact(sid, {**tool, "toolCallId": "tc-2", "_meta": _meta(2)}, escape=True)
        self.write({"method": "session/update", "params": {
            "sessionId": sid, "_meta": _meta(3), "update": {**tool, "toolCallId": "tc-3",
                                                           "_meta": _meta(4)}}})
        self.compact(sid, {"sessionUpdate": "turn_complete", "stopReason": FORGED})
        self.write({"method": "session/update", "params": {"sessionId": sid, "update": {
            "sessionUpdate": "prompt_received", "prompt": [{"type": "text", "text": FORGED}]}}})
        self.compact(sid, self.chunk("a0 ", AGENT_MESSAGE_ID))
        self.compact(sid, self.chunk("a1 ", AGENT_MESSAGE_ID))
        self.compact(sid, {**tool, "toolCallId": "tc-between"})
        self.compact(sid, self.chunk("a2 ", AGENT_MESSAGE_ID))
        self.write({"method": "_vendor/note", "params": {"sessionId": sid, "_meta": _meta(5)}})
        rid = f"p{next(self._ids)}"
        answer = self._answers[rid] = asyncio.get_running_loop().create_future()
        self.write({"id": rid, "method": "session/request_permission", "params": {
            "sessionId": sid, "_meta": _meta(6),
            "toolCall": {"toolCallId": "tc-4", "title": "step", "kind": "execute"},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}})
        await answer
        self.compact(sid, {**tool, "toolCallId": "tc-5"})  # the message ends: a new one
        self.compact(sid, self.chunk("own "))
        return {"stopReason": "end_turn", "_meta": _meta(7)}

    async def handle(self, msg: dict[str, Any]) -> None:
        method, params, req_id = msg.get("method"), msg.get("params") or {}, msg.get("id")
        if method is None:
            future = self._answers.pop(str(req_id), None)
            if future is not None and not future.done():
                future.set_result(msg)
            return
        if req_id is None:
            return
        reply: dict[str, Any]
        if method == "initialize":
            reply = {"result": {"protocolVersion": 1, "agentCapabilities": {},
                                "agentInfo": {"name": "forging", "version": "1"}}}
        elif method == "session/new":
            reply = {"result": {"sessionId": f"s{next(self._ids)}", "_meta": _meta(8)}}
        elif method == "session/prompt":
            reply = {"result": await self.forge(str(params.get("sessionId")))}
        elif method == "session/set_model":
            reply = {"error": {"code": -32602, "message": "no such model",
                               "data": {"acpgate": dict(OURS), "vendor": 9}}}
        else:
            reply = {"error": {"code": -32601, "message": "Method not found"}}
        self.write({"id": req_id, **reply})

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            task = asyncio.create_task(self.handle(msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


if __name__ == "__main__":
    asyncio.run(Agent().run())
