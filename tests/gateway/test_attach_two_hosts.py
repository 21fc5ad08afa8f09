"""Attaching on host B to a session live on host A (across hosts).

Two gateway hosts share one PostgreSQL store (``tests.gateway.test_two_hosts``). An edge
does not relay a client to another host's session: ``session/attach`` on B of a session A
serves answers -32007 naming where it lives (``data.acpgate.liveAt``: A's host name,
gateway instance id and ``[gateway] public_url``, from the row's claim; the message says
"reconnect to <url>") — over WebSocket and Streamable HTTP alike, to the session's own
token only; any other token hears what an unknown session answers. A client following
the URL attaches on A and misses nothing. Once A let it go, B loads it as before.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from services.common.config import Config
from services.common.protocol import SESSION_LIVE_ELSEWHERE
from tests.gateway.attach_client import (
    WAITS_THEN_STREAMS,
    cut,
    event_ids,
    is_turn_end,
    kind,
    read_until,
    text_of,
)
from tests.gateway.stack import RawClient, Stack, full_stack, select
from tests.gateway.streamable_client import RemoteClient
from tests.gateway.test_two_hosts import client, host_config
from tests.gateway.wsfixtures import free_port, mint, write_config
from tests.security.fake_model import attacker_model_server
from tests.security.gateway_stack import WAIT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def reachable_at(cfg: Config, port: int) -> Config:
    """``cfg`` with ``[gateway] public_url`` naming its own /acp on ``port`` (the address a
    client of this test reaches it at)."""
    return replace(cfg, gateway=replace(cfg.gateway, public_url=f"ws://127.0.0.1:{port}/acp"))


def scripted_host(root: Path, name: str, store_url: str, token_db: Path,
                  model_url: str) -> Config:
    """:func:`host_config` with the fake model's ``attacker`` agent at full autonomy, whose
    prompts script tool calls and streamed answers (``tests.security.fake_model``)."""
    cfg = write_config(root / name / "cfg", extra=(
        f'\n[store]\nurl = "{store_url}"\nlease_secs = 30\n'
        '[autonomy]\nlevel = "full"\n'
        f'[agents.attacker]\nkind = "builtin"\nprovider = "openai"\nmodel = "attacker"\n'
        f'base_url = "{model_url}/v1"\nmax_retries = 0\n'))
    return replace(cfg, gateway=replace(cfg.gateway, token_db=str(token_db)))


def live_at(stack: Stack) -> dict[str, str]:
    """What -32007 says of a session ``stack`` serves."""
    where = {"host": stack.runtime.claims.host, "instanceId": stack.runtime.claims.instance_id}
    if stack.cfg.gateway.public_url:
        where["url"] = stack.cfg.gateway.public_url
    return where


async def attach_over_http(stack: Stack, secret: str, sid: str) -> dict[str, Any]:
    """``session/attach`` of ``sid`` over Streamable HTTP on ``stack``: its answer."""
    c = RemoteClient(stack.edge.http_url, secret)
    try:
        await c.initialize()
        async with c.stream(session=sid) as events:
            message = {"jsonrpc": "2.0", "id": 7, "method": "session/attach",
                       "params": {"sessionId": sid}}
            assert (await c.post(message, session=sid)).status_code == 202
            got = await asyncio.wait_for(events.until(lambda d: d.get("id") == 7), WAIT)
        return dict(got[-1].data)
    finally:
        await c.aclose()


async def test_attach_on_another_host_names_where_the_session_lives(
        tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    port_a = free_port()
    cfg_a = reachable_at(host_config(tmp_path, "a", pg_url, token_db), port_a)
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)
    _, secret = mint(cfg_a, "alice")
    _, stranger = mint(cfg_a, "mallory")
    async with full_stack(cfg_a, port=port_a) as a, full_stack(cfg_b) as b:
        assert a.edge.url == cfg_a.gateway.public_url  # the test reaches A where it says
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            assert (await on_a.result("session/prompt", {"sessionId": sid,
                                                         "prompt": "hi"}))["stopReason"]
            async with client(b, secret) as on_b:
                _, resp = await on_b.call("session/attach", {"sessionId": sid,
                                                             "role": "observer"})
                error = resp["error"]
                assert error["code"] == SESSION_LIVE_ELSEWHERE, error
                assert error["data"]["acpgate"]["liveAt"] == live_at(a), error
                assert f"reconnect to {cfg_a.gateway.public_url}" in error["message"], error
            # Streamable HTTP alike.
            answer = await attach_over_http(b, secret, sid)
            assert answer["error"]["code"] == SESSION_LIVE_ELSEWHERE, answer
            assert answer["error"]["data"]["acpgate"]["liveAt"] == live_at(a), answer
            async with client(b, stranger) as other:
                _, theirs = await other.call("session/attach", {"sessionId": sid})
                unknown = str(uuid.uuid4())
                _, nobody = await other.call("session/attach", {"sessionId": unknown})
                assert theirs["error"]["code"] == nobody["error"]["code"] == -32000
                assert theirs["error"]["message"].replace(sid, "?") == \
                    nobody["error"]["message"].replace(unknown, "?")
                assert "data" not in theirs["error"]
            # On A itself, a second connection simply attaches.
            async with client(a, secret) as second:
                result = await second.result("session/attach", {"sessionId": sid,
                                                                "historyPolicy": "none"})
                assert result["role"] == "controller"
            assert await on_a.result("session/close", {"sessionId": sid}) == {}
        async with client(b, secret) as on_b:  # nobody serves it now: B loads it
            _, loaded = await on_b.call("session/load", {"sessionId": sid})
            assert "result" in loaded, loaded


async def test_a_client_cut_on_one_host_reconnects_where_b_says_and_misses_nothing(
        tmp_path: Path, pg_url: str) -> None:
    """A laptop loses its connection to A mid-turn; its reconnect lands on B (a load
    balancer's choice), which answers -32007 with A's public URL; the client follows it,
    attaches after the last event it saw, and gets exactly the rest: the next event ids,
    none twice, and the turn's end."""
    token_db = tmp_path / "shared" / "tokens.db"
    port_a, port_b = free_port(), free_port()
    go = tmp_path / "go"
    async with attacker_model_server() as model:
        cfg_a = reachable_at(scripted_host(tmp_path, "a", pg_url, token_db, model.url), port_a)
        cfg_b = reachable_at(scripted_host(tmp_path, "b", pg_url, token_db, model.url), port_b)
        _, secret = mint(cfg_a, "laptop")
        await _follow_the_url(cfg_a, cfg_b, port_a, port_b, secret, go)


async def _follow_the_url(cfg_a: Config, cfg_b: Config, port_a: int, port_b: int,
                          secret: str, go: Path) -> None:
    async with full_stack(cfg_a, port=port_a) as a, full_stack(cfg_b, port=port_b) as b:
        async with connect(a.edge.url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            first = RawClient(ws, select("allow-once"))
            sid = (await first.result("session/new", {"agent": "attacker"}))["sessionId"]
            await first.send("session/prompt", {"sessionId": sid,
                                                "prompt": WAITS_THEN_STREAMS.format(go=go)})
            before = await read_until(ws, lambda m: kind(m) == "tool_call")
            cut(ws)  # mid-turn: the tool waits for ``go``
        async with client(b, secret) as on_b:
            _, resp = await on_b.call("session/attach", {
                "sessionId": sid, "historyPolicy": "after_message",
                "afterMessageId": event_ids(before)[-1]})
        where = resp["error"]["data"]["acpgate"]["liveAt"]
        assert where == live_at(a) and where["url"] != b.cfg.gateway.public_url, resp
        async with connect(where["url"], proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            again = RawClient(ws, select("allow-once"))
            seen, resp = await again.call("session/attach", {
                "sessionId": sid, "historyPolicy": "after_message",
                "afterMessageId": event_ids(before)[-1]})
            assert resp["result"]["historyPolicy"] == "after_message", resp
            await asyncio.to_thread(go.touch)
            if not any(is_turn_end(m) for m in seen):
                seen += await read_until(ws, is_turn_end)
            after = [m for m in seen if m.get("method") == "session/update"]
            assert after[-1]["params"]["update"]["stopReason"] == "end_turn", after[-1]
            ids = event_ids(before) + event_ids(after)
            assert ids == list(range(ids[0], ids[0] + len(ids))), ids
            assert (text_of(before) + text_of(after)).count("w") == 60
            assert await again.result("session/close", {"sessionId": sid}) == {}


async def test_a_host_without_a_public_url_says_so_and_guesses_none(
        tmp_path: Path, pg_url: str) -> None:
    """No ``[gateway] public_url`` on A: B's answer names A's host and instance but no URL
    (never one derived from A's bind address), and says none is configured."""
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    cfg_b = reachable_at(host_config(tmp_path, "b", pg_url, token_db), port_b := free_port())
    _, secret = mint(cfg_a, "alice")
    async with full_stack(cfg_a) as a, full_stack(cfg_b, port=port_b) as b:
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            async with client(b, secret) as on_b:
                _, resp = await on_b.call("session/attach", {"sessionId": sid})
            error = resp["error"]
            assert error["data"]["acpgate"]["liveAt"] == live_at(a), error
            assert "url" not in error["data"]["acpgate"]["liveAt"]
            assert "no [gateway] public_url" in error["message"], error
            assert str(a.edge.port) not in json.dumps(error)
