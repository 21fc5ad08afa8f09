"""A PostgreSQL outage mid-turn loses nothing that fits in the edge's buffer.

A real ``acpgate serve`` on its own throwaway PostgreSQL cluster, 12 WebSocket clients,
each streaming a turn of a scripted external agent (one chunk every 0.1 s). The cluster
is stopped for 30 s while the turns stream — half of them end during the outage, half
after it — and started again. Every turn ends ``end_turn``; ``session/load`` afterwards
replays each client's chunks with exactly the event ids it received: none lost, none
twice. With a buffer far too small for the outage, the turn fails with the sentence
that says so (the client still got every chunk live).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from services.common.protocol import MSG_LOG_LOST
from tests.conftest import TEST_DATABASE, fresh_url
from tests.gateway.attach_client import event_ids, kind
from tests.gateway.stack import RawClient
from tests.gateway.wsfixtures import free_port, mint, start_serve, wait_healthy, write_config
from tests.pg_cluster import Cluster, missing_reason, running_cluster
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(bool(missing_reason()), reason=missing_reason())]

TURNS = 12
OUTAGE_SECS = 30
#: Chunks per turn: the short turns end during the outage, the long ones after it.
SHORT, LONG = 150, 450
#: How long one read may wait (a turn's end waits for the store to come back).
READ_SECS = 240.0


def _chunk_ids(msgs: list[dict[str, Any]]) -> list[int]:
    return event_ids([m for m in msgs if kind(m) == "agent_message_chunk"])


def _texts(msgs: list[dict[str, Any]]) -> list[str]:
    return [m["params"]["update"]["content"]["text"] for m in msgs
            if kind(m) == "agent_message_chunk"]


@contextlib.asynccontextmanager
async def _serve(tmp_path: Path, cluster: Cluster, env: dict[str, str]
                 ) -> AsyncIterator[tuple[int, str]]:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port, extra=agent_section("scripted"))
    _, secret = mint(cfg)
    proc = await start_serve(cfg.config_dir, tmp_path / "serve.log", {
        "ACPGATE_store__url": await fresh_url(cluster), "ACPGATE_acp__max_sessions": "32",
        "ACPGATE_acp__max_sessions_per_token": "32", **env})
    try:
        await wait_healthy(port, proc)
        yield port, secret
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 90)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _client(port: int, secret: str) -> RawClient:
    ws = await connect(f"ws://127.0.0.1:{port}/acp", proxy=None, max_size=None,
                       additional_headers={"Authorization": f"Bearer {secret}"})
    return RawClient(ws)


class Turn:
    """One client's streaming turn: everything it received until the prompt's answer."""

    def __init__(self, client: RawClient, sid: str) -> None:
        self.client, self.sid = client, sid
        self.seen: list[dict[str, Any]] = []
        self.answer: dict[str, Any] = {}
        self.task: asyncio.Task[None] | None = None

    async def run(self, chunks: int) -> None:
        rid = await self.client.send("session/prompt", {"sessionId": self.sid,
                                                        "prompt": f"stream {chunks}"})
        while True:
            msg = json.loads(await asyncio.wait_for(self.client.ws.recv(), READ_SECS))
            if "method" not in msg and msg.get("id") == rid:
                self.answer = msg
                return
            self.seen.append(msg)


async def _streaming(turns: list[Turn], chunks: int) -> None:
    """Wait until every turn streamed at least ``chunks`` chunks."""
    while any(len(_texts(t.seen)) < chunks for t in turns):
        for turn in turns:
            assert turn.task is not None and not turn.task.done(), turn.answer
        await asyncio.sleep(0.1)


async def test_a_30s_postgres_outage_mid_turn_loses_and_repeats_nothing(
        tmp_path: Path) -> None:
    with running_cluster() as cluster:  # its own: this test stops it
        cluster.create_database(TEST_DATABASE)
        async with _serve(tmp_path, cluster, {}) as (port, secret):
            turns = []
            for _ in range(TURNS):
                client = await _client(port, secret)
                sid = (await client.result("session/new", {"agentAlias": "scripted"}))[
                    "sessionId"]
                turns.append(Turn(client, sid))
            for i, turn in enumerate(turns):
                turn.task = asyncio.create_task(turn.run(SHORT if i % 2 else LONG))
            await _streaming(turns, 10)
            await asyncio.to_thread(cluster.halt)
            await asyncio.sleep(OUTAGE_SECS)
            await asyncio.to_thread(cluster.start_again)
            await asyncio.gather(*(t.task for t in turns if t.task is not None))

            for i, turn in enumerate(turns):
                assert turn.answer.get("result", {}).get("stopReason") == "end_turn", \
                    turn.answer
                assert _texts(turn.seen) == [f"chunk {n} " for n in
                                             range(SHORT if i % 2 else LONG)]
                await turn.client.result("session/close", {"sessionId": turn.sid})
            loader = await _client(port, secret)
            for turn in turns:
                replayed, resp = await loader.call("session/load", {"sessionId": turn.sid})
                assert "result" in resp, resp
                ids = event_ids(replayed)
                assert len(ids) == len(set(ids)), "an event replayed twice"
                assert _chunk_ids(replayed) == _chunk_ids(turn.seen), "events lost"
                await loader.result("session/close", {"sessionId": turn.sid})
        log = (tmp_path / "serve.log").read_text()
        assert "event_log_unreachable" in log and "event_log_reachable" in log, \
            "the outage reached the edge"


async def test_past_the_buffer_the_turn_fails_and_says_why(tmp_path: Path) -> None:
    with running_cluster() as cluster:
        cluster.create_database(TEST_DATABASE)
        env = {"ACPGATE_store__outage_buffer_bytes": "4096"}
        async with _serve(tmp_path, cluster, env) as (port, secret):
            client = await _client(port, secret)
            sid = (await client.result("session/new", {"agentAlias": "scripted"}))[
                "sessionId"]
            turn = Turn(client, sid)
            turn.task = asyncio.create_task(turn.run(80))
            await _streaming([turn], 5)
            await asyncio.to_thread(cluster.halt)
            await turn.task  # 4 KiB hold ~20 chunks: the rest no longer fits
            await asyncio.to_thread(cluster.start_again)
            assert turn.answer["error"] == {"code": -32603, "message": MSG_LOG_LOST}, turn.answer
            assert len(_texts(turn.seen)) == 80, "the client still got every chunk live"
            await client.ws.close()
