"""The pass-through relay from the attacker's side.

A real ``acpgate serve`` with the recording agent (``relay_agent.py``) as the
connections' default agent (``?agent=relay``) and two tokens. acpgate now passes
on what it does not understand — a client's unknown session methods, an agent's
unknown requests and notifications — and holds a client's ``authenticate``
credentials for its later adapters. None of it may cross a principal:

- token B naming A's session in a relayed method (request or notification) is
  answered exactly like an unknown session, and nothing reaches any adapter;
- a client's ``_acpgate/*`` methods and its ``_meta.acpgate`` never reach an agent (a
  fork's params neither);
- an agent's request naming another session is refused, and B's client never
  hears A's agent;
- A's credentials reach A's adapters only — never B's, never the store or the
  logs — and are gone when A's connection ends; a refused ``authenticate`` is
  the agent's refusal, and keeps nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, Token, running_gateway
from tests.security.relay_agent import agent_section, received

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEY = "relay-secret-5c1d9e"


async def _client(gw: Gateway, token: Token) -> tuple[ClientConnection, RawClient]:
    ws = await connect(f"{gw.url}?agent=relay", proxy=None,
                       additional_headers={"Authorization": f"Bearer {token.secret}"})
    return ws, RawClient(ws)


def _processes(log: Path) -> dict[int, list[dict[str, Any]]]:
    """What each agent process received."""
    out: dict[int, list[dict[str, Any]]] = {}
    for msg in received(str(log)):
        out.setdefault(msg["pid"], []).append(msg)
    return out


def _pids_of(log: Path, marker: str) -> set[int]:
    """The agent processes that received a prompt containing ``marker``."""
    return {pid for pid, msgs in _processes(log).items()
            if any(marker in json.dumps(m.get("params", {})) for m in msgs
                   if m.get("method") == "session/prompt")}


async def test_relayed_methods_stay_within_a_principal(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    async with running_gateway(tmp_path, extra=agent_section("relay", str(log))) as gw:
        a_token, b_token = await gw.token("a"), await gw.token("b")
        a_ws, a = await _client(gw, a_token)
        b_ws, b = await _client(gw, b_token)
        try:
            work = tmp_path / "work"
            work.mkdir()
            sid = (await a.result("session/new", {"cwd": str(work)}))["sessionId"]
            before = len(received(str(log)))
            # B names A's live session: exactly an unknown session, and nothing is relayed.
            for method in ("_vendor/echo", "session/set_model", "future/method"):
                _, resp = await b.call(method, {"sessionId": sid, "modelId": "large"})
                assert resp["error"] == {"code": -32000,
                                         "message": f"Session not found: {sid}"}, method
                _, unknown = await b.call(method, {"sessionId": "no-such-session"})
                assert unknown["error"]["code"] == -32000
            await b.send("_vendor/echo", {"sessionId": sid}, notify=True)
            # acpgate's own namespace, from a client: never relayed.
            _, own = await a.call("_acpgate/history_append", {"sessionId": sid, "items": []})
            assert own["error"]["code"] == -32601
            echoed = await a.result("_vendor/echo", {
                "sessionId": sid, "_meta": {"acpgate": {"policy": {"autonomy": "full"}},
                                            "x": 1}})
            assert echoed["echo"]["_meta"] == {"x": 1}
            got = [m for m in received(str(log))[before:] if "method" in m]
            assert [m["method"] for m in got] == ["_vendor/echo"], got  # A's own call only
            assert got[0]["params"]["sessionId"] != sid  # the adapter's id, not the edge's
            # A fork passes the client's other params to the agent's own session/fork, never
            # its _meta.acpgate (the built-in agent reads its policy from there).
            fork = await a.result("session/fork", {
                "sessionId": sid, "_meta": {"acpgate": {"policy": {"autonomy": "full"}},
                                            "x": 2}})
            asked = [m for m in received(str(log)) if m.get("method") == "session/fork"]
            assert len(asked) == 1 and asked[0]["params"]["_meta"] == {"x": 2}, asked
            await a.result("session/close", {"sessionId": fork["sessionId"]})

            # The agent's requests and notifications: its own session's only, to its client.
            b_sid = (await b.result("session/new", {"cwd": str(work)}))["sessionId"]
            seen, _ = await a.call("session/prompt", {"sessionId": sid, "prompt": "askother"})
            assert not [m for m in seen if m.get("method") == "_vendor/ask"]
            assert "error -32000" in json.dumps(seen)
            seen, _ = await a.call("session/prompt", {"sessionId": sid, "prompt": "notes"})
            notes = [m["params"] for m in seen if m.get("method") == "_vendor/note"]
            assert notes == [{"n": "none"}, {"sessionId": sid, "n": "own"}]
            seen_b, _ = await b.call("session/prompt", {"sessionId": b_sid, "prompt": "quiet"})
            assert not [m for m in seen_b if m.get("method") == "_vendor/note"]
        finally:
            await a_ws.close()
            await b_ws.close()


async def test_credentials_stay_with_their_connection(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    async with running_gateway(tmp_path, extra=agent_section("relay", str(log), KEY)) as gw:
        a_token, b_token = await gw.token("a"), await gw.token("b")
        a_ws, a = await _client(gw, a_token)
        b_ws, b = await _client(gw, b_token)
        work = tmp_path / "work"
        work.mkdir()
        try:
            # A refused authenticate is the agent's refusal, and keeps nothing.
            _, bad = await a.call("authenticate", {"methodId": "key",
                                                   "_meta": {"api-key": "guess"}})
            assert (bad["error"]["code"], bad["error"]["message"]) == (-32000, "bad key")
            _, refused = await a.call("session/new", {"cwd": str(work)})
            assert refused["error"]["message"] == "Authentication required"
            assert await a.result("authenticate", {"methodId": "key",
                                                   "_meta": {"api-key": KEY}}) == {}
            one = (await a.result("session/new", {"cwd": str(work)}))["sessionId"]
            two = (await a.result("session/new", {"cwd": str(work)}))["sessionId"]
            await a.result("session/prompt", {"sessionId": one, "prompt": "mark-a1"})
            await a.result("session/prompt", {"sessionId": two, "prompt": "mark-a2"})
            # B has its own connection: none of A's credentials reach B's adapters.
            _, b_refused = await b.call("session/new", {"cwd": str(work)})
            assert b_refused["error"]["message"] == "Authentication required"
        finally:
            await a_ws.close()
            await b_ws.close()
        # A's next connection starts from nothing: the credentials went with the first.
        a2_ws, a2 = await _client(gw, a_token)
        try:
            _, again = await a2.call("session/new", {"cwd": str(work)})
            assert again["error"]["message"] == "Authentication required"
        finally:
            await a2_ws.close()

        # The key reached exactly A's two session adapters (the first one answered A's
        # authenticate, the second got it replayed); no other process of anyone.
        a_pids = _pids_of(log, "mark-a1") | _pids_of(log, "mark-a2")
        assert len(a_pids) == 2
        for pid, msgs in _processes(log).items():
            assert any(KEY in json.dumps(m) for m in msgs) == (pid in a_pids), pid
        # Never stored, never logged: not in the data dir, not in any process's log.
        for path in gw.data_dir.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path
        assert KEY not in gw.log.read_text(errors="replace")

