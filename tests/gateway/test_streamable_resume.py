"""A session stream cut in the middle of a real turn and reopened with ``Last-Event-ID``.

The full gateway (services, edge) relays a real external agent process — the
bench's firehose adapter, pacing 300 ``agent_message_chunk`` updates — over
Streamable HTTP. The client cuts its session stream after a few dozen events,
while the turn still streams, and opens it again with the last id it saw: it gets
every update exactly once, in order, then the prompt's answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import workspace_beside_config
from tests.gateway.stack import full_stack
from tests.gateway.streamable_client import RemoteClient
from tests.gateway.wsfixtures import mint, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FIREHOSE = Path(__file__).resolve().parents[2] / "bench" / "firehose_agent.py"
UPDATES = 300


def _seq(data: dict[str, object]) -> int | None:
    """The firehose's sequence number of a chunk update ("<seq>:<ns> "), else None."""
    params = data.get("params")
    if data.get("method") != "session/update" or not isinstance(params, dict):
        return None
    text = params["update"]["content"]["text"]
    return int(text.split(":", 1)[0])


async def test_a_stream_cut_mid_turn_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    agent = (f'\n[agents.fire]\nkind = "acp"\ncommand = {json.dumps(sys.executable)}\n'
             f'args = [{json.dumps(str(FIREHOSE))}]\n')
    cfg = write_config(tmp_path / "cfg", extra=agent)
    _, token = mint(cfg)
    cwd = workspace_beside_config(tmp_path)
    async with full_stack(cfg) as st:
        c = RemoteClient(st.edge.http_url, token)
        try:
            await c.initialize()
            async with c.stream() as conn_stream:
                await c.post({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                              "params": {"cwd": str(cwd), "mcpServers": [],
                                         "agentAlias": "fire"}})
                sid = (await conn_stream.next()).data["result"]["sessionId"]
                prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
                    "sessionId": sid, "prompt": [{"type": "text", "text": f"pace {UPDATES} 2"}]}}
                async with c.stream(session=sid) as stream:
                    assert (await c.post(prompt, session=sid)).status_code == 202
                    first = [await stream.next() for _ in range(40)]
                # Cut mid-turn: the agent keeps streaming while nobody reads.
                async with c.stream(session=sid, last_event_id=first[-1].id) as stream:
                    rest = await stream.until(lambda d: d.get("id") == 2)
            events = first + rest
            assert [int(e.id or 0) for e in events] == list(range(1, len(events) + 1))
            seqs = [s for e in events if (s := _seq(e.data)) is not None]
            assert seqs == list(range(UPDATES))
            assert rest[-1].data["result"]["stopReason"] == "end_turn"
            assert _seq(rest[0].data) is not None and _seq(rest[0].data) != 0, \
                "the cut came in the middle of the turn"
            assert (await c.delete()).status_code == 202
        finally:
            await c.aclose()


async def test_a_resume_past_the_streams_buffer_is_filled_from_the_sessions_log(
        tmp_path: Path) -> None:
    """The reader got more than the stream keeps but the client lost it (in transit): a
    ``Last-Event-ID`` the stream no longer holds gets the events between from the session's
    event log (no ``_acpgate/replay_gap``), then the stream's own — each chunk once."""
    from tests.security.scripted_agent import agent_section

    count = 800
    cfg = write_config(tmp_path / "cfg", extra=agent_section("flood"))
    _, token = mint(cfg)
    cwd = workspace_beside_config(tmp_path)
    async with full_stack(cfg) as st:
        c = RemoteClient(st.edge.http_url, token)
        try:
            await c.initialize()
            async with c.stream() as conn_stream:
                await c.post({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                              "params": {"cwd": str(cwd), "mcpServers": [],
                                         "agentAlias": "flood"}})
                sid = (await conn_stream.next()).data["result"]["sessionId"]
            prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
                "sessionId": sid, "prompt": [{"type": "text", "text": f"flood {count} 40"}]}}
            async with c.stream(session=sid) as stream:
                assert (await c.post(prompt, session=sid)).status_code == 202
                everything = await stream.until(lambda d: d.get("id") == 2)
            kept = everything[:40]  # what the client really had
            async with c.stream(session=sid, last_event_id=kept[-1].id) as stream:
                rest = await stream.until(lambda d: d.get("id") == 2)
            assert not [e for e in rest if e.event == "error"], "no gap: filled from the log"
            texts = [e.data["params"]["update"]["content"]["text"][:8] for e in kept + rest
                     if e.data.get("method") == "session/update"
                     and e.data["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]
            assert texts == [f"{i:08d}" for i in range(count)], "each chunk once, in order"
            assert rest[-1].data["result"]["stopReason"] == "end_turn"
        finally:
            await c.aclose()
