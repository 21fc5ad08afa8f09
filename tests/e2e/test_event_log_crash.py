"""The session's event log survives ``kill -9``: after the process dies mid-turn, a
``session/load`` on a new process replays what the client had — each update with the
event id the client saw, never one twice — and the cut turn marked interrupted.

Only the events of the last commit window may be missing (the log commits every 50 ms;
the test agent streams one chunk per 50 ms): at most the newest few the client got,
never one in between.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.harness import AcpProcess, write_config

pytestmark = pytest.mark.slow

#: Chunks the client reads before the kill.
SEEN_BEFORE_KILL = 40
#: The newest events that may be missing: one commit window of the streaming agent,
#: with room for a slow machine's writer.
WINDOW_EVENTS = 3


def _event_ids(messages: list[dict[str, Any]], sid: str) -> list[int]:
    out = []
    for m in messages:
        if m.get("method") == "session/update" and m["params"]["sessionId"] == sid:
            out.append(int(m["params"]["update"]["_meta"]["acpgate"]["eventId"]))
    return out


def _kill_all(proc: AcpProcess) -> None:
    """kill -9 of the process and, after it, of every process it started (its adapter's
    wrapper would end them itself; the test does not wait for that)."""
    children = proc.descendants()
    proc.kill()
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def test_kill_9_of_acp_mid_turn_then_load_replays_what_the_client_had(
        tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", autonomy="full")
    first = AcpProcess(cfg)
    try:
        sid = first.new_session(agentAlias="sdk")
        first.result("session/prompt", {"sessionId": sid, "prompt": "a completed turn"})
        first.request_async("session/prompt", {"sessionId": sid, "prompt": "slow"})
        seen: list[dict[str, Any]] = []
        while len(_event_ids(seen, sid)) < SEEN_BEFORE_KILL:
            seen.append(first.next_message())
    finally:
        _kill_all(first)
    had = _event_ids(seen, sid)

    second = AcpProcess(cfg)
    try:
        replay, resp = second.call("session/load", {"sessionId": sid})
        assert "result" in resp
        replayed = _event_ids(replay, sid)
        assert len(replayed) == len(set(replayed)), "no event replayed twice"
        assert replayed == sorted(replayed)
        cut = [m["params"]["update"] for m in replay
               if m["params"]["update"]["sessionUpdate"] == "user_message_chunk"]
        assert [u["content"]["text"] for u in cut] == ["a completed turn", "slow"]
        assert "stopReason" not in cut[0]["_meta"]["acpgate"]
        assert cut[1]["_meta"]["acpgate"]["stopReason"] == "interrupted"
        prompts = {u["_meta"]["acpgate"]["eventId"] for u in cut}
        streamed = [i for i in replayed if i not in prompts and i >= had[0]]
        missing = [i for i in had if i not in set(streamed)]
        assert had[:len(had) - len(missing)] == streamed[:len(had) - len(missing)], \
            "what is missing is the newest events only, never one in between"
        assert len(missing) <= WINDOW_EVENTS, (len(missing), len(had))
        assert second.close() == 0
    finally:
        second.kill()
