"""SPEC §6 back-channel ids and per-direction correlation (unit level).

The back-channel runs on the connection's JSON-RPC peer configured as the
dialect's (``zc-out-N`` ids); answers are fed to that peer as the client's lines.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from services.common.jsonrpc import JsonRpcPeer, prefixed_ids
from services.common.protocol import OUTBOUND_ID_PREFIX
from services.edge.ports.backchannel import (
    BackChannel,
    BackChannelTimeout,
    ClientErrorAnswer,
    ClientGone,
)


def _peer(sent: list[dict[str, Any]], served: list[str]) -> JsonRpcPeer:
    async def send(line: str) -> None:
        sent.append(orjson.loads(line))

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        served.append(method)
        return {"served": method}

    return JsonRpcPeer(send, handler, next_id=prefixed_ids(OUTBOUND_ID_PREFIX))


async def test_ids_count_from_zero_and_route_by_id() -> None:
    sent: list[dict[str, Any]] = []
    served: list[str] = []
    peer = _peer(sent, served)
    bc = BackChannel(peer)
    first = asyncio.create_task(bc.request("session/request_permission", {"a": 1}, 5))
    second = asyncio.create_task(bc.request("session/request_permission", {"a": 2}, 5))
    await asyncio.sleep(0)
    assert [m["id"] for m in sent] == ["zc-out-0", "zc-out-1"]
    assert peer.pending.settle({"id": "zc-out-1", "result": {"x": 2}})
    peer.feed('{"jsonrpc":"2.0","id":"zc-out-0","result":{"x":1}}')
    assert await first == {"x": 1} and await second == {"x": 2}
    assert not peer.pending.settle({"id": "zc-out-0", "result": {}})  # unknown now: dropped
    assert not peer.pending.settle({"id": 0, "result": {}})
    # A client request that uses one of our ids as its own is served, not taken for an answer.
    third = asyncio.create_task(bc.request("m", {}, 5))
    await asyncio.sleep(0)
    peer.feed('{"jsonrpc":"2.0","id":"zc-out-2","method":"session/cancel","params":{}}')
    await peer.drain(5)
    assert served == ["session/cancel"] and not third.done()
    assert sent[-1] == {"jsonrpc": "2.0", "id": "zc-out-2", "result": {"served": "session/cancel"}}
    peer.feed('{"jsonrpc":"2.0","id":"zc-out-2","result":{"ok":true}}')
    assert await third == {"ok": True}


async def test_error_timeout_and_gone() -> None:
    peer = _peer([], [])
    bc = BackChannel(peer)
    task = asyncio.create_task(bc.request("m", {}, 5))
    await asyncio.sleep(0)
    peer.feed('{"jsonrpc":"2.0","id":"zc-out-0","error":{"code":1,"message":"no"}}')
    with pytest.raises(ClientErrorAnswer, match="no"):
        await task
    with pytest.raises(BackChannelTimeout):
        await bc.request("m", {}, 0.01)
    task = asyncio.create_task(bc.request("m", {}, 5))
    await asyncio.sleep(0)
    bc.close()
    with pytest.raises(ClientGone):
        await task
    with pytest.raises(ClientGone):
        await bc.request("m", {}, 5)


async def test_a_client_that_stopped_reading_fails_requests_at_once() -> None:
    async def broken(line: str) -> None:
        raise ConnectionError("client gone")

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        return None

    bc = BackChannel(JsonRpcPeer(broken, handler, next_id=prefixed_ids(OUTBOUND_ID_PREFIX)))
    with pytest.raises(ClientGone):
        await bc.request("session/request_permission", {}, 3600)
    with pytest.raises(ClientGone):
        await bc.request("again", {}, 3600)
