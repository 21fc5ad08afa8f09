"""escalate_to_human through `acpgate acp` (the seed: approvals reach the client "through
ask_user/escalate_to_human" as `session/request_permission`; no answer → denied).

The built-in agent runs as its own process behind the edge; the demo model escalates on
`escalate <summary> | <context>`. The client sees one permission request (the escalation,
not an approval of the tool), the edge's `zc-out-N` id, and the agent goes on only after
an approval; a request nobody answers is denied after the edge's session timeout, and a
client that advertised elicitation gets the form instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, updates, write_config

pytestmark = pytest.mark.slow

PROMPT = "escalate Drop the orders table? | it still holds 3 GB of live data"


def _finished(before: list[dict[str, Any]], sid: str) -> dict[str, Any]:
    (done,) = [u for u in updates(before, sid) if u["sessionUpdate"] == "tool_call_update"]
    assert done["name"] == "escalate_to_human"
    return done


def test_escalation_is_a_permission_request_the_human_answers(tmp_path: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg", autonomy="readonly"))
    try:
        asked: list[dict[str, Any]] = []

        def approve(params: dict[str, Any]) -> dict[str, Any]:
            asked.append(params)
            return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

        acp.handlers["session/request_permission"] = approve
        sid = acp.new_session()
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": PROMPT})
        assert resp["result"]["stopReason"] == "end_turn", resp
        (request,) = [m for m in before if m.get("method") == "session/request_permission"]
        assert str(request["id"]).startswith("zc-out-")
        (params,) = asked
        assert params["sessionId"] == sid
        assert [o["optionId"] for o in params["options"]] == ["allow-once", "reject-once"]
        assert params["toolCall"]["title"] == "[HIGH] Drop the orders table?"
        assert params["toolCall"]["rawInput"] == {
            "tool": "escalate_to_human", "summary": "Drop the orders table?", "urgency": "high",
            "context": "it still holds 3 GB of live data"}
        done = _finished(before, sid)
        assert done["status"] == "completed"
        assert done["rawOutput"] == "The user approved the escalation: go on."
        assert "approved the escalation" in resp["result"]["content"]

        acp.handlers["session/request_permission"] = lambda p: {
            "outcome": {"outcome": "selected", "optionId": "reject-once"}}
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": PROMPT})
        done = _finished(before, sid)
        assert done["status"] == "failed"
        assert done["rawOutput"] == "The user rejected the escalation: do not go on with it."
        assert acp.close() == 0
    finally:
        acp.kill()


def test_unanswered_escalation_is_denied_after_the_timeout(tmp_path: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg", session_timeout=3600),
                     "--session-timeout", "2")
    try:
        acp.handlers["session/request_permission"] = lambda params: None  # never answered
        sid = acp.new_session()
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": PROMPT})
        assert resp["result"]["stopReason"] == "end_turn", resp
        done = _finished(before, sid)
        assert done["status"] == "failed"
        assert done["rawOutput"] == ("The escalation was denied automatically: the user gave "
                                     "no answer within 2 seconds.")
    finally:
        acp.kill()


def test_elicitation_form_when_the_client_offers_it(tmp_path: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg"))
    try:
        forms: list[dict[str, Any]] = []

        def fill(params: dict[str, Any]) -> dict[str, Any]:
            forms.append(params)
            return {"action": "accept", "content": {"decision": "approve",
                                                    "reply": "take a backup first"}}

        acp.handlers["elicitation/create"] = fill
        acp.result("initialize", {"protocolVersion": 1,
                                  "clientCapabilities": {"elicitation": {"form": {}}}})
        sid = acp.new_session()
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": PROMPT})
        assert resp["result"]["stopReason"] == "end_turn", resp
        assert not [m for m in before if m.get("method") == "session/request_permission"]
        (form,) = forms
        assert form["mode"] == "form" and "Drop the orders table?" in form["message"]
        done = _finished(before, sid)
        assert done["rawOutput"] == ("The user approved the escalation: go on. Their reply: "
                                     "take a backup first")
        assert acp.close() == 0
    finally:
        acp.kill()
