"""A v2 client through the gateway: WebSocket (with a reconnect that resumes by acpgate's
event cursor) and Streamable HTTP, on a real ``acpgate serve`` with the built-in agent.

Every message the gateway sends the v2 client is checked against the vendored v2 schema.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import workspace_beside_config
from tests.gateway.attach_client import Message, cut, event_id, kind
from tests.gateway.stack import full_stack
from tests.gateway.streamable_client import RemoteClient
from tests.gateway.wsfixtures import mint, write_config
from tests.security.gateway_stack import WAIT, running_gateway
from tests.v2schema import check_sent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INIT_V2 = {"protocolVersion": 2, "info": {"name": "v2-gateway-test", "version": "1"}}


class V2Socket:
    """A v2 JSON-RPC client over one WebSocket; every message it reads is schema-checked."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self._next = 1
        self._methods: dict[int, str] = {}

    async def send(self, method: str, params: dict[str, Any]) -> int:
        req_id = self._next
        self._next += 1
        self._methods[req_id] = method
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method,
                                       "params": params}))
        return req_id

    async def read(self) -> Message:
        msg: Message = json.loads(await asyncio.wait_for(self.ws.recv(), WAIT))
        check_sent(msg, None if "method" in msg else self._methods.get(msg.get("id", -1)))
        return msg

    async def until(self, done: Any) -> list[Message]:
        seen: list[Message] = []
        while True:
            msg = await self.read()
            seen.append(msg)
            if done(msg):
                return seen

    async def call(self, method: str, params: dict[str, Any]) -> tuple[list[Message], Any]:
        req_id = await self.send(method, params)
        seen = await self.until(lambda m: "method" not in m and m.get("id") == req_id)
        assert "result" in seen[-1], seen[-1]
        return seen[:-1], seen[-1]["result"]


def _idle(msg: Message) -> bool:
    return kind(msg) == "state_update" and msg["params"]["update"]["state"] == "idle"


async def test_v2_over_websocket_and_resume_by_event_cursor(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        first = V2Socket(await gw.connect(token))
        _, init = await first.call("initialize", INIT_V2)
        assert init["protocolVersion"] == 2
        _, new = await first.call("session/new", {})
        sid = new["sessionId"]
        before, ack = await first.call("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "hello v2"}]})
        assert [kind(m) for m in before] == ["state_update", "user_message_chunk"]
        turn = await first.until(_idle)
        numbered = [event_id(m) for m in turn if event_id(m) is not None]
        assert numbered, "every relayed update carries its event id"
        cut(first.ws)  # the session detaches, its updates kept in the ring
        await asyncio.sleep(1)
        again = V2Socket(await gw.connect(token))
        await again.call("initialize", INIT_V2)
        replayed, resumed = await again.call("session/resume", {
            "sessionId": sid, "cwd": "/", "replayFrom": {"type": "_acpgate_event",
                                                       "eventId": numbered[0]}})
        assert resumed["_meta"]["acpgate"]["replay"] == "events"
        kinds = [kind(m) for m in replayed]
        assert kinds[-2:] == ["replay_complete", "state_update"]
        ids = [event_id(m) for m in replayed if event_id(m) is not None]
        assert ids[0] == numbered[0] and ids == sorted(ids), "from the cursor on, in order"
        chunks = [m for m in replayed if kind(m) == "agent_message_chunk"]
        assert chunks and all(m["params"]["update"]["messageId"] for m in chunks)
        # The session is this connection's: a v2 prompt runs on it.
        await again.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "after resume"}]})
        assert (await again.until(_idle))[-1]["params"]["update"]["stopReason"] == "end_turn"
        assert ack["messageId"]
        await again.ws.close()


async def test_v2_over_streamable_http(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    cwd = workspace_beside_config(tmp_path)
    async with full_stack(cfg) as st:
        c = RemoteClient(st.edge.http_url, token)
        try:
            r = await c.http.post(c.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                               "params": INIT_V2}, headers=c.headers)
            assert r.status_code == 200, r.text
            check_sent(r.json(), "initialize")
            assert r.json()["result"]["protocolVersion"] == 2
            c.connection_id = r.headers["Acp-Connection-Id"]
            async with c.stream() as conn_stream:
                await c.post({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                              "params": {"cwd": str(cwd)}})
                answer = (await conn_stream.next()).data
                check_sent(answer, "session/new")
                sid = answer["result"]["sessionId"]
                async with c.stream(session=sid) as stream:
                    assert (await c.post({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                          "params": {"sessionId": sid, "prompt": [
                                              {"type": "text", "text": "over http"}]}},
                                         session=sid)).status_code == 202
                    events = await stream.until(
                        lambda d: d.get("method") == "session/update"
                        and d["params"]["update"].get("state") == "idle")
            for event in events:
                check_sent(event.data, "session/prompt" if event.data.get("id") == 2 else None)
            acks = [e.data for e in events if e.data.get("id") == 2]
            assert acks and acks[0]["result"]["messageId"]
            assert events[-1].data["params"]["update"]["stopReason"] == "end_turn"
            assert (await c.delete()).status_code == 202
        finally:
            await c.aclose()
