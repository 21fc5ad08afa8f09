"""SPEC §8: sessions survive a full restart of `acpgate acp` (new process, same data dir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, gone, updates, write_config

pytestmark = pytest.mark.slow


def _turn_updates(before: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    return list(updates(before, sid))


def test_load_after_restart_replays_exact_turns(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", autonomy="full")
    first = AcpProcess(cfg)
    project = tmp_path / "project"  # beside the config dir: a cwd containing it is refused
    project.mkdir()
    try:
        sid = first.new_session(agentAlias="demo", cwd=str(project))
        (project / "note.txt").write_text("restart contents")
        streamed: list[dict[str, Any]] = []
        prompts = ["hello before restart", "plan", "read note.txt", "write out.txt written"]
        for prompt in prompts:
            before, resp = first.call("session/prompt", {"sessionId": sid, "prompt": prompt})
            assert resp["result"]["stopReason"] == "end_turn"
            streamed.extend(_turn_updates(before, sid))
        children = [p.pid for p in first.descendants()]
        assert first.close() == 0
        assert gone(children)
    finally:
        first.kill()

    second = AcpProcess(cfg)
    try:
        replay, resp = second.call("session/load", {"sessionId": sid})
        assert set(resp["result"]) == {"modes", "configOptions"}
        replayed = updates(replay, sid)
        users = [u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
        assert users == prompts

        def text(kind: str, ups: list[dict[str, Any]]) -> str:
            return "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == kind)

        assert text("agent_message_chunk", replayed) == text("agent_message_chunk", streamed)
        assert text("agent_thought_chunk", replayed) == text("agent_thought_chunk", streamed)
        live_calls = [u for u in streamed if u["sessionUpdate"] == "tool_call"]
        live_done = [u for u in streamed if u["sessionUpdate"] == "tool_call_update"
                     and u.get("status") in ("completed", "failed")]
        calls = [u for u in replayed if u["sessionUpdate"] == "tool_call"]
        done = [u for u in replayed if u["sessionUpdate"] == "tool_call_update"
                and u.get("status") in ("completed", "failed")]
        # The replay is the event log: each update as it streamed (a call's status too).
        assert calls == live_calls
        assert [(d["toolCallId"], d["status"], d["rawOutput"]) for d in done] == \
            [(d["toolCallId"], d["status"], d["rawOutput"]) for d in live_done]
        assert any("restart contents" in str(d["rawOutput"]) for d in done)
        # §5: a file write carries diff content, live and replayed alike
        diffs = [c for c in calls if c["name"] == "file_write"]
        live_diffs = [c for c in live_calls if c["name"] == "file_write"]
        assert diffs and diffs[0]["content"] == live_diffs[0]["content"]
        diff = diffs[0]["content"][0]
        assert diff["type"] == "diff" and diff["newText"] == "written"
        assert diff["path"].endswith("out.txt")
        # the restored agent has the history as context and keeps working
        res = second.result("session/prompt", {"sessionId": sid, "prompt": "after restart"})
        assert res["stopReason"] == "end_turn"
        second.result("session/close", {"sessionId": sid})

        replay, resp = second.call("session/resume", {"sessionId": sid})
        assert set(resp["result"]) == {"modes", "configOptions"}
        # The stored plan, then the restored agent's commands (the demo model's).
        assert [u["sessionUpdate"] for u in updates(replay, sid)] == [
            "plan", "available_commands_update"]
        assert second.close() == 0
    finally:
        second.kill()
