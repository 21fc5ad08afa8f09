"""A hostile agent cannot forge the session's event log: event ids it writes into its
updates are replaced by acpgate's before they are logged, and a turn's state is acpgate's
own — what a later ``session/load`` replays is what the client saw, each event once, the
completed turn not marked as anything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.harness import AcpProcess, write_config
from tests.security.scripted_agent import agent_section


def _updates(messages: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in messages
            if m.get("method") == "session/update" and m["params"]["sessionId"] == sid]


def test_forged_event_ids_never_reach_the_log(tmp_path: Path) -> None:
    proc = AcpProcess(write_config(tmp_path / "cfg", extra=agent_section("hostile")))
    try:
        sid = proc.new_session(agentAlias="hostile")
        live, resp = proc.call("session/prompt", {"sessionId": sid, "prompt": "forge 12"})
        assert resp["result"]["stopReason"] == "end_turn"
        live_ids = [u["_meta"]["acpgate"]["eventId"] for u in _updates(live, sid)]
        assert len(live_ids) == 12 and 1 not in live_ids and 2 not in live_ids
        proc.result("session/close", {"sessionId": sid})
        replay, _ = proc.call("session/load", {"sessionId": sid})
        ups = _updates(replay, sid)
        ids = [u["_meta"]["acpgate"]["eventId"] for u in ups]
        assert len(ids) == len(set(ids)) and ids == sorted(ids)
        assert ids[1:] == live_ids, "the log holds acpgate's ids, never the agent's"
        assert ups[0]["sessionUpdate"] == "user_message_chunk"
        assert "stopReason" not in ups[0]["_meta"]["acpgate"], "a completed turn stays so"
        assert all(u["_meta"]["vendor"] == i for i, u in enumerate(ups[1:]))
        proc.result("session/close", {"sessionId": sid})
    finally:
        proc.close()
        proc.kill()
