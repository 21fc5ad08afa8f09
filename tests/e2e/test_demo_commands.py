"""The demo agent's slash commands through `acpgate acp`: advertised to the client, `/help`,
and `/shell` making a tool call and a permission request in supervised mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, streamed_text, updates, write_config

pytestmark = pytest.mark.slow

NAMES = ["shell", "read", "write", "ask", "plan", "escalate", "deliver", "help"]


def _is_commands(sid: str) -> Any:
    def pred(msg: dict[str, Any]) -> bool:
        return msg.get("method") == "session/update" and msg["params"]["sessionId"] == sid \
            and msg["params"]["update"]["sessionUpdate"] == "available_commands_update"
    return pred


def _set_up(acp: AcpProcess, method: str, params: dict[str, Any]) -> tuple[str, list[str]]:
    """``method``'s session id, and the names of the commands advertised for that session.
    A new session's come after the answer that tells the client its id (a client drops an
    update for a session it does not know yet); a restored one's before, with its replay."""
    rid = acp.request_async(method, params)
    before, resp = acp.response(rid)
    assert "result" in resp, resp
    sid = params.get("sessionId") or resp["result"]["sessionId"]
    found = [m for m in before if _is_commands(sid)(m)]
    if method == "session/new":
        assert not found, "advertised before the session/new answer"
        _, msg = acp.read_until(_is_commands(sid))
        found = [msg]
    # (a load replays the commands the client was sent before, then the restored agent's)
    update = found[-1]
    return sid, [c["name"] for c in update["params"]["update"]["availableCommands"]]


def test_commands_advertised_help_and_shell_permission(tmp_path: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg", autonomy="supervised"))
    asked: list[dict[str, Any]] = []

    def allow(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

    acp.handlers["session/request_permission"] = allow
    try:
        acp.result("initialize", {"protocolVersion": 1})
        sid, names = _set_up(acp, "session/new", {})
        assert names == NAMES
        help_text = acp.say(sid, "/help")
        for name in NAMES:
            assert f"`/{name}`" in help_text
        assert "Example: `/shell ls`" in help_text

        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "/shell echo hi"}]})
        assert resp["result"]["stopReason"] == "end_turn"
        kinds = [u["sessionUpdate"] for u in updates(before, sid)]
        assert "tool_call" in kinds and "tool_call_update" in kinds
        (request,) = [m for m in before if m.get("method") == "session/request_permission"]
        assert request["params"]["sessionId"] == sid and asked
        assert "hi" in streamed_text(before, sid)

        acp.result("session/close", {"sessionId": sid})
        # A restore replays the conversation from the store, and the commands come again.
        assert _set_up(acp, "session/load", {"sessionId": sid}) == (sid, NAMES)
        acp.result("session/close", {"sessionId": sid})
        assert _set_up(acp, "session/resume", {"sessionId": sid}) == (sid, NAMES)
    finally:
        acp.close()
