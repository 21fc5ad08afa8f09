"""acpgate driven by the official Python SDK's remote clients: Streamable HTTP and WebSocket.

``acp.http.create_http_stream`` (HTTP/1.1, as the SDK speaks it on ``http://``, and
HTTP/2 with prior knowledge) and ``acp.ws.create_websocket_stream`` against a real
gateway (services, the built-in demo agent as a real process): initialize,
session/new, a prompt whose shell tool asks permission, a prompt cancelled while
its permission is pending, session/list, session/close; then on a new connection
session/load (its history replayed) and a prompt. The SDK validates every message
against the ACP schema, so a frame the transport mangled fails here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from acp import connect_to_agent, text_block
from acp.http import create_http_stream
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    RequestPermissionResponse,
)
from acp.ws import create_websocket_stream

from tests.e2e.harness import workspace_beside_config
from tests.gateway.stack import full_stack
from tests.gateway.wsfixtures import mint, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class Client:
    """Collects updates; allows permission requests, or holds them while ``hold`` is set."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permissions: list[str] = []
        self.hold = False
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.permissions.append(str(tool_call.title))
        if self.hold:
            self.asked.set()
            await self.release.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        allow = next(o for o in options if o.kind.startswith("allow"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    def on_connect(self, conn: Any) -> None:
        pass

    def text(self) -> str:
        return "".join(getattr(getattr(u, "content", None), "text", "") for u in self.updates
                       if getattr(u, "session_update", "") == "agent_message_chunk")


Dial = Callable[[], Awaitable[Any]]


async def _initialized(client: Client, dial: Dial) -> Any:
    conn = connect_to_agent(client, await dial())
    init = await conn.initialize(
        protocol_version=1,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
            terminal=False),
        client_info=Implementation(name="py-sdk-remote", version="1"))
    assert init.protocol_version == 1 and init.agent_capabilities.load_session
    return conn


async def _scenario(dial: Dial, cwd: Path) -> None:
    client = Client()
    conn = await _initialized(client, dial)
    try:
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        sid = session.session_id
        result = await conn.prompt(session_id=sid, prompt=[text_block("!echo py-remote-ok")])
        assert result.stop_reason == "end_turn"
        assert "py-remote-ok" in client.text() and client.permissions
        client.hold = True
        pending = asyncio.ensure_future(conn.prompt(session_id=sid,
                                                    prompt=[text_block("!sleep 30")]))
        await client.asked.wait()
        await conn.cancel(session_id=sid)
        assert (await pending).stop_reason == "cancelled"
        client.release.set()
        listed = await conn.list_sessions()
        assert sid in [s.session_id for s in listed.sessions]
        await conn.close_session(session_id=sid)
    finally:
        await conn.close()
    again = Client()
    conn = await _initialized(again, dial)
    try:
        await conn.load_session(session_id=sid, cwd=str(cwd), mcp_servers=[])
        assert again.updates, "session/load replayed the stored conversation"
        assert "py-remote-ok" in again.text()
        result = await conn.prompt(session_id=sid, prompt=[text_block("after the reload")])
        assert result.stop_reason == "end_turn" and "after the reload" in again.text()
        await conn.close_session(session_id=sid)
    finally:
        await conn.close()


async def _run(tmp_path: Path, make: Callable[[str, str], Dial], ws: bool = False) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    cwd = workspace_beside_config(tmp_path)
    async with full_stack(cfg) as st:
        await asyncio.wait_for(_scenario(make(st.edge.url if ws else st.edge.http_url, secret),
                                         cwd), 90)
        for _ in range(200):  # the DELETEs / closes are processed on the server's side
            if not st.edge.connection_count:
                break
            await asyncio.sleep(0.05)
        assert st.edge.connection_count == 0


async def test_python_sdk_over_streamable_http(tmp_path: Path) -> None:
    def make(url: str, secret: str) -> Dial:
        async def dial() -> Any:
            return create_http_stream(url, headers={"Authorization": f"Bearer {secret}"})
        return dial

    await _run(tmp_path, make)


async def test_python_sdk_over_streamable_http2(tmp_path: Path) -> None:
    """HTTP/2 with prior knowledge (h2c): one TCP connection for every POST and stream."""
    clients: list[httpx.AsyncClient] = []
    versions: list[str] = []

    async def seen(response: httpx.Response) -> None:
        versions.append(response.http_version)

    def make(url: str, secret: str) -> Dial:
        async def dial() -> Any:
            client = httpx.AsyncClient(http1=False, http2=True, timeout=httpx.Timeout(None),
                                       event_hooks={"response": [seen]})
            clients.append(client)
            return create_http_stream(url, client=client,
                                      headers={"Authorization": f"Bearer {secret}"})
        return dial

    try:
        await _run(tmp_path, make)
    finally:
        for client in clients:
            await client.aclose()
    assert versions and set(versions) == {"HTTP/2"}


async def test_python_sdk_over_websocket(tmp_path: Path) -> None:
    def make(url: str, secret: str) -> Dial:
        async def dial() -> Any:
            return await create_websocket_stream(url,
                                                 headers={"Authorization": f"Bearer {secret}"})
        return dial

    await _run(tmp_path, make, ws=True)
