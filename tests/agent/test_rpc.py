"""The JSON-RPC peer: framing errors, notifications, concurrency, outbound id correlation."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from services.agent.rpc import agent_peer
from services.common.jsonrpc import JsonRpcError, PeerClosed, read_lines


class Wire:
    """A peer under test, fed raw lines; its output lines are collected."""

    def __init__(self, handler: Any) -> None:
        self.inbox = asyncio.StreamReader()
        self.out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def write(data: bytes) -> None:
            assert data.endswith(b"\n") and data.count(b"\n") == 1
            self.out.put_nowait(orjson.loads(data))

        self.peer = agent_peer(write, handler)
        self.task = asyncio.create_task(self.peer.serve(read_lines(self.inbox)))

    def feed(self, obj: Any) -> None:
        self.inbox.feed_data((obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n")

    async def next(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.out.get(), 5)

    async def close(self) -> None:
        self.inbox.feed_eof()
        await self.task
        await self.peer.cancel()


async def test_framing_errors_and_notifications() -> None:
    seen: list[str] = []

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        seen.append(method)
        if method == "boom":
            raise RuntimeError("secret detail")
        raise JsonRpcError(-32601, f"Method not found: {method}")

    w = Wire(handler)
    w.feed(b"{broken")
    assert (await w.next())["error"]["code"] == -32700
    w.feed(b"   ")  # blank: skipped
    w.feed(b"[1, 2]")
    assert (await w.next())["error"] == {"code": -32700,
                                         "message": "Parse error: batch requests are not supported"}
    w.feed({"jsonrpc": "2.0", "id": 1})
    assert (await w.next())["error"]["code"] == -32700
    w.feed({"jsonrpc": "2.0", "method": "ignored-notification"})
    w.feed({"id": 3, "method": "x"})
    assert await w.next() == {"jsonrpc": "2.0", "id": 3,
                              "error": {"code": -32600, "message": "Invalid JSON-RPC version"}}
    w.feed({"jsonrpc": "2.0", "id": "s", "method": "boom"})
    err = await w.next()
    assert err["id"] == "s" and err["error"]["code"] == -32603
    assert "secret detail" not in err["error"]["message"]
    w.feed({"jsonrpc": "2.0", "id": 4, "method": "nope", "params": [1]})
    assert (await w.next())["error"] == {"code": -32601, "message": "Method not found: nope"}
    assert w.out.empty()
    await w.close()
    assert seen == ["ignored-notification", "boom", "nope"]


async def test_concurrent_requests_and_outbound_correlation() -> None:
    release = asyncio.Event()

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        if method == "slow":
            await release.wait()
            return {"slow": True}
        release.set()
        return {"fast": True}

    w = Wire(handler)
    w.feed({"jsonrpc": "2.0", "id": 1, "method": "slow"})
    w.feed({"jsonrpc": "2.0", "id": 2, "method": "fast"})
    first, second = await w.next(), await w.next()
    assert (first["id"], second["id"]) == (2, 1)  # the fast one was not blocked

    out = asyncio.create_task(w.peer.request("session/request_permission", {"a": 1}, 5))
    req = await w.next()
    assert req["method"] == "session/request_permission" and req["id"] == 0
    w.feed({"jsonrpc": "2.0", "id": 99, "result": {"stray": True}})  # unknown id: dropped
    # A client request that reuses our id number goes to the handler, not to our pending map.
    w.feed({"jsonrpc": "2.0", "id": 0, "method": "fast"})
    assert (await w.next()) == {"jsonrpc": "2.0", "id": 0, "result": {"fast": True}}
    w.feed({"jsonrpc": "2.0", "id": 0, "result": {"answer": 42}})
    assert await out == {"answer": 42}

    second_out = asyncio.create_task(w.peer.request("x", {}, 5))
    req = await w.next()
    assert req["id"] == 1
    w.feed({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "nope"}})
    with pytest.raises(JsonRpcError, match="nope"):
        await second_out

    with pytest.raises(TimeoutError):
        await w.peer.request("y", {}, 0.05)
    await w.next()

    pending = asyncio.create_task(w.peer.request("z", {}, 5))
    await w.next()
    await w.close()
    with pytest.raises(PeerClosed):
        await pending


async def test_write_failure_fails_outbound_requests_at_once() -> None:
    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        return {}

    async def broken(data: bytes) -> None:
        raise BrokenPipeError("stdout closed")

    peer = agent_peer(broken, handler)
    with pytest.raises(PeerClosed):
        await peer.request("session/request_permission", {}, 3600)
    with pytest.raises(PeerClosed):
        await peer.request("again", {}, 3600)
