"""An ACP v2 agent on raw JSON-RPC (no SDK, no acpgate imports) for the v2-agent tests.

Every message it reads is appended to ``$V2_AGENT_LOG`` as one JSON line, so a test can
check what acpgate sent it against the v2 schema. ``$V2_AGENT_MODE``:

- ``v2`` (default): answers ``initialize`` asking for 2 or more with v2 (``info``,
  ``capabilities.session``, an ``agent`` auth method ``key``); a request for 1 with v1;
- ``v2only``: a request below 2 is -32022 ``{requested, supported: [2]}``;
- ``refuse2``: a v1 agent that refuses a request for 2 with -32022 (the fallback's case)
  and speaks v1 after a v1 ``initialize``;
- ``grow``: as ``v2``, but before answering ``session/new`` it sends :data:`GROW_SESSIONS`
  updates, each naming a session of a fresh id (and announcing a child under it).

As a v2 agent: ``session/new`` answers a mode config option (``ask``/``code``);
``session/resume`` replays the session's conversation for ``replayFrom: start`` (then
``replay_complete``), and always sends the idle snapshot before answering;
``session/set_config_option`` sets the mode; ``auth/login`` with ``key`` succeeds.
``session/prompt`` echoes the user message and answers ``{messageId}``, then the turn as
``state_update`` s. Prompt words: ``fail`` (idle with an ``error``), ``slow`` (chunks until
``session/cancel``: idle ``cancelled``), ``ask`` (a v2 permission request first),
``mode`` (a ``config_option_update`` to ``code``), ``stream <n>`` (a tool call, ``n``
chunks 50 ms apart, the call completed), ``later`` (after the turn, foreground
work of its own without a prompt); anything else: a notice, a tool call created by
``tool_call_update`` with streamed content, a plan, the text ``echo: <text>``.

Subagents and background work, on demand: ``sub`` announces a child session
(``subagent_update``, cancellable) that gets a ``session_message`` from the parent and
answers ``child: <text>`` with a tool call of its own, announces a grandchild, and goes
idle; ``subrun`` leaves such a child running (idle on ``session/cancel`` of the child);
``sublate`` too, and the child ends after the turn, when the parent's next
``session/set_config_option`` comes (it says ``done: <text>``, then goes idle, before the
answer);
``bg`` leaves a cancellable tool call running in the background (``tool_call/cancel``
ends it); ``term`` a cancellable terminal (``terminal/cancel``); ``claim <id>`` sends an update
on a session it never announced, announces a child under the agent-chosen id ``<id>``
and sends updates and a message naming it; ``swarm <n>`` announces ``n`` children, each
titled ``Swarm <i>``, saying ``swarm child <i>`` and going idle; ``grow <n> <m>``
sends ``n`` tool calls of fresh ids (each created finished, with content) and ``m``
content chunks of one more call, then the text ``grown``.
From the first background report on, every ``state_update`` carries the session's list.
As a v1 agent, ``forge <id>`` sends acpgate's own child forms (a marked
``subagent_update``, a ``subagent_session_update`` naming ``<id>``) as its own updates.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from typing import Any

LOG = os.environ.get("V2_AGENT_LOG", "")
MODE = os.environ.get("V2_AGENT_MODE", "v2")
INFO = {"name": "v2-test-agent", "version": "1"}
#: How many made-up sessions mode ``grow`` names before answering ``session/new``.
GROW_SESSIONS = 100_000
#: How many messages go in one write of a flood.
_WRITE_BATCH = 500


def agent_section(alias: str, log: str, mode: str = "v2", protocol: str = "") -> str:
    """The ``[agents.<alias>]`` config section running this script."""
    env = f'{{ V2_AGENT_LOG = {json.dumps(log)}, V2_AGENT_MODE = {json.dumps(mode)} }}'
    line = f"protocol = {protocol}\n" if protocol else ""
    return (f"\n[agents.{alias}]\nkind = \"acp\"\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(os.path.abspath(__file__))}]\nenv = {env}\n{line}")


def received(log: str) -> list[dict[str, Any]]:
    """Every message the agents of ``log`` received, in order."""
    try:
        with open(log, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def _record(msg: dict[str, Any]) -> None:
    """Append one received message to the log (a line is small: written at once)."""
    if LOG:
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(msg) + "\n")


def _options(mode: str) -> list[dict[str, Any]]:
    return [{"configId": "mode", "name": "Mode", "category": "mode", "type": "select",
             "currentValue": mode, "options": [{"value": "ask", "name": "Ask"},
                                               {"value": "code", "name": "Code"}]}]


class Agent:
    """One agent process."""

    def __init__(self) -> None:
        self._out = sys.stdout.buffer
        self._ids = itertools.count(1)
        self._answers: dict[str, asyncio.Future[Any]] = {}
        self._cancelled: dict[str, asyncio.Event] = {}
        self._history: dict[str, list[dict[str, Any]]] = {}
        self._modes: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.v1 = False
        #: Each session's background list (once it reported one) and each child's parent.
        self._background: dict[str, list[dict[str, Any]]] = {}
        self._parent: dict[str, str] = {}
        #: Children to end at their parent's next set_config_option: parent → (child, text).
        self._late: dict[str, list[tuple[str, str]]] = {}

    def write(self, *messages: dict[str, Any]) -> None:
        self._out.write(b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n"
                                 for m in messages))
        self._out.flush()

    def update(self, sid: str, update: dict[str, Any], *, keep: bool = False) -> None:
        if keep:
            self._history.setdefault(sid, []).append(update)
        self.write({"method": "session/update", "params": {"sessionId": sid, "update": update}})

    async def flood(self, messages: Any) -> None:
        """Messages written :data:`_WRITE_BATCH` at a time (the loop runs between)."""
        batch: list[dict[str, Any]] = []
        for message in messages:
            batch.append(message)
            if len(batch) == _WRITE_BATCH:
                self.write(*batch)
                batch = []
                await asyncio.sleep(0)
        if batch:
            self.write(*batch)

    @staticmethod
    def note(sid: str, update: dict[str, Any]) -> dict[str, Any]:
        """A ``session/update`` message (for :meth:`flood`)."""
        return {"method": "session/update", "params": {"sessionId": sid, "update": update}}

    def text_note(self, sid: str, text: str) -> dict[str, Any]:
        """A message chunk's ``session/update`` message (for :meth:`flood`)."""
        return self.note(sid, {"sessionUpdate": "agent_message_chunk",
                               "messageId": f"m{next(self._ids)}",
                               "content": {"type": "text", "text": text}})

    def state(self, sid: str, state: str, **fields: Any) -> None:
        if sid in self._background:
            fields.setdefault("background", list(self._background[sid]))
        self.update(sid, {"sessionUpdate": "state_update", "state": state, **fields})

    def background(self, sid: str, items: list[dict[str, Any]]) -> None:
        self._background[sid] = items

    def text(self, sid: str, message_id: str, text: str,
             kind: str = "agent_message_chunk") -> None:
        self.update(sid, {"sessionUpdate": kind, "messageId": message_id,
                          "content": {"type": "text", "text": text}})

    def subagent(self, sid: str, child: str, **fields: Any) -> None:
        self._parent.setdefault(child, sid)
        self.update(sid, {"sessionUpdate": "subagent_update", "sessionId": child, **fields})

    def child_turn(self, sid: str, child: str, text: str, *, finish: bool = True) -> None:
        """A child announced on ``sid`` gets a message from it and answers."""
        self.subagent(sid, child, title="Helper", description="looks things up",
                      capabilities={"cancel": {}}, state={"state": "running"})
        self.update(sid, {"sessionUpdate": "session_message", "messageId": f"sm{next(self._ids)}",
                          "senderSessionId": sid, "recipientSessionId": child,
                          "content": [{"type": "text", "text": f"look up {text}"}]})
        self.text(child, f"cu{next(self._ids)}", f"look up {text}", "user_message_chunk")
        self.update(child, {"sessionUpdate": "tool_call_update", "toolCallId": "ct1",
                            "title": "Search", "kind": "search", "status": "completed"})
        self.text(child, f"cm{next(self._ids)}", f"child: {text}")
        self.subagent(child, f"{child}-grand", title="Grandchild")
        if finish:
            self.subagent(sid, child, state={"state": "idle", "stopReason": "end_turn"})

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = f"a{next(self._ids)}"
        answer = self._answers[rid] = asyncio.get_running_loop().create_future()
        self.write({"id": rid, "method": method, "params": params})
        return dict(await answer)

    # ------------------------------------------------------------------ setup

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        asked = asked if isinstance(asked, int) else 1
        if (MODE == "v2only" and asked < 2) or (MODE == "refuse2" and asked >= 2):
            supported = [2] if MODE == "v2only" else [1]
            return {"error": {"code": -32022, "message": "Unsupported protocol version",
                              "data": {"requested": asked, "supported": supported}}}
        if asked < 2:
            self.v1 = True
            return {"result": {"protocolVersion": 1, "agentInfo": INFO,
                               "agentCapabilities": {"loadSession": False},
                               "authMethods": []}}
        return {"result": {"protocolVersion": 2, "info": INFO, "capabilities": {
            "session": {"prompt": {"embeddedContext": {}, "image": {}},
                        "mcp": {"stdio": {}, "http": {}}, "delete": {}}},
            "authMethods": [{"methodId": "key", "type": "agent", "name": "Key"}]}}

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sid = str(params.get("sessionId", ""))
        if method == "initialize":
            return self.initialize(params)
        if method == "session/new":
            sid = f"agent-{next(self._ids)}"
            self._modes[sid] = "ask"
            if self.v1:
                return {"result": {"sessionId": sid}}
            return {"result": {"sessionId": sid, "configOptions": _options("ask")}}
        if method == "session/resume":
            cursor = params.get("replayFrom")
            if cursor is not None and cursor.get("type") != "start":
                return {"error": {"code": -32602, "message": "unknown replayFrom"}}
            if cursor is not None:
                for update in self._history.get(sid, []):
                    self.update(sid, update)
                self.update(sid, {"sessionUpdate": "replay_complete"})
            self._modes.setdefault(sid, "ask")
            self.state(sid, "idle")
            return {"result": {"configOptions": _options(self._modes[sid])}}
        if method == "session/set_config_option":
            if params.get("configId") != "mode" or params.get("type") != "id" \
                    or params.get("value") not in ("ask", "code"):
                return {"error": {"code": -32602, "message": "bad config option"}}
            for child, text in self._late.pop(sid, []):  # a child ending after its turn
                self.text(child, f"cl{next(self._ids)}", f"done: {text}")
                self.subagent(sid, child, state={"state": "idle", "stopReason": "end_turn"})
            self._modes[sid] = str(params["value"])
            return {"result": {"configOptions": _options(self._modes[sid])}}
        if method in ("tool_call/cancel", "terminal/cancel"):
            return self.cancel_work(method, sid, params)
        if method == "auth/login":
            if params.get("methodId") == "key":
                return {"result": {}}
            return {"error": {"code": -32602, "message": "unknown method"}}
        if method in ("auth/logout", "session/close", "session/delete"):
            return {"result": {}}
        if method == "session/list":
            return {"result": {"sessions": []}}
        return {"error": {"code": -32601, "message": f"Method not found: {method}"}}

    def cancel_work(self, method: str, sid: str, params: dict[str, Any]) -> dict[str, Any]:
        """``tool_call/cancel`` / ``terminal/cancel`` of a background item of ``sid``."""
        key = "toolCallId" if method == "tool_call/cancel" else "terminalId"
        wanted = params.get(key)
        items = self._background.get(sid, [])
        if not any(item.get(key) == wanted for item in items):
            return {"error": {"code": -32602, "message": f"unknown {key}: {wanted}"}}
        if key == "toolCallId":
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": wanted,
                              "status": "cancelled", "capabilities": None})
        else:
            self.update(sid, {"sessionUpdate": "terminal_update", "terminalId": wanted,
                              "exitStatus": {"signal": "SIGTERM"}, "capabilities": None})
        self.background(sid, [item for item in items if item.get(key) != wanted])
        self.state(sid, "idle")
        return {"result": {}}

    # ------------------------------------------------------------------ turns

    async def turn(self, sid: str, text: str, message_id: str) -> None:
        cancelled = self._cancelled.setdefault(sid, asyncio.Event())
        cancelled.clear()
        word = text.split()[0] if text.split() else ""
        reply = f"m{next(self._ids)}"
        if word == "fail":
            self.state(sid, "idle", stopReason="error",
                       error={"code": -32099, "message": "model exploded"})
            return
        if word == "slow":
            for n in range(400):
                self.update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": reply,
                                  "content": {"type": "text", "text": f"{n} "}}, keep=True)
                try:
                    await asyncio.wait_for(cancelled.wait(), 0.05)
                except TimeoutError:
                    continue
                break
            self.state(sid, "idle", stopReason="cancelled")
            return
        if word == "stream":  # stream <n>: a tool call, n chunks apart in time, its end
            count = int(text.split()[1]) if len(text.split()) > 1 else 20
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t-s",
                              "title": "Stream", "kind": "other", "status": "in_progress"},
                        keep=True)
            for n in range(count):
                await asyncio.sleep(0.05)
                self.update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": reply,
                                  "content": {"type": "text", "text": f"chunk {n} "}},
                            keep=True)
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t-s",
                              "status": "completed"}, keep=True)
        elif word == "ask":
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t-ask",
                              "title": "Write a file", "kind": "edit", "status": "pending"})
            self.state(sid, "requires_action")
            got = await self.ask("session/request_permission", {
                "sessionId": sid, "title": "Write a file",
                "subject": {"type": "tool_call", "toolCall": {"toolCallId": "t-ask"}},
                "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]})
            self.state(sid, "running")
            outcome = got.get("result", {}).get("outcome", {})
            self.update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": reply,
                              "content": {"type": "text",
                                          "text": f"permission {json.dumps(outcome)}"}})
        elif word in ("sub", "subrun", "sublate"):
            child = f"child-{next(self._ids)}"
            self.child_turn(sid, child, text, finish=word == "sub")
            if word == "sublate":
                self._late.setdefault(sid, []).append((child, text))
            self.text(sid, reply, f"parent: {text}")
        elif word == "claim":
            victim = text.split()[1] if len(text.split()) > 1 else ""
            self.text("ghost", "ghost", "from a session never announced")
            self.subagent(sid, victim, title="Mine now", state={"state": "running"})
            self.text(victim, "evil", "injected")
            self.update(sid, {"sessionUpdate": "session_message", "messageId": "evil-m",
                              "senderSessionId": sid, "recipientSessionId": victim,
                              "content": [{"type": "text", "text": "to the victim"}]})
            self.update(sid, {"sessionUpdate": "session_message", "messageId": "evil-n",
                              "senderSessionId": "someone-else", "recipientSessionId": sid,
                              "content": [{"type": "text", "text": "from nowhere"}]})
            self.subagent(sid, victim, state={"state": "idle"})
        elif word == "swarm":
            for n in range(int(text.split()[1]) if len(text.split()) > 1 else 100):
                child = f"swarm-{n}"
                self.subagent(sid, child, title=f"Swarm {n}", state={"state": "running"})
                self.text(child, f"sw{n}", f"swarm child {n}")
                self.subagent(sid, child, state={"state": "idle", "stopReason": "end_turn"})
            self.text(sid, reply, "swarmed")
        elif word == "grow":
            count = int(text.split()[1])
            chunks = int(text.split()[2])
            await self.flood(self.note(sid, {
                "sessionUpdate": "tool_call_update", "toolCallId": f"{reply}-{n}",
                "title": "grow", "kind": "other", "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "out"}}]})
                for n in range(count))
            await self.flood(self.note(sid, {
                "sessionUpdate": "tool_call_content_chunk", "toolCallId": f"{reply}-chunked",
                "content": {"type": "content", "content": {"type": "text", "text": f"c{n}"}}})
                for n in range(chunks))
            self.text(sid, reply, "grown")
        elif word == "bg":
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t-bg",
                              "title": "Watch files", "kind": "other",
                              "status": "in_progress", "capabilities": {"cancel": {}}})
            self.background(sid, [{"type": "tool_call", "toolCallId": "t-bg"}])
            self.state(sid, "running")
        elif word == "term":
            self.update(sid, {"sessionUpdate": "terminal_update", "terminalId": "term-1",
                              "command": "sleep 100", "capabilities": {"cancel": {}}})
            self.background(sid, [{"type": "terminal", "terminalId": "term-1"}])
            self.state(sid, "running")
        elif word == "mode":
            self._modes[sid] = "code"
            self.update(sid, {"sessionUpdate": "config_option_update",
                              "configOptions": _options("code")})
        else:
            self.update(sid, {"sessionUpdate": "notice", "severity": "info",
                              "title": "Heads up", "description": "a notice"})
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                              "title": "Read file", "kind": "read", "status": "in_progress"},
                        keep=True)
            self.update(sid, {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t1",
                              "content": {"type": "content",
                                          "content": {"type": "text", "text": "line 1"}}})
            self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                              "status": "completed"}, keep=True)
            self.update(sid, {"sessionUpdate": "plan_update", "plan": {
                "type": "items", "planId": "p1", "entries": [
                    {"content": "Answer", "priority": "high", "status": "completed"}]}})
            self.update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": reply,
                              "content": {"type": "text", "text": f"echo: {text}"}}, keep=True)
        self.state(sid, "idle", stopReason="end_turn",
                   usage={"inputTokens": 3, "outputTokens": 2, "totalTokens": 5})
        if word == "later":
            self.state(sid, "running")
            self.update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": "bg",
                              "content": {"type": "text", "text": "on my own"}})
            self.state(sid, "idle", stopReason="end_turn")

    async def prompt(self, req_id: Any, params: dict[str, Any]) -> None:
        sid = str(params.get("sessionId"))
        blocks = params.get("prompt") or []
        text = " ".join(b.get("text", "") for b in blocks if isinstance(b, dict)).strip()
        if self.v1:
            if text.startswith("forge "):  # acpgate's own child forms, forged
                victim = text.split()[1]
                self.update(sid, {"sessionUpdate": "subagent_update",
                                  "sessionId": f"agent-chosen-{victim}",
                                  "_meta": {"acpgate": {"subagent": {
                                      "sessionId": f"agent-chosen-{victim}"}}}})
                self.update(sid, {"sessionUpdate": "subagent_session_update",
                                  "sessionId": victim, "update": {
                                      "sessionUpdate": "agent_message_chunk", "messageId": "f",
                                      "content": {"type": "text", "text": "forged"}}})
            self.write({"method": "session/update", "params": {"sessionId": sid, "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": f"v1 echo: {text}"}}}})
            self.write({"id": req_id, "result": {"stopReason": "end_turn"}})
            return
        message_id = f"u{next(self._ids)}"
        self.state(sid, "running")
        for block in blocks:
            self.update(sid, {"sessionUpdate": "user_message_chunk", "messageId": message_id,
                              "content": block}, keep=True)
        self.write({"id": req_id, "result": {"messageId": message_id}})
        await self.turn(sid, text, message_id)

    async def handle(self, msg: dict[str, Any]) -> None:
        method, params, req_id = msg.get("method"), msg.get("params") or {}, msg.get("id")
        _record(msg)
        if method is None:
            future = self._answers.pop(str(req_id), None)
            if future is not None and not future.done():
                future.set_result(msg)
            return
        if method == "session/cancel":
            target = str(params.get("sessionId"))
            if target in self._parent:  # a child's work: it goes idle
                self.subagent(self._parent[target], target,
                              state={"state": "idle", "stopReason": "cancelled"})
                return
            self._cancelled.setdefault(target, asyncio.Event()).set()
            return
        if req_id is None:
            return
        if method == "session/prompt":
            await self.prompt(req_id, params)
            return
        if method == "session/new" and MODE == "grow":  # sessions acpgate never set up
            await self.flood(message for n in range(GROW_SESSIONS) for message in (
                self.text_note(f"ghost-{n}", "boo"),
                self.note(f"ghost-{n}", {"sessionUpdate": "subagent_update",
                                         "sessionId": f"ghost-{n}-child"})))
        self.write({"id": req_id, **self.answer(method, params)})

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
