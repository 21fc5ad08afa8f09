"""The client's actions in the session's event log are what acpgate did, never what a client
claimed: a mode change the agent accepted (with only the values relayed), never a refused
one; a permission request as relayed, then the answer the agent got, never the client's own bytes — a malformed
"selected" answer reaches the agent as ``cancelled`` and is logged so; a cancel only when a
turn was cancelled. Read from the real SQLite store after the process ended."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.e2e.harness import AcpProcess, write_config
from tests.security.scripted_agent import agent_section


def _logged(cfg: Path, sid: str) -> list[tuple[int, str, dict[str, Any] | str]]:
    """``(event id, kind, payload)`` of the session's logged events, oldest first (client
    actions decoded)."""
    con = sqlite3.connect(cfg / "data" / "sessions" / "acp-sessions.db")
    try:
        rows = con.execute("SELECT first_event_id, last_event_id, kind, prefix, payload"
                           " FROM event_chunks WHERE session_id = ? ORDER BY first_event_id",
                           (sid,)).fetchall()
    finally:
        con.close()
    events = [(first + i, kind, bytes(prefix) + part) for first, last, kind, prefix, payload
              in rows for i, part in enumerate(
                  [bytes(payload)] if last == first else bytes(payload).split(b"\n"))]
    return [(eid, kind, json.loads(p) if kind not in ("update", "prompt") else p.decode())
            for eid, kind, p in events]


def test_a_client_cannot_log_an_action_acpgate_did_not_take(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", extra=agent_section("hostile"))
    proc = AcpProcess(cfg)
    try:
        demo = proc.new_session()
        # Accepted: only the method and the mode the agent took are logged, under acpgate's
        # own event id (the client's forged id and extra params are not).
        forged = {"acpgate": {"eventId": 7}, "note": "x" * 100}
        proc.result("session/set_mode", {"sessionId": demo, "modeId": "readonly",
                                         "_meta": forged, "extra": {"a": 1}})
        # Refused by the agent: nothing is logged.
        refused = proc.error("session/set_mode", {"sessionId": demo, "modeId": "godmode"})
        assert refused["code"] == -32602, refused
        # No turn runs: a cancel logs nothing.
        proc.notify("session/cancel", {"sessionId": demo})

        sid = proc.new_session(agentAlias="hostile")
        # A malformed "selected" answer: the agent gets "cancelled", and the log says so.
        proc.handlers["session/request_permission"] = lambda params: {
            "outcome": {"outcome": "selected", "optionId": 5}, "_meta": {"claim": "granted"}}
        seen, resp = proc.call("session/prompt", {"sessionId": sid, "prompt": "ask"})
        assert resp["result"]["stopReason"] == "end_turn", resp
        agent_got = [u for m in seen if m.get("method") == "session/update"
                     and "answer" in json.dumps(u := m["params"]["update"])]
        assert '\\"cancelled\\"' in json.dumps(agent_got), agent_got
        proc.result("session/close", {"sessionId": sid})
        proc.result("session/close", {"sessionId": demo})
        assert proc.close() == 0
    finally:
        proc.kill()

    actions = [(k, p) for _, k, p in _logged(cfg, demo) if k not in ("update", "prompt")]
    assert actions == [("config", {"method": "session/set_mode", "modeId": "readonly"})]
    ids = [eid for eid, _, _ in _logged(cfg, demo)]
    assert 7 not in ids and ids == sorted(set(ids))
    permission = [p for _, k, p in _logged(cfg, sid) if k == "permission"]
    assert len(permission) == 2, permission  # the request as relayed, then the answer
    asked, answered = permission
    assert isinstance(asked, dict) and isinstance(answered, dict)
    assert "answer" not in asked and asked["requestId"] == answered["requestId"], permission
    assert asked["params"]["toolCall"]["toolCallId"] == f"tc-{asked['requestId']}", asked
    assert answered["answer"] == {"outcome": {"outcome": "cancelled"}}, answered


def test_every_conversation_action_is_logged_in_order(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", extra=agent_section("hostile"))
    proc = AcpProcess(cfg)
    try:
        demo = proc.new_session()
        proc.result("session/set_mode", {"sessionId": demo, "modeId": "readonly"})
        proc.result("session/set_config_option", {"sessionId": demo, "configId": "model",
                                                  "value": "demo"})
        sid = proc.new_session(agentAlias="hostile")
        proc.handlers["session/request_permission"] = lambda params: {
            "outcome": {"outcome": "selected", "optionId": "allow"}}
        _, resp = proc.call("session/prompt", {"sessionId": sid, "prompt": "ask"})
        assert resp["result"]["stopReason"] == "end_turn", resp
        rid = proc.request_async("session/prompt", {"sessionId": sid, "prompt": "stream 200"})
        proc.read_until(lambda m: m.get("method") == "session/update"
                        and "chunk 2 " in json.dumps(m))
        proc.notify("session/cancel", {"sessionId": sid})
        _, resp = proc.response(rid)
        assert resp["result"]["stopReason"] == "cancelled", resp
        proc.result("session/close", {"sessionId": sid})
        proc.result("session/close", {"sessionId": demo})
        assert proc.close() == 0
    finally:
        proc.kill()

    assert [(k, p) for _, k, p in _logged(cfg, demo) if k != "update"] == [
        ("config", {"method": "session/set_mode", "modeId": "readonly"}),
        ("config", {"method": "session/set_config_option", "configId": "model",
                    "value": "demo"})]
    kinds = [k for _, k, _ in _logged(cfg, sid) if k != "update"]
    assert kinds == ["prompt", "permission", "permission", "prompt", "cancel"], kinds
    cancel = next(p for _, k, p in _logged(cfg, sid) if k == "cancel")
    assert cancel == {"method": "session/cancel"}
