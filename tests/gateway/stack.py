"""The real stack in one test process: session + lifecycle gRPC servers, runtime, WebSocket edge.

The built-in demo agent still runs as a real child (wrapper + adapter) spawned
by the lifecycle service; only the three services share the test's event loop.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from acpgate import __version__
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.config import Config
from services.edge.transport.connection import EdgeRuntime, open_runtime
from services.edge.transport.probe import ServiceProbe
from services.edge.transport.ws_server import EdgeServer
from services.lifecycle.api.server import start_lifecycle_server
from services.session.api.server import start_session_server


@dataclass
class Stack:
    """A running gateway and handles to look behind it."""

    cfg: Config
    edge: EdgeServer
    runtime: EdgeRuntime
    lifecycle: lifecycle_pb2_grpc.LifecycleServiceStub

    async def leases(self, session_key: str = "") -> list[lifecycle_pb2.Lease]:
        reply = await self.lifecycle.ListLeases(  # type: ignore[misc]
            lifecycle_pb2.ListLeasesRequest(session_key=session_key), timeout=10)
        return list(reply.leases)


@asynccontextmanager
async def full_stack(cfg: Config, *, port: int = 0, **edge_kw: Any) -> AsyncIterator[Stack]:
    """Start everything for ``cfg`` (gateway on ``port``, default a free one) and stop it all
    afterwards."""
    run = tempfile.mkdtemp(prefix="acpg-gw-", dir="/tmp")  # short unix socket paths
    session = await start_session_server(cfg, f"unix:{run}/s.sock")
    lifecycle = await start_lifecycle_server(cfg, f"unix:{run}/l.sock")
    cfg = replace(
        cfg,
        services=replace(cfg.services, session_addr=session.address,
                         lifecycle_addr=lifecycle.address),
        gateway=replace(cfg.gateway, port=port),
    )
    channel = lifecycle.dial()
    runtime = await open_runtime(cfg, version=__version__)
    assert session.security is not None
    probe = ServiceProbe(session.security, session.address, lifecycle.address)
    edge = EdgeServer(cfg, runtime, probe=probe, **edge_kw)
    try:
        await edge.start()
        yield Stack(cfg, edge, runtime, lifecycle_pb2_grpc.LifecycleServiceStub(channel))
    finally:
        await edge.stop()
        await runtime.close()
        await probe.close()
        await channel.close(None)
        await lifecycle.stop()
        await session.stop()
        shutil.rmtree(run, ignore_errors=True)


RequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class RawClient:
    """A JSON-RPC client over one WebSocket, answering server requests via a callback."""

    def __init__(self, ws: Any, on_request: RequestHandler | None = None) -> None:
        self.ws = ws
        self.on_request = on_request
        self._next = 1
        #: Every server → client request seen, in order.
        self.requests: list[dict[str, Any]] = []

    async def send(self, method: str, params: dict[str, Any], *, notify: bool = False) -> int:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        req_id = self._next
        self._next += 1
        if not notify:
            msg["id"] = req_id
        await self.ws.send(json.dumps(msg))
        return req_id

    async def until_response(self, req_id: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Messages before the response to ``req_id``, and that response."""
        seen: list[dict[str, Any]] = []
        while True:
            msg = json.loads(await self.ws.recv())
            if "method" not in msg and msg.get("id") == req_id:
                return seen, msg
            if "method" in msg and msg.get("id") is not None:
                self.requests.append(msg)
                if self.on_request is not None:
                    result = await self.on_request(msg)
                    await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                                   "result": result}))
            seen.append(msg)

    async def call(self, method: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return await self.until_response(await self.send(method, params))

    async def result(self, method: str, params: dict[str, Any]) -> Any:
        _, resp = await self.call(method, params)
        assert "result" in resp, resp
        return resp["result"]

    async def say(self, sid: str, prompt: Any) -> str:
        """session/prompt (asserting success); the assistant text it streamed (an external
        agent's result carries no ``content``: it is passed whole)."""
        seen, resp = await self.call("session/prompt", {"sessionId": sid, "prompt": prompt})
        assert "result" in resp, resp
        return "".join(m["params"]["update"]["content"].get("text", "") for m in seen
                       if m.get("method") == "session/update" and "id" not in m
                       and m["params"].get("sessionId") == sid
                       and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk")


def select(option_id: str) -> RequestHandler:
    """A request handler answering every permission request with ``option_id``."""

    async def answer(msg: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    return answer
