"""An agent sending requests that never finish, from the attacker's side.

Each request an agent sends (an extension method passed on to the client, an ``fs/*``
read relayed to it...) runs a handler in the edge until it is answered. A hostile agent
(``tests/security/scripted_agent.py``, ``hold``) sends more than
``MAX_RUNNING_AGENT_REQUESTS`` at once, of a method the client leaves unanswered: the
edge serves that many and reads nothing further from that agent until one is answered,
while another session of the same edge keeps streaming. Once the client answers, the
rest are served and the turn ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.protocol import MAX_RUNNING_AGENT_REQUESTS
from tests.e2e.harness import AcpProcess, write_config
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_SENT = MAX_RUNNING_AGENT_REQUESTS + 1000
_HOLD = "_scripted/hold"


@pytest.fixture
def acp(tmp_path: Path) -> Iterator[AcpProcess]:
    proc = AcpProcess(write_config(tmp_path / "cfg", extra=agent_section("scripted")))
    yield proc
    proc.close()
    proc.kill()


def _held(acp: AcpProcess) -> list[dict[str, object]]:
    return [m for m in acp.outbound if m.get("method") == _HOLD]


def _say(acp: AcpProcess, sid: str, text: str) -> list[str]:
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": text})
    assert resp.get("result") == {"stopReason": "end_turn"}, resp
    return [m["params"]["update"]["content"]["text"] for m in before
            if m.get("method") == "session/update" and m["params"].get("sessionId") == sid
            and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"]


def test_an_agent_cannot_start_requests_without_bound(acp: AcpProcess, tmp_path: Path) -> None:
    sid = acp.new_session(agentAlias="scripted", cwd=str(tmp_path))
    other = acp.new_session(agentAlias="scripted", cwd=str(tmp_path))
    assert _say(acp, other, "hi") == ["echo: hi"]

    prompt = acp.request_async("session/prompt", {"sessionId": sid, "prompt": f"hold {_SENT}"})
    acp.read_until(lambda _: len(_held(acp)) >= MAX_RUNNING_AGENT_REQUESTS)
    # The edge holds the bound: another session of it still streams...
    assert _say(acp, other, "still here") == ["echo: still here"]
    # ...and nothing more of the hostile agent's was passed on: what the edge wrote before
    # its answer to a request sent now is read first.
    _, listed = acp.call("session/list", {})
    assert "result" in listed, listed
    assert len(_held(acp)) == MAX_RUNNING_AGENT_REQUESTS

    # Answered, they make room: the rest are served and the turn ends.
    acp.handlers[_HOLD] = lambda params: {}
    for msg in _held(acp):
        acp.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
    _, resp = acp.response(prompt)
    assert resp.get("result") == {"stopReason": "end_turn"}, resp
    assert len(_held(acp)) == _SENT
    assert _say(acp, sid, "hi") == ["echo: hi"]
