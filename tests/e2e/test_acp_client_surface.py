"""The stable ACP v1 surface toward the client, through a real `acpgate acp`.

Each test names the part of that surface it checks. The external adapter is tests/e2e/sdk_agent.py
(the official ACP Python SDK, kind = "acp"); the built-in agent is the demo one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, streamed_text, updates, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("surface") / "cfg", max_sessions=10)


@pytest.fixture(scope="module")
def acp(cfg: Path) -> Iterator[AcpProcess]:
    proc = AcpProcess(cfg)
    proc.result("initialize", {"protocolVersion": 1, "clientCapabilities": {
        "elicitation": {"form": {}, "url": {}}}})
    yield proc
    assert proc.close() == 0
    proc.kill()


def _db(cfg: Path) -> sqlite3.Connection:
    return sqlite3.connect(cfg / "data" / "sessions" / "acp-sessions.db")


def _row(cfg: Path, sid: str, *columns: str) -> tuple[Any, ...]:
    with _db(cfg) as con:
        row = con.execute(f"SELECT {', '.join(columns)} FROM sessions WHERE id = ?",
                          (sid,)).fetchone()
    return tuple(row) if row else ()


def _say(acp: AcpProcess, sid: str, prompt: str) -> str:
    return acp.say(sid, prompt)


# ------------------------------------------------------------------ modes and config options


def test_modes_and_config_options_are_relayed_stored_and_reapplied(acp: AcpProcess,
                                                                    cfg: Path) -> None:
    """set_mode, set_config_option (string and boolean), modes/configOptions in
    new/load/resume results, relayed to the adapter, stored, re-applied on load/resume."""
    created = acp.result("session/new", {"agentAlias": "sdk"})
    sid = created["sessionId"]
    assert created["modes"]["currentModeId"] == "ask"
    assert [o["id"] for o in created["configOptions"]] == ["model", "thinking"]
    assert acp.result("session/set_mode", {"sessionId": sid, "modeId": "code"}) == {}
    picked = acp.result("session/set_config_option",
                        {"sessionId": sid, "configId": "model", "value": "smart"})
    assert picked["configOptions"][0]["currentValue"] == "smart"
    toggled = acp.result("session/set_config_option", {
        "sessionId": sid, "configId": "thinking", "type": "boolean", "value": True})
    assert toggled["configOptions"][1]["currentValue"] is True
    err = acp.error("session/set_mode", {"sessionId": sid, "modeId": "nope"})
    assert err == {"code": -32602, "message": "no mode nope",  # the adapter's refusal, relayed
                   "data": {"acpgate": {"during": "session/set_mode", "agent": "sdk"}}}
    assert _say(acp, sid, "state") == \
        'mode=code config={"model": "smart", "thinking": true} dirs='
    assert _row(acp.config_dir, sid, "mode_id", "config_json") == \
        ("code", '{"model":"smart","thinking":true}')
    acp.result("session/close", {"sessionId": sid})
    for method in ("session/load", "session/resume"):  # a fresh adapter process each time
        restored = acp.result(method, {"sessionId": sid})
        assert restored["modes"]["currentModeId"] == "code"
        assert [o["currentValue"] for o in restored["configOptions"]] == ["smart", True]
        assert _say(acp, sid, "state").startswith(
            'mode=code config={"model": "smart", "thinking": true}')
        acp.result("session/close", {"sessionId": sid})


def test_builtin_agent_mode_is_reapplied_on_load(acp: AcpProcess) -> None:
    """The built-in agent's autonomy mode, never above the configured level."""
    created = acp.result("session/new", {"agentAlias": "demo"})
    sid = created["sessionId"]
    assert [m["id"] for m in created["modes"]["availableModes"]] == ["readonly", "supervised"]
    assert created["configOptions"][0]["category"] == "model"
    assert acp.error("session/set_mode", {"sessionId": sid, "modeId": "full"})["code"] == -32602
    before, _ = acp.call("session/set_mode", {"sessionId": sid, "modeId": "readonly"})
    assert {"sessionUpdate": "current_mode_update", "currentModeId": "readonly"} in \
        updates(before, sid)
    acp.result("session/close", {"sessionId": sid})
    assert acp.result("session/load", {"sessionId": sid})["modes"]["currentModeId"] == "readonly"
    acp.result("session/close", {"sessionId": sid})


# ------------------------------------------------------------------ session/update kinds


