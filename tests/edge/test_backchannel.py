"""SPEC §6 back-channel ids and per-direction correlation (unit level)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from services.edge.backchannel import (
    BackChannel,
    BackChannelTimeout,
    ClientErrorAnswer,
    ClientGone,
)


async def test_ids_count_from_zero_and_route_by_id() -> None:
    sent: list[dict] = []

    async def send(line: str) -> None:
        sent.append(orjson.loads(line))

    bc = BackChannel(send)
    first = asyncio.create_task(bc.request("session/request_permission", {"a": 1}, 5))
    second = asyncio.create_task(bc.request("session/request_permission", {"a": 2}, 5))
    await asyncio.sleep(0)
    assert [m["id"] for m in sent] == ["zc-out-0", "zc-out-1"]
    assert bc.on_response({"id": "zc-out-1", "result": {"x": 2}})
    assert bc.on_response({"id": "zc-out-0", "result": {"x": 1}})
    assert await first == {"x": 1} and await second == {"x": 2}
    assert not bc.on_response({"id": "zc-out-0", "result": {}})  # unknown now: dropped
    assert not bc.on_response({"id": 0, "result": {}})


async def test_error_timeout_and_gone() -> None:
    async def send(line: str) -> None:
        return None

    bc = BackChannel(send)
    task = asyncio.create_task(bc.request("m", {}, 5))
    await asyncio.sleep(0)
    bc.on_response({"id": "zc-out-0", "error": {"code": 1, "message": "no"}})
    with pytest.raises(ClientErrorAnswer):
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
