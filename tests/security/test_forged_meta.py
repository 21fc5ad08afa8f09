"""A hostile external agent writing into acpgate's ``_meta.acpgate`` namespace, from the
attacker's side (``forging_agent.py``).

Clients read ``_meta.acpgate`` as acpgate's word. Whatever the agent puts there — in
updates of the relay's fast shape (an escaped key too) or any other, in a notification,
a permission request, a session/new or prompt result, an error's ``data`` — never
reaches a client: what is there is acpgate's alone (its event ids, increasing; its
``workspaceDir``), and the agent's other ``_meta`` keys are kept. An agent's own
``messageId`` is passed on but is no resume point: attaching "after" it falls back to
the full replay, as for a point acpgate does not hold, while a message id acpgate
assigned still resumes exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.attach_client import event_ids, initialize, kind
from tests.gateway.stack import RawClient, select
from tests.security.forging_agent import AGENT_MESSAGE_ID, FORGED, agent_section
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _ours(value: Any) -> list[Any]:
    """Every value under an ``acpgate`` key, at any depth of ``value``."""
    found: list[Any] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "acpgate":
                found.append(inner)
            found.extend(_ours(inner))
    elif isinstance(value, list):
        for inner in value:
            found.extend(_ours(inner))
    return found


def _update(msg: dict[str, Any]) -> dict[str, Any]:
    update: dict[str, Any] = msg["params"]["update"]
    return update


async def test_an_agents_acpgate_meta_never_reaches_a_client(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("forger")) as gw:
        token = await gw.token("owner")
        owner = RawClient(await gw.connect(token), on_request=select("allow"))
        await owner.result("initialize", initialize("laptop"))
        created = await owner.result("session/new", {"agentAlias": "forger"})
        sid = created["sessionId"]
        seen, resp = await owner.call("session/prompt", {"sessionId": sid, "prompt": "forge"})
        _, refused = await owner.call("session/set_model", {"sessionId": sid, "modelId": "x"})

        assert FORGED not in json.dumps(_ours([created, seen, resp, refused]))
        assert created["_meta"]["vendor"] == 8 and created["_meta"]["acpgate"] == {
            "workspaceDir": created["_meta"]["acpgate"]["workspaceDir"]}
        assert resp["result"] == {"stopReason": "end_turn", "_meta": {"vendor": 7}}, resp
        assert refused["error"]["data"]["vendor"] == 9, refused
        asked = [m for m in seen if m.get("method") == "session/request_permission"]
        assert asked and asked[0]["params"]["_meta"] == {"vendor": 6}, asked
        notes = [m for m in seen if m.get("method") == "_vendor/note"]
        assert notes and notes[0]["params"]["_meta"] == {"vendor": 5}, notes
        updates = [m for m in seen if m.get("method") == "session/update"]
        # Nor do updates of the kinds only acpgate sends (a turn's end, a prompt's echo).
        assert FORGED not in json.dumps(updates), [kind(m) for m in updates]
        tools = {_update(m).get("toolCallId"): _update(m) for m in updates
                 if kind(m) == "tool_call"}
        for call, vendor in (("tc-1", 1), ("tc-2", 2), ("tc-3", 4)):
            meta = tools[call]["_meta"]
            assert meta["vendor"] == vendor and list(meta["acpgate"]) == ["eventId"], meta
        ids = event_ids(updates)
        assert len(ids) == len(updates) and ids == sorted(set(ids)) and ids[0] > 1, ids

        # The agent's message id is passed on, and is no resume point.
        chunks = [_update(m) for m in updates if kind(m) == "agent_message_chunk"]
        assert [c["messageId"] for c in chunks[:3]] == [AGENT_MESSAGE_ID] * 3, chunks
        watcher = RawClient(await gw.connect(token))
        _, attached = await watcher.call("session/attach", {
            "sessionId": sid, "role": "observer", "historyPolicy": "after_message",
            "afterMessageId": AGENT_MESSAGE_ID})
        assert attached["result"]["historyPolicy"] == "full", attached
        await watcher.ws.close()
        # One acpgate assigned (the chunk the agent sent without one) is.
        own = chunks[-1]["messageId"]
        assert own not in ("", AGENT_MESSAGE_ID) and chunks[-1]["content"]["text"] == "own "
        watcher = RawClient(await gw.connect(token))
        _, attached = await watcher.call("session/attach", {
            "sessionId": sid, "role": "observer", "historyPolicy": "after_message",
            "afterMessageId": own})
        assert attached["result"]["historyPolicy"] == "after_message", attached
        await watcher.ws.close()
        await owner.ws.close()
