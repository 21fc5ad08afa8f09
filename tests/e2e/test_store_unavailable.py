"""The store cannot be opened (SPEC §2's in-memory fallback): load, resume *and close* answer
SESSION_NOT_FOUND, as the seed lists all three.

`session/close` deactivates a session to its stored record, to be loaded again; without a
store there is none, the capability is not advertised, and the seed's close answers -32000.
An active in-memory session is left as it was (no half-done close behind an error): it
keeps working, and `session/stop` — which never needed the store — ends it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import AcpProcess, write_config

pytestmark = pytest.mark.slow


def test_close_load_and_resume_answer_not_found_without_a_store(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    (cfg / "data").mkdir()
    (cfg / "data" / "sessions").write_text("a file where the sessions dir should be")
    acp = AcpProcess(cfg)
    try:
        caps = acp.result("initialize", {"protocolVersion": 1})["agentCapabilities"]
        assert caps["loadSession"] is False and caps["sessionCapabilities"] == {}
        sid = acp.new_session()
        assert "hello" in acp.result("session/prompt", {"sessionId": sid, "prompt": "hello"})[
            "content"]
        not_found = {"code": -32000, "message": f"Session not found: {sid}"}
        for method in ("session/close", "session/load", "session/resume"):
            assert acp.error(method, {"sessionId": sid}) == not_found, method
        assert acp.error("session/close", {"sessionId": "no-such-session"}) == {
            "code": -32000, "message": "Session not found: no-such-session"}
        # The refused close touched nothing: the session still answers, stop ends it.
        assert "again" in acp.result("session/prompt", {"sessionId": sid, "prompt": "again"})[
            "content"]
        assert acp.result("session/stop", {"sessionId": sid}) == {"sessionId": sid,
                                                                   "stopped": True}
        assert acp.error("session/prompt", {"sessionId": sid, "prompt": "gone?"}) == not_found
        assert acp.close() == 0
    finally:
        acp.kill()