def test_every_update_kind_is_relayed_unchanged_and_state_is_stored(acp: AcpProcess) -> None:
    """Every session/update kind relayed unchanged except the session id (unknown
    future kinds too), stored where it matters for replay (title, mode, config)."""
    sid = acp.new_session(agentAlias="sdk")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "first prompt line\nmore"})
    listed = {s["sessionId"]: s for s in acp.result("session/list", {})["sessions"]}
    assert listed[sid]["title"] == "first prompt line"  # the first prompt's first line
    before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "kinds"})
    got = updates(before, sid)
    assert [u["sessionUpdate"] for u in got] == [
        "available_commands_update", "current_mode_update", "config_option_update",
        "future_kind_update"]
    assert got[0]["availableCommands"] == [{"name": "plan", "description": "Make a plan"}]
    assert got[3] == {"sessionUpdate": "future_kind_update", "anything": [1, {"x": 2}]}
    assert all(m["params"]["sessionId"] == sid for m in before
               if m.get("method") == "session/update")
    assert _row(acp.config_dir, sid, "mode_id", "config_json") == \
        ("code", '{"model":"fast","thinking":true}')
    before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "title"})
    assert updates(before, sid) == [{"sessionUpdate": "session_info_update", "title": "SDK title"}]
    listed = {s["sessionId"]: s for s in acp.result("session/list", {})["sessions"]}
    assert listed[sid]["title"] == "SDK title"  # the agent's title wins
    acp.result("session/close", {"sessionId": sid})


# ------------------------------------------------------------------ usage


def test_usage_is_relayed_recorded_per_turn_and_totalled(acp: AcpProcess, cfg: Path) -> None:
    """Usage on the prompt result and usage_update; recorded per turn, totals in
    session/list _meta."""
    sid = acp.new_session(agentAlias="sdk")
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "usage"})
    assert updates(before, sid) == [{"sessionUpdate": "usage_update", "used": 42, "size": 1000}]
    assert resp["result"]["usage"] == {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10,
                                       "thoughtTokens": 4}
    acp.result("session/prompt", {"sessionId": sid, "prompt": "usage"})
    with _db(cfg) as con:
        assert con.execute("SELECT turn, input_tokens, output_tokens, thought_tokens FROM"
                           " turn_usage WHERE session_id = ? ORDER BY turn",
                           (sid,)).fetchall() == [(1, 20, 10, 4), (2, 20, 10, 4)]
    listed = {s["sessionId"]: s for s in acp.result("session/list", {})["sessions"]}
    assert listed[sid]["_meta"]["acpgate"]["usage"] == \
        {"inputTokens": 40, "outputTokens": 20, "totalTokens": 60}
    # the built-in agent reports its provider's counts the same way
    demo = acp.new_session(agentAlias="demo")
    before, resp = acp.call("session/prompt", {"sessionId": demo, "prompt": "hi"})
    usage = resp["result"]["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert updates(before, demo)[-1]["sessionUpdate"] == "usage_update"
    assert _row(cfg, demo, "input_tokens", "output_tokens") == \
        (usage["inputTokens"], usage["outputTokens"])
    for s in (sid, demo):
        acp.result("session/close", {"sessionId": s})


# ------------------------------------------------------------------ session/list


def test_list_pages_with_cursor_and_filters_by_cwd(acp: AcpProcess, cfg: Path,
                                                   tmp_path: Path) -> None:
    """session/list with cwd filter, cursor/nextCursor paging, title, updatedAt."""
    ws = str(tmp_path.resolve())
    with _db(cfg) as con:  # 130 stored sessions in one workspace, written as the store would
        for i in range(130):
            con.execute("INSERT INTO sessions (id, agent_alias, workspace_dir, created_at,"
                        " last_activity, title) VALUES (?, 'sdk', ?, ?, ?, ?)",
                        (f"paged-{i:03d}", ws, 1000 + i, 1000 + i, f"t{i}"))
    first = acp.result("session/list", {"cwd": ws})
    assert len(first["sessions"]) == 100 and "nextCursor" in first
    rest = acp.result("session/list", {"cwd": ws, "cursor": first["nextCursor"]})
    assert "nextCursor" not in rest
    ids = [s["sessionId"] for s in first["sessions"] + rest["sessions"]]
    assert ids == [f"paged-{i:03d}" for i in range(129, -1, -1)]  # newest activity first
    assert first["sessions"][0]["title"] == "t129"
    assert first["sessions"][0]["updatedAt"] == "1970-01-01T00:00:01.129000Z"
    assert acp.error("session/list", {"cursor": "not-ours"})["code"] == -32602


# ------------------------------------------------------------------ session/delete


def test_delete_closes_an_active_session_and_removes_everything(acp: AcpProcess,
                                                               cfg: Path) -> None:
    """session/delete removes the row and its history in one transaction, closes it
    first if active; visibility-checked like load."""
    sid = acp.new_session(agentAlias="sdk")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "keep me"})
    assert acp.result("session/delete", {"sessionId": sid}) == {}
    assert acp.error("session/prompt", {"sessionId": sid, "prompt": "x"})["code"] == -32000
    assert acp.error("session/load", {"sessionId": sid})["code"] == -32000
    assert acp.error("session/delete", {"sessionId": sid}) == \
        {"code": -32000, "message": f"Session not found: {sid}"}
    with _db(cfg) as con:
        assert con.execute("SELECT COUNT(*) FROM history WHERE session_id = ?",
                           (sid,)).fetchone() == (0,)
    assert sid not in {s["sessionId"] for s in acp.result("session/list", {})["sessions"]}


