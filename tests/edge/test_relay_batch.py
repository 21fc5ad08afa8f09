"""Relaying a burst: updates that arrive together go out together, in order, nothing lost.

A real ``acpgate acp`` with a small external ACP adapter that answers a prompt
with one single write holding hundreds of updates, noise the edge must drop
(non-JSON, a stale request id), a notification of a method acpgate does not know
(passed on, in its place), a permission request
in the middle (which splits the burst) and the prompt's result. The client must
see every update in order, with the edge's session id, the permission request
not before the updates written ahead of it, and the result last, as the agent
sent it; the stored turn (replayed by a load) holds the whole text.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, updates, write_config

pytestmark = pytest.mark.slow

N = 600
SPLIT = 250

ADAPTER = r'''
import json, os, sys

N, SPLIT = int(sys.argv[1]), int(sys.argv[2])

def line(msg):
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"

def chunk(sid, i):
    text = f"c{i} \"q\" é\\ "
    return line({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk",
                                     "content": {"type": "text", "text": text}}}})

for raw in sys.stdin.buffer:
    msg = json.loads(raw)
    mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        out = line({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1,
                                                             "agentCapabilities": {}}})
    elif method == "session/new":
        out = line({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "adapter-own-id"}})
    elif method == "session/prompt":
        sid = params["sessionId"]
        parts = [chunk(sid, i) for i in range(SPLIT)]
        parts.append(b"this is not json\n")
        parts.append(line({"jsonrpc": "2.0", "method": "vendor/noise", "params": {"x": 1}}))
        parts.append(line({"jsonrpc": "2.0", "id": 424242, "result": {}}))  # nobody asked
        parts.append(line({"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission",
                           "params": {"sessionId": sid,
                                      "toolCall": {"toolCallId": "t1", "title": "touch"},
                                      "options": [{"optionId": "allow-once", "name": "Allow",
                                                   "kind": "allow_once"}]}}))
        parts.extend(chunk(sid, i) for i in range(SPLIT, N))
        parts.append(line({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}}))
        out = b"".join(parts)
    elif mid is not None and method is None:
        continue  # the client's answer to our permission request
    elif mid is not None:
        out = line({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
    else:
        continue
    os.write(1, out)
'''


@pytest.fixture(scope="module")
def acp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AcpProcess]:
    root = tmp_path_factory.mktemp("burst")
    script = root / "burst_agent.py"
    script.write_text(ADAPTER)
    extra = f"""
[agents.burst]
kind = "acp"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(script))}, "{N}", "{SPLIT}"]
"""
    proc = AcpProcess(write_config(root / "cfg", extra=extra))
    yield proc
    assert proc.close() == 0
    proc.kill()


def test_a_burst_is_relayed_whole_and_in_order(acp: AcpProcess, tmp_path: Path) -> None:
    sid = acp.new_session(agentAlias="burst", cwd=str(tmp_path))
    acp.handlers["session/request_permission"] = (
        lambda params: {"outcome": {"outcome": "selected", "optionId": "allow-once"}})
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "go"})
    assert resp.get("result", {}).get("stopReason") == "end_turn", resp

    texts = [u["content"]["text"] for u in updates(before, sid)]
    expected = [f'c{i} "q" é\\ ' for i in range(N)]
    assert texts == expected
    # Every relayed update carries the edge's id; the adapter's own id never leaks.
    notes = [m for m in before if m.get("method") == "session/update"]
    assert len(notes) == N and all(m["params"]["sessionId"] == sid for m in notes)
    assert all("adapter-own-id" not in json.dumps(m) for m in before)
    # Noise was dropped. The permission request is handled concurrently with the stream
    # (a question waiting for the user never blocks updates), but never before the updates
    # the adapter wrote ahead of it.
    kinds: list[Any] = [m.get("method") for m in before]
    # An unknown notification of the session's agent passes through, in stream order.
    assert kinds.index("vendor/noise") == SPLIT and kinds.count("vendor/noise") == 1
    perm = kinds.index("session/request_permission")
    assert perm >= SPLIT
    assert before[perm]["params"]["sessionId"] == sid
    assert resp["result"] == {"stopReason": "end_turn"}  # the agent's result, whole
    # The logged turn replays as it streamed: every chunk, in order.
    assert acp.result("session/close", {"sessionId": sid}) == {}
    replay, loaded = acp.call("session/load", {"sessionId": sid})
    assert "result" in loaded, loaded
    texts = [u["content"]["text"] for u in updates(replay, sid)
             if u["sessionUpdate"] == "agent_message_chunk"]
    assert texts == expected
