"""An external ACP agent on raw JSON-RPC (no SDK, no acpgate imports) for the pass-through
tests: it records every message it receives and uses ACP's newer surface.

Every message it reads is appended to ``$RELAY_AGENT_LOG`` as one JSON line (the
process id with it), so a test sees exactly what reached which adapter process.

- ``initialize``: capabilities acpgate's schema does not know (``sessionCapabilities``
  ``systemPrompt``, ``fork``, ``subagents`` and an unknown one, ``auth.logout``, ``providers``, ``mcpCapabilities.acp``,
  ``_meta``), an auth method ``key`` whose credential comes in
  ``_meta["api-key"]`` (gemini-cli's way) and a top-level ``_meta``;
- ``authenticate``: ``methodId`` ``key`` with ``_meta["api-key"]`` equal to
  ``$RELAY_AGENT_KEY`` succeeds; anything else is -32000 ``bad key`` with ``data``;
- ``session/new``: -32000 ``Authentication required`` until authenticated when
  ``$RELAY_AGENT_KEY`` is set; else its session (with ``models``, ``modes`` and a
  ``_meta``), naming the params it got that acpgate does not read in ``_meta.got``;
- ``session/fork`` of one of its sessions (by id, even one another of its processes made:
  as claude-agent-acp keeps them on disk): a new session, naming the parent and the params
  it got that acpgate does not read in ``_meta``;
- ``session/set_model``: remembers the model (``{}``); an unknown one is -32602;
- ``session/load`` / ``session/resume``: its own sessions, with the model it remembers
  (the result names the session, as claude-agent-acp's does);
- ``_vendor/echo``: its params back (with the session id it was given);
- ``logout`` (forgets the authentication), ``providers/list``, ``providers/set``: ``{}``,
  the list, ``{}``;
- ``session/prompt``: ``quota`` → usage only in ``_meta.quota`` (gemini-cli's way);
  ``ask`` → a ``_vendor/ask`` request to the client for its own session, and
  ``askother`` one naming another session, reporting the answer or error code;
  ``notes`` → ``_vendor/note`` notifications without a session, for its own and for
  another session; ``stream <n>`` → n chunks 0.1 s apart (cancellable, the result
  with ``usage``); ``model`` → the model it remembers; else ``echo: <text>``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from typing import Any

LOG = os.environ.get("RELAY_AGENT_LOG", "")
KEY = os.environ.get("RELAY_AGENT_KEY", "")
MODELS = [{"modelId": "small", "name": "Small"}, {"modelId": "large", "name": "Large"}]
MODES = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"},
                                                    {"id": "code", "name": "Code"}]}
PROFILE = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "loadSession": True,
        "promptCapabilities": {"image": True, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False, "acp": True},
        "sessionCapabilities": {"resume": {}, "fork": {}, "systemPrompt": {"mode": {}},
                                "futureThing": {"x": 1}, "subagents": {}},
        "auth": {"logout": {}},
        "providers": {},
        "_meta": {"claudeCode": {"promptQueueing": True}},
    },
    "agentInfo": {"name": "relay-agent", "version": "1"},
    "authMethods": [{"id": "key", "name": "API key", "_meta": {"api-key": {"provider": "x"}}}],
    "_meta": {"steering": {"supported": True}},
}


def agent_section(alias: str, log: str, key: str = "") -> str:
    """The ``[agents.<alias>]`` config section running this script."""
    env = {"RELAY_AGENT_LOG": log, **({"RELAY_AGENT_KEY": key} if key else {})}
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    return (f"\n[agents.{alias}]\nkind = \"acp\"\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(os.path.abspath(__file__))}]\nenv = {{ {pairs} }}\n")


def _record(msg: dict[str, Any]) -> None:
    """Append one received message to the log (a line is small: written at once)."""
    if LOG:
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), **msg}) + "\n")


def received(log: str) -> list[dict[str, Any]]:
    """Every message the agents of ``log`` received, in order (``pid`` added)."""
    try:
        with open(log, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


class Agent:
    """One agent process."""

    def __init__(self) -> None:
        self._out = sys.stdout.buffer
        self._ids = itertools.count(1)
        self._answers: dict[str, asyncio.Future[Any]] = {}
        self._cancelled: dict[str, asyncio.Event] = {}
        self._models: dict[str, str] = {}
        self._authenticated = not KEY
        self._tasks: set[asyncio.Task[None]] = set()

    def write(self, *messages: dict[str, Any]) -> None:
        self._out.write(b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n"
                                 for m in messages))
        self._out.flush()

    def text(self, sid: str, text: str) -> dict[str, Any]:
        return {"method": "session/update", "params": {"sessionId": sid, "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = f"a{next(self._ids)}"
        answer = self._answers[rid] = asyncio.get_running_loop().create_future()
        self.write({"id": rid, "method": method, "params": params})
        return dict(await answer)

    def state(self, sid: str) -> dict[str, Any]:
        model = self._models.setdefault(sid, "small")
        return {"models": {"availableModels": MODELS, "currentModelId": model}, "modes": MODES}

    async def prompt(self, sid: str, text: str) -> dict[str, Any]:
        word, *args = text.split() or [""]
        cancelled = self._cancelled.setdefault(sid, asyncio.Event())
        cancelled.clear()
        if word == "quota":
            self.write(self.text(sid, "counted"))
            return {"stopReason": "end_turn",
                    "_meta": {"quota": {"token_count": {"input_tokens": 7, "output_tokens": 3}}}}
        if word in ("ask", "askother"):
            target = sid if word == "ask" else "someone-elses-session"
            got = await self.ask("_vendor/ask", {"sessionId": target, "q": 1})
            note = f"answer {json.dumps(got['result'])}" if "result" in got \
                else f"error {got['error']['code']}"
            self.write(self.text(sid, note))
            return {"stopReason": "end_turn"}
        if word == "notes":
            self.write({"method": "_vendor/note", "params": {"n": "none"}},
                       {"method": "_vendor/note", "params": {"sessionId": sid, "n": "own"}},
                       {"method": "_vendor/note", "params": {"sessionId": "other", "n": "other"}},
                       self.text(sid, "noted"))
            return {"stopReason": "end_turn"}
        if word == "stream":
            for i in range(int(args[0])):
                if cancelled.is_set():
                    break
                self.write(self.text(sid, f"chunk {i} "))
                try:
                    await asyncio.wait_for(cancelled.wait(), 0.1)
                except TimeoutError:
                    pass
            stop = "cancelled" if cancelled.is_set() else "end_turn"
            return {"stopReason": stop, "usage": {"inputTokens": 5, "outputTokens": 2,
                                                  "totalTokens": 7}}
        if word == "model":
            self.write(self.text(sid, f"model {self._models.get(sid, 'small')}"))
            return {"stopReason": "end_turn"}
        self.write(self.text(sid, f"echo: {text}"))
        return {"stopReason": "end_turn"}

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result (or ``{"error": ...}``) of a request other than a prompt."""
        sid = str(params.get("sessionId", ""))
        if method == "initialize":
            return {"result": PROFILE}
        if method == "authenticate":
            meta = params.get("_meta") or {}
            if KEY and params.get("methodId") == "key" and meta.get("api-key") == KEY:
                self._authenticated = True
                return {"result": {}}
            return {"error": {"code": -32000, "message": "bad key", "data": {"why": "key"}}}
        if method == "session/new":
            if not self._authenticated:
                return {"error": {"code": -32000, "message": "Authentication required"}}
            sid = f"own-{os.getpid()}-{next(self._ids)}"
            got = sorted(k for k in params if k not in ("cwd", "mcpServers"))
            return {"result": {"sessionId": sid, **self.state(sid),
                               "_meta": {"vendor": 1, "got": got}}}
        if method in ("session/load", "session/resume"):  # named, as claude-agent-acp's
            return {"result": {"sessionId": sid, **self.state(sid)}}
        if method == "session/fork":  # of its own session, as claude-agent-acp forks
            if not sid.startswith("own-"):
                return {"error": {"code": -32002, "message": f"no session {sid}"}}
            fork = f"own-{os.getpid()}-{next(self._ids)}"
            got = sorted(k for k in params if k not in ("sessionId", "cwd", "mcpServers"))
            return {"result": {"sessionId": fork, **self.state(fork),
                               "_meta": {"vendor": "fork", "of": sid, "got": got}}}
        if method == "session/set_model":
            if params.get("modelId") not in [m["modelId"] for m in MODELS]:
                return {"error": {"code": -32602, "message": "unknown model",
                                  "data": {"model": params.get("modelId")}}}
            self._models[sid] = str(params["modelId"])
            return {"result": {}}
        if method == "session/set_mode":
            return {"result": {}}
        if method == "_vendor/echo":
            return {"result": {"echo": params, "sessionId": sid}}
        if method == "logout":
            self._authenticated = not KEY
            return {"result": {}}
        if method == "providers/set":
            return {"result": {}}
        if method == "providers/list":
            return {"result": {"providers": [{"id": "main"}]}}
        return {"error": {"code": -32601, "message": f"Method not found: {method}"}}

    async def handle(self, msg: dict[str, Any]) -> None:
        method, params, req_id = msg.get("method"), msg.get("params") or {}, msg.get("id")
        _record(msg)
        if method is None:
            future = self._answers.pop(str(req_id), None)
            if future is not None and not future.done():
                future.set_result(msg)
            return
        if method == "session/cancel":
            self._cancelled.setdefault(str(params.get("sessionId")), asyncio.Event()).set()
            return
        if req_id is None:
            return
        if method == "session/prompt":
            blocks = params.get("prompt") or []
            text = " ".join(b.get("text", "") for b in blocks if isinstance(b, dict))
            self.write({"id": req_id, "result": await self.prompt(
                str(params.get("sessionId")), text.strip())})
            return
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
