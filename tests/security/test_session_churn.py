"""A client churning sessions on one long-lived connection, from the attacker's side.

A connection keeps per-session state: the sessions it drives or watches, and on a v2
connection each session's translation (message ids, foreground state, modes) and its
unanswered permission requests; v2 ``session/prompt`` keeps idempotency keys and a count
of waiting prompts per live session. A client that creates and ends sessions without
end — or an IDE left open for days — must not grow the host: against a real in-process
edge (its embedded services, the built-in agent), one connection of each version churns
sessions every way one ends for it (``session/close``, ``session/delete``,
``session/stop``, ``session/detach``, closed by another connection while it watches or
drives it, ended under it by another one), and what it holds stays within its live
sessions.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.v2 import prompt as v2_prompt
from services.edge.transport.connection import LOCAL_OPERATOR, EdgeRuntime, serve_connection

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: Sessions each connection churns through: ten of each way one ends. What is held is
#: asserted against the live sessions, so the count only needs to show growth (the pure
#: wire churns two thousand: tests/common/test_acp_v2_translate.py).
CHURN = 70


class Client:
    """One in-process client connection: push lines, await answers by id."""

    def __init__(self, runtime: EdgeRuntime) -> None:
        self._runtime = runtime
        self._in: asyncio.Queue[str | None] = asyncio.Queue()
        self._waiters: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0
        self.task = asyncio.create_task(serve_connection(
            runtime, self._incoming(), self._send, caller=LOCAL_OPERATOR))

    async def _incoming(self) -> AsyncIterator[str]:
        while (item := await self._in.get()) is not None:
            yield item

    async def _send(self, line: str) -> None:
        msg = json.loads(line)
        fut = self._waiters.pop(msg.get("id"), None) \
            if isinstance(msg, dict) and "method" not in msg else None
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

    async def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        answer = await self.call(method, params)
        assert "result" in answer, (method, answer)
        return answer["result"]

    async def new(self, cwd: Path) -> str:
        return str((await self.result("session/new", {"cwd": str(cwd)}))["sessionId"])

    def conn(self, sid: str) -> DialectConnection:
        """This client's connection (the primary port of its session ``sid``)."""
        port = self._runtime.registry.active[sid].port
        assert isinstance(port, DialectConnection)
        return port

    async def close(self) -> None:
        self._in.put_nowait(None)
        await asyncio.wait_for(self.task, 60)


def _held(conn: DialectConnection) -> int:
    """The entries of ``conn``'s per-session maps (its sessions, what it watches, and a v2
    connection's translation state)."""
    wire = conn.wire.held() if conn.wire is not None else 0
    return len(conn.sessions) + len(conn.observing) + wire


def _live_of(runtime: EdgeRuntime, conn: DialectConnection) -> int:
    """The live sessions ``conn`` drives or watches."""
    return sum(1 for sid in {*conn.sessions, *conn.observing} if sid in runtime.registry.active)


async def _churn(runtime: EdgeRuntime, client: Client, other: Client, cwd: Path, *,
                 v2: bool) -> DialectConnection:
    """``CHURN`` sessions on ``client``'s connection, each ended another way; ``other``
    (a second connection of the same principal) watches, drives and ends some of them.
    One session stays live throughout."""
    keeper = await client.new(cwd)
    conn = client.conn(keeper)
    for i in range(CHURN):
        sid = await client.new(cwd)
        if v2:
            answer = await client.call("session/prompt", {
                "sessionId": sid, "idempotencyKey": f"key-{i}",
                "prompt": [{"type": "text", "text": f"hi {i}"}]})
            assert "result" in answer, answer
        step = i % 7
        if step == 0:
            await client.result("session/close", {"sessionId": sid})
        elif step == 1:
            await client.result("session/delete", {"sessionId": sid})
        elif step == 2:
            await client.result("session/stop", {"sessionId": sid})
        elif step == 3:  # no other controller and no grace: detaching ends it
            await client.result("session/detach", {"sessionId": sid})
        elif step == 4:  # another connection watches it, then ends it under this one
            await other.result("session/attach", {"sessionId": sid, "role": "observer"})
            await other.result("session/detach", {"sessionId": sid})
            await other.result("session/delete", {"sessionId": sid})
        elif step == 5:  # another connection drives it too, and closes it
            await other.result("session/attach", {"sessionId": sid, "role": "controller"})
            await other.result("session/close", {"sessionId": sid})
        else:  # this connection watches another's session, which ends
            theirs = await other.new(cwd)
            await client.result("session/attach", {"sessionId": theirs, "role": "observer"})
            await other.result("session/close", {"sessionId": theirs})
            await client.result("session/close", {"sessionId": sid})
        assert set(runtime.registry.active) == {keeper}  # each end was awaited
    return conn


@pytest.mark.parametrize("version", [1, 2])
def test_churned_sessions_leave_nothing_on_the_connection(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, tmp_path: Path,
        version: int) -> None:
    async def scenario() -> None:
        client, other = Client(runtime), Client(runtime)
        try:
            await client.result("initialize", {"protocolVersion": version,
                                                **({"info": {"name": "churn", "version": "1"}}
                                                   if version == 2 else {})})
            await other.result("initialize", {})
            conn = await _churn(runtime, client, other, tmp_path, v2=version == 2)
            live = _live_of(runtime, conn)
            assert live == 1
            if version == 2:
                assert conn.wire is not None
                assert len(conn.wire.sessions) <= live, len(conn.wire.sessions)
            assert _held(conn) <= 2 * live, (_held(conn), len(conn.sessions),
                                             len(conn.observing))
            gc.collect()
            # The keys and counts v2 keeps per live session went with the sessions.
            assert len(v2_prompt._KEYS) <= len(runtime.registry.active)
            assert len(v2_prompt._WAITING) <= len(runtime.registry.active)
        finally:
            await client.close()
            await other.close()
        assert runtime.registry.active == {}

    loop.run_until_complete(scenario())
