"""A permission request nobody answers: the model is told the timeout that applied (SPEC §6, §9).

`acpgate acp --session-timeout 2` times the request out after 2 s; the built-in
agent runs as its own process and reads its config from the config dir, which
still says 3600. The denial the model (and the client's tool_call_update) sees
must name the 2 seconds that really elapsed, not the agent's own default.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import AcpProcess, updates, write_config

pytestmark = pytest.mark.slow


def test_denial_names_the_timeout_the_edge_applied(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", session_timeout=3600)
    acp = AcpProcess(cfg, "--session-timeout", "2")
    try:
        acp.handlers["session/request_permission"] = lambda params: None  # never answered
        sid = acp.new_session()
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "!echo hi"})
        assert resp["result"]["stopReason"] == "end_turn", resp
        assert any(m.get("method") == "session/request_permission" for m in before)
        (done,) = [u for u in updates(before, sid) if u["sessionUpdate"] == "tool_call_update"]
        assert done["status"] == "failed"
        assert done["rawOutput"] == ("The `shell` call was denied automatically: the user gave "
                                     "no answer within 2 seconds.")
    finally:
        acp.kill()
