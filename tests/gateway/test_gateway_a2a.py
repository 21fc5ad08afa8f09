"""A spawned session as a gateway client sees it (SPEC §8 session/list, §13, §14).

The real stack (session + lifecycle services on unix sockets, the WebSocket gateway with
token auth); alice's session runs the built-in agent on the fake model, which spawns a
child on another alias (the demo agent) with ``sessions_spawn``. The child is owned by
alice — her session's owner, her token's principal — so it is in her ``session/list``
(her principal's sessions) with its lineage in ``_meta.acpgate``, in the ``tree`` and
``all`` lists of the same requester alike (``all`` never shows less than ``tree``), and
nowhere for bob, where it answers like a session that does not exist (no
visibility crosses tokens). Closing alice's session reaps the child's lease.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from acpgate_contracts.session.v1 import session_pb2
from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply, tool_reply
from tests.e2e.harness import SDK_AGENT, listed_lineage, updates

from .stack import RawClient, full_stack, select
from .wsfixtures import mint, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CLOSED = (lifecycle_pb2.LEASE_STATE_CLOSED, lifecycle_pb2.LEASE_STATE_LOST)


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def spawning_turn(client: RawClient, ws: Path, reply: str) -> tuple[str, dict[str, Any]]:
    """A new ``boss`` session and its turn (the model spawns, then says ``reply``): the
    session id and the sessions_spawn tool call's final update."""
    psid = (await client.result("session/new", {"agentAlias": "boss",
                                                "cwd": str(ws)}))["sessionId"]
    seen, resp = await client.call("session/prompt", {"sessionId": psid, "prompt": "go"})
    assert resp["result"]["content"] == reply, resp
    done = [u for u in updates(seen, psid) if u["sessionUpdate"] == "tool_call_update"]
    assert len(done) == 1, done
    return psid, done[0]


async def eventually(check: Callable[[], bool], what: str, secs: float = 15.0) -> None:
    for _ in range(int(secs / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_a_child_is_in_its_owners_list_with_its_lineage_and_hidden_from_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")
    ws = tmp_path / "project"
    ws.mkdir()
    spawn = tool_reply(("sessions_spawn", {"agent": "helper", "prompt": "hi", "label": "kid"}))
    with ModelServer([spawn, text_reply("spawned")]) as model:
        cfg = write_config(tmp_path / "cfg", extra=agent_entry("boss", model))
        alice_id, alice = mint(cfg, "alice")
        _, bob = mint(cfg, "bob")
        async with full_stack(cfg) as stack:
            async with connect(stack.edge.url, proxy=None, additional_headers=auth(alice)) as wa:
                a = RawClient(wa, select("allow-once"))
                psid, done = await spawning_turn(a, ws, "spawned")
                assert done["status"] == "completed", done
                cid = json.loads(done["rawOutput"])["sessionId"]
                parent_key = f"agent:boss:acp:{psid}"

                listed = {r["sessionId"]: r for r in
                          (await a.result("session/list", {}))["sessions"]}
                assert set(listed) == {psid, cid}
                metas = listed_lineage(list(listed.values()))
                assert metas[psid] == {"agent": "boss"}
                assert metas[cid] == {
                    "agent": "helper", "parentSessionId": psid, "spawnedBy": parent_key}
                assert listed[cid]["title"] == "kid"

                # The seed's invariant on the rows the product wrote: all ⊇ tree.
                owner = f"client:{alice_id}"
                by_vis = {}
                for vis in ("tree", "all"):
                    got = await stack.runtime.session_service.stub.ListSessions(
                        session_pb2.ListSessionsRequest(requester_session_key=owner,
                                                        visibility=vis))
                    by_vis[vis] = {r.session_id for r in got.sessions}
                assert by_vis["tree"] == {psid, cid} and by_vis["tree"] <= by_vis["all"]

                child_key = f"agent:helper:acp:{cid}"
                assert [lease.state for lease in await stack.leases(child_key)] == [
                    lifecycle_pb2.LEASE_STATE_OPEN]

                async with connect(stack.edge.url, proxy=None,
                                   additional_headers=auth(bob)) as wb:
                    b = RawClient(wb)
                    assert (await b.result("session/list", {}))["sessions"] == []
                    for method in ("session/load", "session/resume"):
                        _, err = await b.call(method, {"sessionId": cid})
                        assert err["error"] == {"code": -32000,
                                                "message": f"Session not found: {cid}"}

                assert await a.result("session/close", {"sessionId": psid}) == {}
                leases = await stack.leases(child_key)
                assert leases and all(lease.state in CLOSED for lease in leases), leases


async def test_cancel_of_an_idle_parent_cancels_a_background_child_turn_and_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wait: false``: the parent's turn is over, its child's turn still runs (the SDK
    agent's ``hang`` ends only when cancelled). ``session/cancel`` of the parent reaches it
    through the stored parent link; the child stays, idle, its lease open."""
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")
    ws = tmp_path / "project"
    ws.mkdir()
    spawn = tool_reply(("sessions_spawn", {"agent": "sdk", "prompt": "hang", "wait": False}))
    sdk = (f'\n[agents.sdk]\nkind = "acp"\ncommand = {json.dumps(sys.executable)}\n'
           f'args = [{json.dumps(str(SDK_AGENT))}]\n'
           f'env = {{ SDK_AGENT_STATE = {json.dumps(str(tmp_path / "sdk-state.json"))} }}\n')
    with ModelServer([spawn, text_reply("started")]) as model:
        cfg = write_config(tmp_path / "cfg", extra=agent_entry("boss", model) + sdk)
        _, alice = mint(cfg, "alice")
        async with full_stack(cfg) as stack:
            async with connect(stack.edge.url, proxy=None, additional_headers=auth(alice)) as wa:
                a = RawClient(wa, select("allow-once"))
                psid, done = await spawning_turn(a, ws, "started")
                out = json.loads(done["rawOutput"])
                assert out["status"] == "running", out
                child = stack.runtime.registry.active[out["sessionId"]]

                def hanging() -> bool:  # the SDK agent is inside its prompt
                    turn = child.turn
                    return turn is not None and turn.acc is not None and len(turn.acc.items) > 1

                await eventually(hanging, "the child's turn reached the SDK agent")
                await a.send("session/cancel", {"sessionId": psid}, notify=True)
                await eventually(lambda: child.turn is None, "the child's turn ended")
                assert not child.released
                assert stack.runtime.registry.active.get(child.session_id) is child
                leases = await stack.leases(child.session_key)
                assert [lease.state for lease in leases] == [lifecycle_pb2.LEASE_STATE_OPEN]
                history = [item async for page in stack.runtime.session_service.stub.GetHistory(
                    session_pb2.GetHistoryRequest(session_id=child.session_id, operator=True))
                    for item in page.items]
                # The cancelled turn is stored with what it streamed, marked.
                assert [(i.role, i.text, i.status) for i in history[:1]] == [
                    (session_pb2.HistoryItem.ROLE_USER, "hang", "cancelled")]
