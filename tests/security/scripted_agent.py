"""A hostile external ACP agent on raw JSON-RPC over stdio (no SDK, no acpgate imports).

Configured as a ``kind = "acp"`` agent in the security tests. It answers
``initialize`` and ``session/new``; what a prompt does depends on its text:

- ``stream <n>``: ``n`` message chunks 0.1 s apart, then ``end_turn`` — or, once a
  ``session/cancel`` arrives, ``cancelled`` at once;
- ``burst <n> <secs>``: ``n`` ``session/request_permission`` requests in one write,
  then, ``secs`` later, every one of them withdrawn with ``$/cancel_request`` in one
  write; the turn ends (``end_turn``, "burst withdrawn") once each has its answer;
- ``ask``: one ``session/request_permission``, then ``answer <outcome as JSON>`` and
  ``end_turn`` once it is answered; ``ask kill <pid>``: the same, but the moment the
  answer arrives process ``pid`` is sent SIGKILL first (the edge worker that wrote it);
- ``elicit``: one ``elicitation/create`` (a form asking for a ``name``), then
  ``answer <result as JSON>`` and ``end_turn`` once it is answered; ``elicit kill <pid>``
  as for ``ask``;
- ``forge <n>``: like ``stream``, each chunk carrying a forged ``_meta.acpgate.eventId``
  (and a ``_meta.vendor`` of its own) — an agent trying to confuse acpgate's replay;
- ``nest <depth>``: a tool call whose ``rawInput`` holds lists nested ``depth`` deep and,
  in the same write, the message ``nested <depth>``; then ``end_turn``;
- ``flood <n> <chars>``: ``n`` message chunks of ``chars`` characters each, written 100
  at a time without pause, then ``end_turn``;
- ``hold <n>``: ``n`` requests of an extension method (``_scripted/hold``) in one write,
  which the edge passes on to the client; then ``held <n>`` and ``end_turn`` once each
  has its answer;
- anything else: ``echo: <text>``.

Every ``session/cancel`` it receives is appended as a line (``cancel <sessionId>``) to
the file ``$SCRIPTED_AGENT_LOG`` names, if set; so is every answer to one of its own
requests (``answer <request id>``), an id it already had an answer to included.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
from typing import Any

LOG = os.environ.get("SCRIPTED_AGENT_LOG", "")


def agent_section(alias: str, log: str = "") -> str:
    """The ``[agents.<alias>]`` config section running this script (``log``: where it
    records the ``session/cancel`` it receives)."""
    env = f"\nenv = {{ SCRIPTED_AGENT_LOG = {json.dumps(log)} }}" if log else ""
    return (f"\n[agents.{alias}]\nkind = \"acp\"\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(os.path.abspath(__file__))}]{env}\n")


def _record(line: str) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


class Agent:
    """One agent process: its sessions' running turns and its own pending requests."""

    def __init__(self) -> None:
        self._out = sys.stdout.buffer
        self._ids = itertools.count(1)
        self._answers: dict[str, asyncio.Future[Any]] = {}
        self._cancelled: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def write(self, *messages: dict[str, Any]) -> None:
        """Several messages in one write."""
        self._out.write(b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n"
                                 for m in messages))
        self._out.flush()

    def update(self, sid: str, text: str) -> dict[str, Any]:
        return {"method": "session/update", "params": {"sessionId": sid, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}

    async def prompt(self, sid: str, text: str) -> dict[str, Any]:
        word, *args = text.split()
        cancelled = self._cancelled.setdefault(sid, asyncio.Event())
        cancelled.clear()
        if word in ("stream", "forge"):
            for i in range(int(args[0])):
                if cancelled.is_set():
                    return {"stopReason": "cancelled"}
                chunk = self.update(sid, f"chunk {i} ")
                if word == "forge":
                    chunk["params"]["update"]["_meta"] = {
                        "acpgate": {"eventId": 1 + i % 2}, "vendor": i}
                self.write(chunk)
                try:
                    await asyncio.wait_for(cancelled.wait(), 0.1)
                except TimeoutError:
                    pass
            return {"stopReason": "cancelled" if cancelled.is_set() else "end_turn"}
        if word in ("ask", "elicit"):
            rid = f"{'p' if word == 'ask' else 'e'}{next(self._ids)}"
            answer = self._answers.setdefault(rid, asyncio.get_running_loop().create_future())
            if word == "ask":
                self.write({"id": rid, "method": "session/request_permission", "params": {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": f"tc-{rid}", "title": "step", "kind": "execute"},
                    "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}})
            else:
                self.write({"id": rid, "method": "elicitation/create", "params": {
                    "sessionId": sid, "mode": "form", "message": f"Your name ({rid})?",
                    "requestedSchema": {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string"}}}}})
            got = await answer
            if args[:1] == ["kill"]:
                os.kill(int(args[1]), signal.SIGKILL)
            self.write(self.update(sid, f"answer {json.dumps(got.get('result'))}"))
            return {"stopReason": "end_turn"}
        if word == "nest":  # written as text: json.dumps itself gives up near 1000
            depth = int(args[0])
            nested = '{"deep": ' + "[" * depth + '"core"' + "]" * depth + "}"
            call = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": sid, "update": {
                    "sessionUpdate": "tool_call", "toolCallId": "nested", "title": "nested",
                    "kind": "other", "status": "completed", "rawInput": "IN"}}})
            after = json.dumps({"jsonrpc": "2.0", **self.update(sid, f"nested {depth}")})
            self._out.write((call.replace('"IN"', nested) + "\n" + after + "\n").encode())
            self._out.flush()
            return {"stopReason": "end_turn"}
        if word == "flood":
            count, size = int(args[0]), int(args[1])
            for start in range(0, count, 100):
                self.write(*(self.update(sid, f"{i:08d}".ljust(size, "x"))
                             for i in range(start, min(count, start + 100))))
                await asyncio.sleep(0)
            return {"stopReason": "end_turn"}
        if word == "hold":
            ids = [f"h{next(self._ids)}" for _ in range(int(args[0]))]
            loop = asyncio.get_running_loop()
            waiting = [self._answers.setdefault(i, loop.create_future()) for i in ids]
            self.write(*({"id": i, "method": "_scripted/hold", "params": {"sessionId": sid}}
                         for i in ids))
            await asyncio.gather(*waiting)
            self.write(self.update(sid, f"held {len(ids)}"))
            return {"stopReason": "end_turn"}
        if word == "burst":
            count, secs = int(args[0]), float(args[1])
            ids = [f"p{next(self._ids)}" for _ in range(count)]
            loop = asyncio.get_running_loop()
            waiting = [self._answers.setdefault(i, loop.create_future()) for i in ids]
            self.write(*({"id": i, "method": "session/request_permission", "params": {
                "sessionId": sid,
                "toolCall": {"toolCallId": f"tc-{i}", "title": f"step {i}", "kind": "execute"},
                "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}}
                for i in ids))
            await asyncio.sleep(secs)
            self.write(*({"method": "$/cancel_request", "params": {"requestId": i}}
                         for i in ids))
            await asyncio.gather(*waiting)
            self.write(self.update(sid, "burst withdrawn"))
            return {"stopReason": "end_turn"}
        self.write(self.update(sid, f"echo: {text}"))
        return {"stopReason": "end_turn"}

    async def handle(self, msg: dict[str, Any]) -> None:
        method, params, req_id = msg.get("method"), msg.get("params") or {}, msg.get("id")
        if method is None:  # an answer to one of our requests
            _record(f"answer {req_id}")
            future = self._answers.pop(str(req_id), None)
            if future is not None and not future.done():
                future.set_result(msg)
            return
        if method == "session/cancel":
            _record(f"cancel {params.get('sessionId')}")
            self._cancelled.setdefault(str(params.get("sessionId")), asyncio.Event()).set()
            return
        if req_id is None:
            return
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentCapabilities": {},
                           "agentInfo": {"name": "scripted", "version": "1"}}
        elif method == "session/new":
            result = {"sessionId": f"s{next(self._ids)}"}
        elif method == "session/prompt":
            blocks = params.get("prompt") or []
            text = " ".join(b.get("text", "") for b in blocks if isinstance(b, dict))
            result = await self.prompt(str(params.get("sessionId")), text.strip())
        else:
            self.write({"id": req_id, "error": {"code": -32601, "message": "Method not found"}})
            return
        self.write({"id": req_id, "result": result})

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
