"""The connection API used by the WebSocket gateway: serve_connection with a real runtime.

Connection default alias (`?agent=`), per-connection session ownership, and the
metrics the gateway renders.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from services.edge.transport.connection import LOCAL_OPERATOR, EdgeRuntime, serve_connection
from services.edge.transport.http import GatewayGauges, render_metrics
from tests.e2e.harness import streamed_text


class Client:
    """One in-process connection: push lines, await answers by id."""

    def __init__(self, runtime: EdgeRuntime, default_agent: str = "") -> None:
        self._in: asyncio.Queue[str | None] = asyncio.Queue()
        self.out: list[dict[str, Any]] = []
        self._waiters: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0
        self.task = asyncio.create_task(serve_connection(
            runtime, self._incoming(), self._send, caller=LOCAL_OPERATOR,
            default_agent=default_agent))

    async def _incoming(self) -> AsyncIterator[str]:
        while (item := await self._in.get()) is not None:
            yield item

    async def _send(self, line: str) -> None:
        msg = json.loads(line)
        self.out.append(msg)
        fut = self._waiters.pop(msg.get("id"), None) if "method" not in msg else None
        if fut is not None:
            fut.set_result(msg)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        self._in.put_nowait(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                        "params": params or {}}))
        return await asyncio.wait_for(fut, 60)

    async def close(self) -> None:
        self._in.put_nowait(None)
        await asyncio.wait_for(self.task, 60)


def test_connection_default_alias(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime) -> None:
    ws = os.path.realpath(runtime.cfg.config_dir / "agents" / "sdk" / "workspace")

    async def scenario() -> None:
        c = Client(runtime, default_agent="sdk")
        init = await c.call("initialize", {})
        assert "defaultModel" not in init["result"]["_meta"]["zeroclaw"], "sdk is not builtin"
        res = (await c.call("session/new", {}))["result"]
        # An external agent's result is its own; acpgate's additions under _meta.acpgate.
        assert res["_meta"]["acpgate"]["workspaceDir"] == ws and "workspaceDir" not in res
        explicit = (await c.call("session/new", {"agentAlias": "demo"}))["result"]
        assert explicit["workspaceDir"].endswith("/agents/demo/workspace")
        await c.close()
        blank = Client(runtime, default_agent="   ")
        assert (await blank.call("initialize", {}))["result"]["_meta"]["zeroclaw"][
            "defaultModel"] == "demo/demo"
        res = (await blank.call("session/new", {}))["result"]
        assert res["workspaceDir"].endswith("/agents/demo/workspace")
        await blank.close()
        assert runtime.registry.active == {}

    loop.run_until_complete(scenario())


def test_sessions_belong_to_their_connection(loop: asyncio.AbstractEventLoop,
                                             runtime: EdgeRuntime) -> None:
    async def scenario() -> None:
        a, b = Client(runtime), Client(runtime)
        sid = (await a.call("session/new", {"agentAlias": "sdk"}))["result"]["sessionId"]
        other = await b.call("session/prompt", {"sessionId": sid, "prompt": "x"})
        assert other["error"] == {"code": -32000, "message": f"Session not found: {sid}"}
        load = await b.call("session/load", {"sessionId": sid})
        assert load["error"]["code"] == -32602
        seen = len(a.out)
        answer = (await a.call("session/prompt", {"sessionId": sid, "prompt": "mine"}))["result"]
        assert answer == {"stopReason": "end_turn"}  # the agent's result, whole
        assert streamed_text(a.out[seen:], sid) == "echo: mine"
        await a.close()  # a disconnect releases a's sessions; b may now restore it
        assert set((await b.call("session/resume", {"sessionId": sid}))["result"]) == \
            {"modes", "configOptions"}
        await b.close()

    loop.run_until_complete(scenario())


def test_metrics_count(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime) -> None:
    async def scenario() -> None:
        m = runtime.metrics
        turns, relayed, errors = m.turns_total, m.relayed_updates_total, m.errors_total.get(-32601, 0)
        c = Client(runtime)
        sid = (await c.call("session/new", {"agentAlias": "sdk"}))["result"]["sessionId"]
        assert m.active_sessions == 1
        await c.call("session/prompt", {"sessionId": sid, "prompt": "count me"})
        await c.call("no/such")
        assert m.turns_total == turns + 1
        assert m.relayed_updates_total == relayed + 2
        assert m.errors_total[-32601] == errors + 1
        text = render_metrics(m, GatewayGauges())
        assert 'acpgate_errors_total{code="-32601"}' in text and "acpgate_turns_total" in text
        await c.close()
        assert m.active_sessions == 0

    loop.run_until_complete(scenario())


async def test_requests_in_flight_are_bounded_and_reading_waits() -> None:
    """At ``max_in_flight`` running requests the connection reads no further line."""
    from services.edge.dialect.dispatch import DialectConnection

    release = asyncio.Event()
    started = 0

    async def slow(conn: Any, params: dict[str, Any]) -> dict[str, Any]:
        nonlocal started
        started += 1
        await release.wait()
        return {}

    answers: list[str] = []

    async def send(line: str) -> None:
        answers.append(line)

    class Runtime:
        class metrics:  # only count_error is read
            @staticmethod
            def count_error(code: int) -> None: ...

    conn = DialectConnection(Runtime(), send, methods={"slow": slow}, caller=LOCAL_OPERATOR,  # type: ignore[arg-type]
                             max_in_flight=3)
    pulled = 0

    async def lines() -> AsyncIterator[str]:
        nonlocal pulled
        for i in range(5):
            pulled += 1
            yield json.dumps({"jsonrpc": "2.0", "id": i, "method": "slow"})

    serving = asyncio.create_task(conn.rpc.serve(lines()))
    await asyncio.sleep(0.05)
    assert started == 3 and pulled == 3 and not serving.done()  # the 4th line is not read
    release.set()
    await asyncio.wait_for(serving, 5.0)
    await asyncio.wait_for(conn.rpc.drain(5.0), 5.0)
    assert pulled == 5 and started == 5 and len(answers) == 5
