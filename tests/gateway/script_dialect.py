"""A scripted stand-in for the dialect, to pin the remote transport's own jobs.

It speaks just enough JSON-RPC to show where each message goes:

- ``initialize`` → ``{protocolVersion, principal, agent}``;
- ``session/new`` → ``{sessionId: "s<n>"}``; ``session/load`` → three
  ``session/update`` notifications of that session, then ``{}``;
- ``emit {sessionId?, n, pad?}`` → ``n`` notifications ``session/update {sessionId?, seq}``
  (``pad``: that many more characters each), then ``{sent: n}``;
- ``session/prompt {sessionId}`` → one update, a ``session/request_permission`` to the
  client (its answer awaited), then ``{stopReason, answer}``;
- ``ask`` → a client request without a session (``fs/read_text_file``), then its answer;
- ``raw {line}`` → ``line`` sent as it is (an adapter's pretty-printed JSON), then ``{}``;
- anything else → ``{method}``; a notification gets nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from itertools import count
from typing import Any

from services.edge.caller import Caller

from .wsfixtures import frames_until

Send = Callable[[str], Awaitable[None]]


def _note(params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})


class ScriptDialect:
    """``serve_connection``'s shape; one instance serves every connection of a test."""

    def __init__(self) -> None:
        self._sessions = count(1)
        self._asks = count(1)
        self._answers: dict[str, asyncio.Future[Any]] = {}
        #: Every message read, by any connection, in order.
        self.seen: list[dict[str, Any]] = []
        self.finished = 0

    async def __call__(self, runtime: Any, incoming: AsyncIterator[str], send: Send, *,
                       default_agent: str = "", caller: Caller, remote: bool = False,
                       send_many: Any = None, revoked: Any = None,
                       stopping: asyncio.Event | None = None) -> None:
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for line in frames_until(incoming, stopping):
                msg = json.loads(line)
                self.seen.append(msg)
                if "method" not in msg:
                    fut = self._answers.pop(str(msg.get("id")), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg.get("result"))
                    continue
                task = asyncio.create_task(self._run(send, msg, caller, default_agent))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()
            self.finished += 1

    async def _ask(self, send: Send, method: str, params: dict[str, Any]) -> Any:
        rid = f"zc-out-{next(self._asks)}"
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers[rid] = fut
        await send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
        return await fut

    async def _run(self, send: Send, msg: dict[str, Any], caller: Caller, agent: str) -> None:
        method, params = msg["method"], msg.get("params") or {}
        sid = params.get("sessionId")
        result: Any
        if method == "initialize":
            result = {"protocolVersion": 1, "principal": caller.principal, "agent": agent}
        elif method == "session/new":
            result = {"sessionId": f"s{next(self._sessions)}"}
        elif method == "session/load":
            for seq in range(3):
                await send(_note({"sessionId": sid, "seq": seq}))
            result = {}
        elif method == "emit":
            pad = "x" * params.get("pad", 0)
            for seq in range(params["n"]):
                note = {"sessionId": sid, "seq": seq} if sid else {"seq": seq}
                await send(_note({**note, "pad": pad} if pad else note))
            result = {"sent": params["n"]}
        elif method == "session/prompt":
            await send(_note({"sessionId": sid, "seq": 0}))
            answer = await self._ask(send, "session/request_permission",
                                     {"sessionId": sid, "options": []})
            result = {"stopReason": "end_turn", "answer": answer}
        elif method == "raw":
            await send(params["line"])
            result = {}
        elif method == "ask":
            result = {"answer": await self._ask(send, "fs/read_text_file", {"path": "/x"})}
        else:
            result = {"method": method}
        if "id" in msg:
            await send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}))
