"""One token cannot hold every connection of the gateway.

``[gateway] max_connections`` is global: one token holding all 64 sockets
locked every other client out. ``max_connections_per_token`` (default: a
quarter of ``max_connections``) caps each token's share; the token over its
share gets HTTP 503 before the upgrade, every other token still connects.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, Token, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def refused_with(gw: Gateway, token: Token) -> int:
    with pytest.raises(InvalidStatus) as exc:
        await gw.connect(token)
    return exc.value.response.status_code


async def works(ws: ClientConnection) -> bool:
    result = await RawClient(ws).result("initialize", {"protocolVersion": 1})
    return bool(result["protocolVersion"] == 1)


async def test_a_token_over_its_share_gets_503_and_only_that_token(tmp_path: Path) -> None:
    async with running_gateway(tmp_path,
                               gateway="max_connections = 8\n") as gw:
        greedy, other = await gw.token("greedy"), await gw.token("other")
        held = [await gw.connect(greedy) for _ in range(2)]  # a quarter of 8
        assert await refused_with(gw, greedy) == 503
        # Another token is not locked out, and the greedy token's own sockets still work.
        others = [await gw.connect(other) for _ in range(2)]
        assert all([await works(ws) for ws in (*held, *others)])
        assert await refused_with(gw, other) == 503
        # A freed slot is the token's again.
        await held.pop().close()
        for _ in range(100):
            if (await gw.metrics())["acpgate_ws_connections"] == 3:
                break
            await asyncio.sleep(0.05)
        held.append(await gw.connect(greedy))
        assert await works(held[-1])
        metrics = await gw.metrics()
        assert metrics['acpgate_ws_rejected_total{reason="too_many_connections_for_token"}'] == 2
        for ws in (*held, *others):
            await ws.close()


async def test_the_share_is_configurable(tmp_path: Path) -> None:
    async with running_gateway(tmp_path,
                               gateway="max_connections = 8\nmax_connections_per_token = 3\n"
                               ) as gw:
        token = await gw.token("t")
        held = [await gw.connect(token) for _ in range(3)]
        assert await refused_with(gw, token) == 503
        for ws in held:
            await ws.close()
