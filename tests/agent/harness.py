"""An in-process agent wired to a real JSON-RPC client peer, plus a scripted model.

The agent side is the production :class:`AgentServer` on the agent's
:class:`JsonRpcPeer` (``agent_peer``); the client side is another peer
configured the same way, whose handler records updates and
answers the agent's requests with a per-test responder. The only fake is the
model (``ScriptedProvider``) where a test needs exact model behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.agent.conversation import Message, ToolCall
from services.agent.providers.base import (
    ProviderEvent,
    StreamDone,
    TextDelta,
    ToolCallReady,
    ToolSpec,
    UsageReport,
)
from services.agent.providers.demo import DemoProvider
from services.agent.rpc import agent_peer
from services.agent.server import AgentServer
from services.common.config import AcpSection, AgentSection, AutonomySection, Config
from services.common.jsonrpc import JsonRpcPeer, read_lines
from services.session.decisions.policy import policy_for

Responder = Callable[[str, dict[str, Any]], Awaitable[Any]]


class ScriptedProvider:
    """A model that plays back one list of events per call and records what it was sent."""

    name = "scripted"

    def __init__(self, script: list[list[ProviderEvent]], *, hang: bool = False) -> None:
        self.script = list(script)
        self.calls: list[tuple[str, list[Message], list[ToolSpec]]] = []
        self.hang = hang

    async def aclose(self) -> None:
        """Nothing to close."""

    async def stream(self, system: str, messages: list[Message],
                     tools: list[ToolSpec]) -> AsyncIterator[ProviderEvent]:
        """Yield the next scripted call (the last one repeats)."""
        self.calls.append((system, list(messages), list(tools)))
        events = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        for ev in events:
            yield ev
        if self.hang:
            await asyncio.sleep(3600)


def say(text: str) -> list[ProviderEvent]:
    """A model call that just answers ``text``."""
    return [TextDelta(text), UsageReport(3, 2), StreamDone("end_turn")]


def call(name: str, args: dict[str, Any], call_id: str = "c1",
         text: str = "") -> list[ProviderEvent]:
    """A model call that asks for one tool call."""
    events: list[ProviderEvent] = [TextDelta(text)] if text else []
    return [*events, ToolCallReady(ToolCall(call_id, name, args)), UsageReport(5, 1),
            StreamDone("tool_use")]


@dataclass
class Client:
    """The client side: recorded updates and requests, scripted answers."""

    peer: JsonRpcPeer
    server: AgentServer
    updates: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    responder: Responder | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_until(self, predicate: Callable[[], bool], wait: float = 10.0) -> None:
        """Wait until ``predicate()`` holds, re-checking after every update/request."""
        async with asyncio.timeout(wait):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    async def call(self, method: str, params: dict[str, Any], wait: float = 30.0) -> Any:
        """Send a request to the agent and return its result (JsonRpcError on error)."""
        return await self.peer.request(method, params, wait)

    async def new_session(self, cwd: Path, **meta: Any) -> str:
        """``session/new`` with optional ``_meta.acpgate`` fields; returns the id."""
        params: dict[str, Any] = {"cwd": str(cwd), "mcpServers": []}
        if meta:
            params["_meta"] = {"acpgate": meta}
        result = await self.call("session/new", params)
        return str(result["sessionId"])

    async def prompt(self, sid: str, text: str) -> dict[str, Any]:
        """``session/prompt`` with one text block."""
        result: dict[str, Any] = await self.call(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
        return result

    def kinds(self) -> list[str]:
        """The ``sessionUpdate`` kind of every update so far."""
        return [u["update"]["sessionUpdate"] for u in self.updates]

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The ``update`` objects of one kind."""
        return [u["update"] for u in self.updates if u["update"]["sessionUpdate"] == kind]

    def text(self) -> str:
        """All streamed assistant text."""
        return "".join(u["content"]["text"] for u in self.of("agent_message_chunk"))


def make_config(tmp: Path, *, autonomy: str = "supervised", timeout: int = 30,
                **agent: Any) -> Config:
    """A config with one built-in agent ``a`` (demo unless overridden)."""
    fields: dict[str, Any] = {"provider": "demo", "model": "demo", **agent}
    return Config(
        config_dir=tmp / "cfg",
        acp=AcpSection(default_agent="a", session_timeout_secs=timeout),
        autonomy=AutonomySection(level=autonomy),
        agents={"a": AgentSection(alias="a", **fields)},
    )


#: What the in-process agent reports as ``agentInfo.version``.
TEST_VERSION = "9.9.9-test"


@contextlib.asynccontextmanager
async def running_agent(cfg: Config, provider: Any = None,
                        responder: Responder | None = None, *,
                        standalone: bool = True,
                        environ: Mapping[str, str] | None = None,
                        provider_for: Callable[[str], Any] | None = None,
                        **server_kw: Any) -> AsyncIterator[Client]:
    """The agent and a client connected back to back over real stream readers.

    ``standalone`` wires it the way ``acpgate agent`` does (the session service's
    ``policy_for`` decides a session that brings no ``_meta.acpgate.policy``);
    ``False`` the way the edge launches it (such a session is refused).
    ``environ`` is the agent's environment (shell commands and MCP servers); empty by default.
    ``server_kw`` go to :class:`AgentServer` (``landlock``, ``resolve``).
    """
    provider = provider or DemoProvider(chunk_delay=0)
    agent_in = asyncio.StreamReader()
    client_in = asyncio.StreamReader()

    async def to_client(data: bytes) -> None:
        client_in.feed_data(data)

    async def to_agent(data: bytes) -> None:
        agent_in.feed_data(data)

    # Standalone, the harness plays the composition root as acpgate/cli.py does.
    server = AgentServer(cfg, "a", cfg.agents["a"], provider, version=TEST_VERSION,
                         local_policy=policy_for if standalone else None,
                         environ={} if environ is None else environ, provider_for=provider_for,
                         **server_kw)
    agent = agent_peer(to_client, server)
    server.attach(agent)
    client: Client | None = None

    async def handle(method: str, params: dict[str, Any], notification: bool) -> Any:
        assert client is not None
        if method == "session/update":
            client.updates.append(params)
            client.changed.set()
            return None
        client.requests.append((method, params))
        client.changed.set()
        if client.responder is None:
            return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
        return await client.responder(method, params)

    client_peer = agent_peer(to_agent, handle)
    client = Client(client_peer, server, responder=responder)
    tasks = [asyncio.create_task(agent.serve(read_lines(agent_in))),
             asyncio.create_task(client_peer.serve(read_lines(client_in)))]
    try:
        await client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        yield client
    finally:
        await server.shutdown()
        agent_in.feed_eof()
        client_in.feed_eof()
        await agent.cancel()
        await client_peer.cancel()
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