# ------------------------------------------------------------------ additionalDirectories


def test_additional_directories_are_roots_stored_and_passed_on(acp: AcpProcess,
                                                               tmp_path: Path) -> None:
    """additionalDirectories on new/load/resume: extra roots, same realpath/forbidden
    rules as cwd, stored on the row, enforced by policy, passed to the adapter."""
    ws, extra, other = tmp_path / "ws", tmp_path / "extra", tmp_path / "other"
    for d in (ws, extra, other):
        d.mkdir()
    (extra / "notes.txt").write_text("extra root content")
    (other / "secret.txt").write_text("sibling secret")
    link = tmp_path / "extra-link"
    link.symlink_to(extra)
    sid = acp.new_session(agentAlias="sdk", cwd=str(ws), additionalDirectories=[str(link)])
    assert _say(acp, sid, "state").endswith(f"dirs={extra.resolve()}")
    listed = {s["sessionId"]: s for s in acp.result("session/list", {})["sessions"]}
    assert listed[sid]["additionalDirectories"] == [str(extra.resolve())]
    acp.result("session/close", {"sessionId": sid})
    acp.result("session/resume", {"sessionId": sid, "additionalDirectories": [str(other)]})
    assert _say(acp, sid, "state").endswith(f"dirs={other.resolve()}")  # replaced, passed on
    acp.result("session/close", {"sessionId": sid})
    # the built-in agent's policy: the extra root is readable, a sibling is not
    demo = acp.new_session(agentAlias="demo", cwd=str(ws), additionalDirectories=[str(extra)])
    acp.handlers["session/request_permission"] = \
        lambda p: {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
    try:
        assert "extra root content" in _say(acp, demo, f"read {extra / 'notes.txt'}")
        denied = _say(acp, demo, f"read {other / 'secret.txt'}")
        assert "sibling secret" not in denied and "outside the session workspace" in denied
    finally:
        acp.handlers.clear()
    acp.result("session/close", {"sessionId": demo})
    for bad in ("/etc/ssh", "/no/such/dir", 7):
        err = acp.error("session/new", {"agentAlias": "sdk", "cwd": str(ws),
                                        "additionalDirectories": [bad]})
        assert err["code"] == -32602


# ------------------------------------------------------------------ $/cancel_request


def test_cancel_request_of_a_prompt_is_a_turn_cancel(acp: AcpProcess) -> None:
    """$/cancel_request, client → acpgate: a pending session/prompt is cancelled."""
    sid = acp.new_session(agentAlias="sdk")
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "slow"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    acp.notify("$/cancel_request", {"requestId": rid})
    _, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "cancelled"
    acp.notify("$/cancel_request", {"requestId": 123456})  # unknown: ignored, nothing answered
    acp.result("session/close", {"sessionId": sid})


def test_cancel_request_toward_the_client(acp: AcpProcess) -> None:
    """$/cancel_request, acpgate → client: a relayed permission request the turn no
    longer waits for is withdrawn; the adapter's own withdrawal reaches the client too."""
    sid = acp.new_session(agentAlias="sdk")
    acp.handlers["session/request_permission"] = lambda p: None  # never answered
    try:
        rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "perm"})
        _, asked = acp.read_until(lambda m: m.get("method") == "session/request_permission")
        acp.notify("session/cancel", {"sessionId": sid})
        _, withdrawn = acp.read_until(lambda m: m.get("method") == "$/cancel_request")
        assert withdrawn["params"] == {"requestId": asked["id"]} and "id" not in withdrawn
        acp.response(rid)
        rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "withdraw"})
        _, asked = acp.read_until(lambda m: m.get("method") == "session/request_permission")
        _, withdrawn = acp.read_until(lambda m: m.get("method") == "$/cancel_request")
        assert withdrawn["params"] == {"requestId": asked["id"]}
        rest, resp = acp.response(rid)
    finally:
        acp.handlers.clear()
    assert "result" in resp, resp
    assert streamed_text(rest) == "withdrawn -32800"  # the adapter got its one answer
    acp.result("session/close", {"sessionId": sid})


# ------------------------------------------------------------------ elicitation


def test_url_elicitation_and_its_completion_are_relayed(acp: AcpProcess) -> None:
    """Elicitation (form and url) relayed both ways, incl. elicitation/complete."""
    sid = acp.new_session(agentAlias="sdk")
    acp.handlers["elicitation/create"] = lambda p: {"action": "accept"}
    try:
        before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "elicit-url"})
    finally:
        acp.handlers.clear()
    (asked,) = [m for m in before if m.get("method") == "elicitation/create"]
    assert asked["params"] == {"sessionId": sid, "mode": "url", "message": "Sign in",
                               "elicitationId": "el-1", "url": "https://example.invalid/login"}
    (done,) = [m for m in before if m.get("method") == "elicitation/complete"]
    assert done["params"] == {"elicitationId": "el-1"} and "id" not in done
    assert streamed_text(before) == "elicitation: accept"
    acp.result("session/close", {"sessionId": sid})

