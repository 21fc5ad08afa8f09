"""A restore the edge gave up on keeps its agent session's late replay from the client.

gemini-cli 0.61's ``session/load`` at times answers before (or without) replaying the
conversation; the edge then carries the transcript over to a new agent session
(``seeding.restore_external`` → ``carry_over``). When the old session's replay arrives after
the answer, it must not reach the client: it would show the conversation twice, in the
agent's own shape (its tool results as user messages). Found as a flaky real-adapter test
(tests/realagents/test_passthrough.py, gemini) under load.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.edge.adapter.client import AdapterClient
from services.edge.backends.session_types import ResolvedAgent


class _Link:
    """Just enough of an AdapterLink: it binds its peer (a v1 agent's: no v2 state)."""

    v2 = None

    def bind(self, peer: Any) -> None:
        self.peer = peer


class _Host:
    """Records what the client would be sent."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    async def on_adapter_updates(self, updates: list[dict[str, Any]]) -> None:
        self.updates.extend(updates)

    async def notify_client(self, method: str, params: dict[str, Any]) -> None:
        self.updates.append({"method": method, **params})


def _update(session_id: str, text: str) -> tuple[str, dict[str, Any]]:
    return ("session/update", {"sessionId": session_id, "update": {
        "sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}})


def test_a_late_replay_of_an_abandoned_restore_reaches_nobody() -> None:
    host = _Host()
    agent = ResolvedAgent(alias="gemini", kind="acp")
    client = AdapterClient(_Link(), "edge-1", host, agent)  # type: ignore[arg-type]
    client.abandoned_sessions.add("old")  # what restore_external does when it gives up
    client.adapter_session_id = "new"  # the carried-over session
    asyncio.run(client.on_adapter_notifications([
        _update("old", "hello"), _update("new", "live"), _update("old", "again")]))
    assert [u["update"]["content"]["text"] for u in host.updates] == ["live"]
    assert all(u["sessionId"] == "edge-1" for u in host.updates)


def test_its_own_session_is_relayed_whatever_was_abandoned_before() -> None:
    host = _Host()
    agent = ResolvedAgent(alias="gemini", kind="acp")
    client = AdapterClient(_Link(), "edge-1", host, agent)  # type: ignore[arg-type]
    client.abandoned_sessions.add("s1")
    client.adapter_session_id = "s1"
    client.abandoned_sessions.discard("s1")  # what a new session with that id does
    asyncio.run(client.on_adapter_notifications([_update("s1", "live")]))
    assert [u["update"]["content"]["text"] for u in host.updates] == ["live"]
