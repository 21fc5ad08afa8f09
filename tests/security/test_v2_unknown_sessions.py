"""A v2 client naming sessions that do not exist, from the attacker's side.

A v2 connection keeps a translator per session it speaks of (the upserts' state). A
request naming a session id that is not one of the connection's is refused before such
state is made: against a real ``acpgate serve``, a client sending a hundred thousand
``session/set_config_option`` notifications for made-up ids (in batches, answered by
nothing) leaves the edge worker's memory where it was, and the connection still serves.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psutil
import pytest

from tests.gateway.test_v2_gateway import INIT_V2, V2Socket
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_BATCH = 500
#: What the edge may grow by while it reads the flood (a translator each would be ~25 MB).
_SLACK_BYTES = 8 * 1024 * 1024


async def test_made_up_session_ids_hold_nothing(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        client = V2Socket(await gw.connect(await gw.token("attacker")))
        await client.call("initialize", INIT_V2)
        edge = psutil.Process(gw.edge_pid())

        async def flood(batches: int) -> None:
            for _ in range(batches):
                await client.ws.send(json.dumps([
                    {"jsonrpc": "2.0", "method": "session/set_config_option",
                     "params": {"sessionId": str(uuid.uuid4()), "configId": "mode",
                                "value": "full"}} for _ in range(_BATCH)]))
            await client.call("session/list", {})  # read in order: all of it was served

        await flood(10)  # the edge's allocator warmed up on the same work
        before = edge.memory_info().rss
        await flood(200)
        grown = edge.memory_info().rss - before
        assert grown < _SLACK_BYTES, f"the edge grew by {grown / 2**20:.1f} MiB"
        _, new = await client.call("session/new", {})
        _, options = await client.call("session/set_config_option", {
            "sessionId": new["sessionId"], "configId": "mode", "value": "supervised"})
        assert any(o["currentValue"] == "supervised" for o in options["configOptions"])
        await client.ws.close()
