"""The scenario table: SPEC §1–§9 over raw JSON lines against a real `acpgate acp`.

One shared subprocess serves most rows (each row cleans up its sessions);
rows that need other settings (limits, timeouts, memory store, no default
agent) get their own small process. Each row names the SPEC section it checks.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MAX_BLOB_BYTES, MSG_CWD_REFUSED_LOCAL
from tests.e2e.harness import AcpProcess, streamed_text, updates, workspace_of, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cfg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("scen") / "cfg", max_sessions=10)


@pytest.fixture(scope="module")
def acp(cfg_dir: Path) -> Iterator[AcpProcess]:
    # The server runs in the config dir, so a cwd of "." is the install-root placeholder (§3).
    proc = AcpProcess(cfg_dir, cwd=cfg_dir)
    yield proc
    assert proc.close() == 0
    proc.kill()


@pytest.fixture
def opened(acp: AcpProcess) -> Iterator[list[str]]:
    """Session ids a row opened; closed again after the row."""
    ids: list[str] = []
    yield ids
    for sid in ids:
        acp.call("session/close", {"sessionId": sid})


def _db(cfg: Path) -> Path:
    return cfg / "data" / "sessions" / "acp-sessions.db"


def _history(cfg: Path, sid: str) -> list[tuple[str, str]]:
    with sqlite3.connect(_db(cfg)) as conn:
        return conn.execute("SELECT role, text FROM history WHERE session_id = ? ORDER BY seq",
                            (sid,)).fetchall()


def _assert_quiet_then_marker(acp: AcpProcess) -> None:
    """Nothing was answered: the next message is the answer to a fresh marker request."""
    rid = acp.request_async("session/list", {})
    msg = acp.next_message()
    assert msg.get("id") == rid, f"unexpected message before the marker: {msg}"


# ----------------------------------------------------------------- error rows

ERROR_ROWS: list[tuple[str, str, Any, int, str, bool]] = [
    # (row, raw line, expected id, code, message, message is a prefix)
    ("§1 unparseable line", '{"jsonrpc": "2.0", "id": 1,', None, -32700, "Parse error: ", True),
    ("§1 batch array", '[{"jsonrpc":"2.0","id":1,"method":"initialize"}]', None, -32700,
     "Parse error: ", True),
    ("§1 non-object", '"just a string"', None, -32700, "Parse error: ", True),
    ("§1 missing method", '{"jsonrpc":"2.0","id":9}', None, -32700, "Parse error: ", True),
    ("§1 wrong jsonrpc with id", '{"jsonrpc":"1.0","id":"v1","method":"initialize"}', "v1",
     -32600, "Invalid JSON-RPC version", False),
    ("§1 missing jsonrpc with id", '{"id":"v2","method":"initialize"}', "v2", -32600,
     "Invalid JSON-RPC version", False),
    ("§1 unknown method", '{"jsonrpc":"2.0","id":"u","method":"foo/bar"}', "u", -32601,
     "Method not found: foo/bar", False),
    ("§1 params not an object = no fields",
     '{"jsonrpc":"2.0","id":"p","method":"session/prompt","params":[1,2]}', "p", -32602,
     "Missing required parameter: sessionId", False),
    ("§4 prompt without session id",
     '{"jsonrpc":"2.0","id":"q","method":"session/prompt","params":{"prompt":"x"}}', "q",
     -32602, "Missing required parameter: sessionId", False),
    ("§4 prompt unknown session",
     '{"jsonrpc":"2.0","id":"r","method":"session/prompt","params":{"sessionId":"nope","prompt":"x"}}',
     "r", -32000, "Session not found: nope", False),
    ("§1 session_id alias",
     '{"jsonrpc":"2.0","id":"r2","method":"session/prompt","params":{"session_id":"nope2","prompt":"x"}}',
     "r2", -32000, "Session not found: nope2", False),
    ("§7 stop without id", '{"jsonrpc":"2.0","id":"s1","method":"session/stop","params":{}}',
     "s1", -32602, "Missing required parameter: sessionId", False),
    ("§7 stop not active", '{"jsonrpc":"2.0","id":"s2","method":"session/stop","params":{"sessionId":"gone"}}',
     "s2", -32000, "Session not found: gone", False),
    ("§7 close without id", '{"jsonrpc":"2.0","id":"c1","method":"session/close"}', "c1", -32602,
     "Missing required parameter: sessionId", False),
    ("§7 close not active",
     '{"jsonrpc":"2.0","id":"c2","method":"session/close","params":{"session_id":"gone"}}', "c2",
     -32000, "Session not found: gone", False),
    ("§8 load without id", '{"jsonrpc":"2.0","id":"l1","method":"session/load","params":{}}', "l1",
     -32602, "Missing required parameter: sessionId", False),
    ("§8 load unknown",
     '{"jsonrpc":"2.0","id":"l2","method":"session/load","params":{"sessionId":"00000000-0000-4000-8000-000000000000"}}',
     "l2", -32000, "Session not found: 00000000-0000-4000-8000-000000000000", False),
    ("§8 resume unknown",
     '{"jsonrpc":"2.0","id":"l3","method":"session/resume","params":{"sessionId":"nosuch"}}', "l3",
     -32000, "Session not found: nosuch", False),
    ("§8 inbound update unknown session",
     '{"jsonrpc":"2.0","id":"e1","method":"session/update","params":{"sessionId":"nosuch","type":"x"}}',
     "e1", -32000, "Session not found: nosuch", False),
    ("§8 inbound event without id", '{"jsonrpc":"2.0","id":"e2","method":"session/event","params":{}}',
     "e2", -32602, "Missing required parameter: sessionId", False),
    ("§3 unknown alias",
     '{"jsonrpc":"2.0","id":"n1","method":"session/new","params":{"agentAlias":"ghost"}}', "n1",
     -32602, "Unknown agent `ghost` — no [agents.ghost] entry configured", False),
    ("§3 disabled alias",
     '{"jsonrpc":"2.0","id":"n2","method":"session/new","params":{"agent":" off "}}', "n2",
     -32602, "Agent `off` is not enabled for dispatch", False),
    ("§1 cancel request without id",
     '{"jsonrpc":"2.0","id":"k1","method":"session/cancel","params":{}}', "k1", -32602,
     "Missing required parameter: sessionId", False),
    ("§8 load with an id no session can have",
     '{"jsonrpc":"2.0","id":"l4","method":"session/load","params":{"sessionId":"' + "x" * 100_000
     + '"}}', "l4", -32000, "Session not found: " + "x" * 100_000, False),
    ("§3 cwd does not exist",
     '{"jsonrpc":"2.0","id":"n3","method":"session/new","params":{"cwd":"/nonexistent/acpgate-x"}}',
     "n3", -32602, "cwd is not a usable directory (/nonexistent/acpgate-x): ", True),
]


@pytest.mark.parametrize("row", ERROR_ROWS, ids=[r[0] for r in ERROR_ROWS])
def test_error_rows(acp: AcpProcess, row: tuple[str, str, Any, int, str, bool]) -> None:
    _, line, expected_id, code, message, prefix = row
    acp.send_raw(line)
    msg = acp.next_message()
    assert set(msg) == {"jsonrpc", "id", "error"} and msg["jsonrpc"] == "2.0"
    assert msg["id"] == expected_id
    assert set(msg["error"]) == {"code", "message"}, "errors carry code and message only"
    assert msg["error"]["code"] == code
    if prefix:
        assert msg["error"]["message"].startswith(message) and len(msg["error"]["message"]) > len(message)
    else:
        assert msg["error"]["message"] == message


def test_cwd_that_is_a_file(acp: AcpProcess, tmp_path: Path) -> None:
    """§3: a cwd that is not a directory → -32602 naming the path."""
    f = tmp_path / "file.txt"
    f.write_text("x")
    err = acp.error("session/new", {"cwd": str(f)})
    assert err["code"] == -32602
    assert err["message"].startswith(f"cwd is not a usable directory ({f}): ")


SILENT_ROWS: list[tuple[str, str]] = [
    ("§1 blank line", ""),
    ("§1 whitespace line", "   "),
    ("§1 wrong version without id", '{"jsonrpc":"1.0","method":"initialize"}'),
    ("§1 notification, unknown method", '{"jsonrpc":"2.0","method":"no/such"}'),
    ("§1 id null is a notification", '{"jsonrpc":"2.0","id":null,"method":"no/such"}'),
    ("§1 response to an unknown outbound id", '{"jsonrpc":"2.0","id":"zc-out-999","result":{}}'),
    ("§1 error response to an unknown id", '{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":"m"}}'),
    ("§7 cancel notification, unknown session",
     '{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nosuch"}}'),
    ("§8 inbound update notification, unknown session",
     '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"nosuch"}}'),
    ("§1 failing notification", '{"jsonrpc":"2.0","method":"session/prompt","params":{}}'),
]


@pytest.mark.parametrize("row", SILENT_ROWS, ids=[r[0] for r in SILENT_ROWS])
def test_silent_rows(acp: AcpProcess, row: tuple[str, str]) -> None:
    acp.send_raw(row[1])
    _assert_quiet_then_marker(acp)


# ----------------------------------------------------------------- §2


@pytest.mark.parametrize("version", [1, "1", None])
def test_initialize_always_protocol_1(acp: AcpProcess, version: int | str | None) -> None:
    """§2: protocolVersion 1 for a v1 client (or one naming no version); the full result
    shape. (2 and above: the v2 dialect, tests/edge/test_v2_client.py.)"""
    params = {} if version is None else {"protocolVersion": version}
    res = acp.result("initialize", params)
    assert res["protocolVersion"] == 1
    # SPEC §2's three, plus delete and additionalDirectories, and fork
    assert res["agentCapabilities"]["sessionCapabilities"] == {
        "resume": {}, "close": {}, "list": {}, "delete": {}, "additionalDirectories": {},
        "fork": {}}
    assert res["_meta"]["zeroclaw"] == {"defaultModel": "demo/demo", "maxSessions": 10,
                                        "sessionTimeoutSecs": 3600}


# ----------------------------------------------------------------- §3


def test_alias_chain_and_variants(acp: AcpProcess, cfg_dir: Path, opened: list[str]) -> None:
    """§3 / §1 aliases: agentAlias → agent_alias → agent; blank = absent → default."""
    def ws(alias: str) -> str:
        return os.path.realpath(cfg_dir / "agents" / alias / "workspace")

    for params, alias in [({"agent_alias": "sdk"}, "sdk"), ({"agent": "sdkload"}, "sdkload"),
                          ({"agentAlias": "  "}, "demo"),
                          ({"agentAlias": "sdk", "agent": "ghost"}, "sdk")]:
        res = acp.result("session/new", params)
        opened.append(res["sessionId"])
        assert uuid.UUID(res["sessionId"]).version == 4
        assert workspace_of(res) == ws(alias)


def test_cwd_rules(acp: AcpProcess, cfg_dir: Path, tmp_path: Path, opened: list[str]) -> None:
    """§3: real path (symlinks resolved), relative to the server cwd, placeholder, aliases."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    (cfg_dir / "proj").mkdir(exist_ok=True)
    (cfg_dir.parent / "beside").mkdir(exist_ok=True)
    agent_ws = os.path.realpath(cfg_dir / "agents" / "sdk" / "workspace")
    cases = [
        ({"cwd": str(link)}, os.path.realpath(real)),
        ({"cwd": f"{real}/sub/.."}, os.path.realpath(real)),
        ({"workspaceDir": str(real / "sub")}, os.path.realpath(real / "sub")),
        ({"workspace_dir": str(real)}, os.path.realpath(real)),
        ({"cwd": "../beside"}, os.path.realpath(cfg_dir.parent / "beside")),
        ({"cwd": "."}, agent_ws),
        ({}, agent_ws),
    ]
    for params, expected in cases:
        res = acp.result("session/new", {"agentAlias": "sdk", **params})
        opened.append(res["sessionId"])
        assert workspace_of(res) == expected, params
    # A directory inside the install root is acpgate's own state, not a workspace;
    # the local user is told which state and the line that would allow it.
    error = acp.error("session/new", {"agentAlias": "sdk", "cwd": "proj"})
    proj = os.path.realpath(cfg_dir / "proj")
    assert error == {"code": -32602, "message": MSG_CWD_REFUSED_LOCAL.format(
        relation="lies inside", what="acpgate's own state", path=os.path.realpath(cfg_dir),
        cwd=json.dumps(proj), config_file=cfg_dir / "config.toml")}


# ----------------------------------------------------------------- §4 / §5


def _blob(data: bytes, uri: str, mime: str = "application/pdf") -> dict[str, Any]:
    return {"type": "resource",
            "resource": {"uri": uri, "mimeType": mime, "blob": base64.b64encode(data).decode()}}


def test_prompt_array_with_blobs(acp: AcpProcess, tmp_path: Path, opened: list[str]) -> None:
    """§4: parts joined with blank lines; blobs become files and markers; §5 order."""
    sid = acp.new_session(agentAlias="demo", cwd=str(tmp_path))
    opened.append(sid)
    pdf, png = b"%PDF-1.4 hello", b"\x89PNG\r\n"
    prompt = [{"text": "one"}, {"type": "text", "text": "two"},
              {"type": "resource", "resource": {"uri": "file:///a.rs", "text": "three"}},
              _blob(pdf, "file:///docs/Report.pdf"), _blob(png, "file:///p/x.PNG", "image/png"),
              {"type": "image", "mimeType": "image/png", "data": "AAAA"}]
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": prompt})
    uploads = Path(os.path.realpath(tmp_path)) / "uploads"
    pdf_path = uploads / f"{hashlib.sha256(pdf).hexdigest()}.pdf"
    png_path = uploads / f"{hashlib.sha256(png).hexdigest()}.png"
    assert pdf_path.read_bytes() == pdf and png_path.read_bytes() == png
    expected = f"one\n\ntwo\n\nthree\n\n[Document: Report.pdf] {pdf_path}\n\n[IMAGE:{png_path}]"
    assert _history_user(acp, sid) == expected
    assert "base64" not in json.dumps(before)
    res = resp["result"]
    assert res["stopReason"] == "end_turn" and res["sessionId"] == sid
    assert all(m.get("method") == "session/update" for m in before)
    chunks = [u for u in updates(before, sid) if u["sessionUpdate"] == "agent_message_chunk"]
    assert res["content"] == "".join(c["content"]["text"] for c in chunks)


def _history_user(acp: AcpProcess, sid: str) -> str:
    rows = _history(acp.config_dir, sid)
    users = [t for r, t in rows if r == "user"]
    return users[-1]


def test_blob_rules(acp: AcpProcess, tmp_path: Path, opened: list[str]) -> None:
    """§4: invalid base64 / oversize → -32602, nothing written, slot released; 10 MiB exactly ok."""
    sid = acp.new_session(agentAlias="sdk", cwd=str(tmp_path))
    opened.append(sid)
    uploads = tmp_path / "uploads"
    bad = [_blob(b"fine", "file:///ok.txt"),
           {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "@@not-base64@@"}}]
    err = acp.error("session/prompt", {"sessionId": sid, "prompt": bad})
    assert err["code"] == -32602 and err["message"].startswith("Invalid base64: ")
    assert not uploads.exists(), "nothing may be written when a later part is invalid"
    over = bytes(MAX_BLOB_BYTES + 1)
    err = acp.error("session/prompt", {"sessionId": sid, "prompt": [_blob(over, "file:///big.bin")]})
    assert err == {"code": -32602,
                   "message": f"Embedded resource exceeds 10 MB limit ({MAX_BLOB_BYTES + 1} bytes)"}
    assert not uploads.exists()
    for prompt, message in [
        ([], "Parameter 'prompt' array must contain at least one text part"),
        ([{"type": "image", "data": "AA"}], "Parameter 'prompt' array must contain at least one text part"),
        (None, "Missing required parameter: prompt (must be string or array of parts)"),
        ({"text": "x"}, "Missing required parameter: prompt (must be string or array of parts)"),
    ]:
        params: dict[str, Any] = {"sessionId": sid}
        if prompt is not None:
            params["prompt"] = prompt
        assert acp.error("session/prompt", params) == {"code": -32602, "message": message}
    exact = bytes(MAX_BLOB_BYTES)
    text = acp.say(sid, [{"text": "hi"}, _blob(exact, "file:///e.bin")])
    stored = Path(os.path.realpath(tmp_path)) / "uploads" / f"{hashlib.sha256(exact).hexdigest()}.bin"
    assert stored.stat().st_size == MAX_BLOB_BYTES
    assert text == f"echo: hi\n\n[Document: e.bin] {stored}"


def test_symlinked_uploads_refused(acp: AcpProcess, tmp_path: Path, opened: list[str]) -> None:
    """§4: a symlinked uploads/ is refused; nothing lands in the link target."""
    ws, target = tmp_path / "ws", tmp_path / "target"
    ws.mkdir()
    target.mkdir()
    (ws / "uploads").symlink_to(target)
    sid = acp.new_session(agentAlias="sdk", cwd=str(ws))
    opened.append(sid)
    err = acp.error("session/prompt", {"sessionId": sid, "prompt": [_blob(b"x", "file:///x.txt")]})
    assert err["code"] == -32602 and "symlink" in err["message"]
    assert list(target.iterdir()) == []
    assert acp.say(sid, "after") == "echo: after"


def test_busy_cancel_and_slot(acp: AcpProcess, cfg_dir: Path, opened: list[str]) -> None:
    """§4 -32002 before blob checks; §7 cancel mid-stream of an external agent: its own
    answer, whole, and the turn stored with what was streamed (the built-in
    agent's marker and content: tests/e2e/test_passthrough.py)."""
    sid = acp.new_session(agentAlias="sdk")
    opened.append(sid)
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "slow"})
    _, first = acp.read_until(lambda m: m.get("method") == "session/update")
    # The agent streams on while the next two requests are answered: every chunk read
    # before their answers belongs to the turn too.
    seen, busy = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "resource", "resource": {"uri": "x", "blob": "!!"}}]})
    assert busy["error"] == {"code": -32002,
                             "message": f"Session already has an active prompt turn: {sid}"}
    adapters = {p.pid for p in acp.descendants()}
    # a cancel request is answered while the prompt streams (§1 concurrency)
    during_cancel, cancel_resp = acp.call("session/cancel", {"sessionId": sid})
    assert cancel_resp["result"] == {}
    before, resp = acp.response(rid)
    streamed_msgs = [first, *seen, *during_cancel, *before]
    ups = updates(streamed_msgs, sid)
    assert all(u["sessionUpdate"] == "agent_message_chunk" for u in ups), "no marker added"
    assert resp["result"] == {"stopReason": "cancelled"}
    streamed = streamed_text(streamed_msgs, sid)
    assert streamed.startswith("s0 ")
    assert _history(cfg_dir, sid) == [("user", "slow"), ("assistant", streamed)]
    # the adapter was kept: the next turn runs on it
    assert acp.say(sid, "again") == "echo: again"
    assert adapters <= {p.pid for p in acp.descendants()}, "cancel never reaps"
    assert [r for r, _ in _history(cfg_dir, sid)] == ["user", "assistant", "user", "assistant"]


def test_cancel_idle_and_notification(acp: AcpProcess, opened: list[str]) -> None:
    """§7: cancel on an idle or unknown session → {}; as a notification, nothing."""
    sid = acp.new_session(agentAlias="sdk")
    opened.append(sid)
    assert acp.result("session/cancel", {"sessionId": sid}) == {}
    assert acp.result("session/cancel", {"session_id": "unknown"}) == {}
    # §1: a request with no session id at all is -32602 (unknown ids are {} per §7).
    assert acp.error("session/cancel", {}) == {
        "code": -32602, "message": "Missing required parameter: sessionId"}
    acp.notify("session/cancel", {})  # a notification is never answered, not even with an error
    acp.notify("session/cancel", {"sessionId": sid})
    _assert_quiet_then_marker(acp)


def test_stop_waits_for_turn(acp: AcpProcess, cfg_dir: Path) -> None:
    """§7 stop: inactive at once (-32000 for new prompts), turn finishes normally, then answered."""
    sid = acp.new_session(agentAlias="sdk")
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "brief"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    stop_id = acp.request_async("session/stop", {"sessionId": sid})
    late = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "late"})
    seen, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "end_turn"
    assert "b0 " + streamed_text(seen, sid) == "b0 b1 b2 b3 b4 "
    others = seen
    _, stop_resp = acp.response(stop_id)
    late_resp = [m for m in others if m.get("id") == late]
    if not late_resp:
        _, lr = acp.response(late)
        late_resp = [lr]
    assert late_resp[0]["error"] == {"code": -32000, "message": f"Session not found: {sid}"}
    assert stop_resp["result"] == {"sessionId": sid, "stopped": True}
    assert [r for r, _ in _history(cfg_dir, sid)] == ["user", "assistant"], "stop keeps the record"
    assert acp.error("session/stop", {"sessionId": sid})["code"] == -32000


def test_close_cancels_turn_and_keeps_record(acp: AcpProcess) -> None:
    """§7 close: cancels the running turn, answers {}, record stays listable and loadable."""
    sid = acp.new_session(agentAlias="sdk")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "kept"})
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "slow"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    close_id = acp.request_async("session/close", {"sessionId": sid})
    _, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "cancelled"
    _, close_resp = acp.response(close_id)
    assert close_resp["result"] == {}
    assert acp.error("session/prompt", {"sessionId": sid, "prompt": "x"})["code"] == -32000
    listed = {s["sessionId"] for s in acp.result("session/list", {})["sessions"]}
    assert sid in listed
    assert set(acp.result("session/resume", {"sessionId": sid})) == {"modes", "configOptions"}
    acp.result("session/close", {"sessionId": sid})


# ----------------------------------------------------------------- §8


def test_load_replays_and_resume_plan_only(acp: AcpProcess, cfg_dir: Path, tmp_path: Path) -> None:
    """§8: load replays the session's log (what the client saw) then {}; resume sends only
    the plan; already active."""
    sid = acp.new_session(agentAlias="demo", cwd=str(tmp_path))
    before_plan, plan_resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "plan"})
    plan_updates = [u for u in updates(before_plan, sid) if u["sessionUpdate"] == "plan"]
    assert plan_updates, "the demo agent's plan tool emits a plan update"
    before_hi, hi_resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "hello there"})
    err = acp.error("session/load", {"sessionId": sid})
    assert err == {"code": -32602, "message": f"Session already active: {sid}. Call session/close first."}
    acp.result("session/close", {"sessionId": sid})

    replay, resp = acp.call("session/load", {"sessionId": sid, "cwd": "/ignored"})
    assert set(resp["result"]) == {"modes", "configOptions"}
    *ups, commands = updates(replay, sid)
    assert len(ups) + 1 == len(replay), "only session/update notifications precede the load result"
    # The log — the commands the demo agent sent after session/new, then the turns —, then
    # the restored agent's commands: the agent's own updates of the restore are new events,
    # after the replayed older ones.
    assert commands["sessionUpdate"] == "available_commands_update"
    kinds = [u["sessionUpdate"] for u in ups]
    assert kinds[:2] == ["available_commands_update", "user_message_chunk"]
    assert ups[1]["content"]["text"] == "plan"
    users = [u["content"]["text"] for u in ups if u["sessionUpdate"] == "user_message_chunk"]
    assert users == ["plan", "hello there"]
    assistant = "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == "agent_message_chunk")
    assert hi_resp["result"]["content"] in assistant and plan_resp["result"]["content"] in assistant
    calls = [u for u in ups if u["sessionUpdate"] == "tool_call"]
    results = [u for u in ups if u["sessionUpdate"] == "tool_call_update"]
    assert calls and {c["toolCallId"] for c in calls} == {r["toolCallId"] for r in results}
    # The replay is the event log: each update as the client saw it live, event id and all.
    live = updates(before_plan, sid) + updates(before_hi, sid)
    assert [u for u in ups if u["sessionUpdate"] != "user_message_chunk"] == live
    # after load the session takes prompts again, in the stored workspace
    res = acp.result("session/prompt", {"sessionId": sid, "prompt": "after load"})
    assert "after load" in res["content"]
    acp.result("session/close", {"sessionId": sid})

    replay, resp = acp.call("session/resume", {"sessionId": sid})
    assert set(resp["result"]) == {"modes", "configOptions"}
    assert [u["sessionUpdate"] for u in updates(replay, sid)] == [
        "plan", "available_commands_update"]
    assert updates(replay, sid)[0]["entries"] == plan_updates[-1]["entries"]
    acp.result("session/close", {"sessionId": sid})


def test_list_and_inbound_events(acp: AcpProcess, tmp_path: Path, opened: list[str]) -> None:
    """§8: session/list (ACP shape, cwd filter); inbound session/update and session/event."""
    sid = acp.new_session(agentAlias="sdk", cwd=str(tmp_path))
    opened.append(sid)
    acp.result("session/prompt", {"sessionId": sid, "prompt": "title me"})
    listed = acp.result("session/list", {"cwd": os.path.realpath(tmp_path)})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    info = listed["sessions"][0]
    assert info["cwd"] == os.path.realpath(tmp_path) and info["title"] == "title me"
    dt.datetime.fromisoformat(info["updatedAt"].replace("Z", "+00:00"))
    link = tmp_path.parent / f"{tmp_path.name}-link"
    link.symlink_to(tmp_path)
    assert [s["sessionId"] for s in acp.result("session/list", {"cwd": str(link)})["sessions"]] \
        == [sid], "the cwd filter is compared as a real path"
    everything = acp.result("session/list", {})
    assert sid in {s["sessionId"] for s in everything["sessions"]}
    # A filter no stored workspace can match (an embedded NUL) is an empty list, not -32603.
    assert acp.result("session/list", {"cwd": "/tmp/\u0000x"}) == {"sessions": []}

    assert acp.result("session/update", {"sessionId": sid, "type": "custom"}) == \
        {"sessionId": sid, "type": "custom", "status": "processed"}
    assert acp.result("session/event", {"session_id": sid, "update": {"sessionUpdate": "x_y"}}) == \
        {"sessionId": sid, "type": "x_y", "status": "processed"}
    assert acp.result("session/event", {"sessionId": sid}) == \
        {"sessionId": sid, "type": "unknown", "status": "processed"}
    acp.notify("session/event", {"sessionId": sid, "type": "n"})
    _assert_quiet_then_marker(acp)


def test_adapter_death_mid_turn(acp: AcpProcess) -> None:
    """§4 failed turn: -32603 naming the exit; the session stays loadable, and its load
    replays the failed turn's prompt (marked failed) with what it streamed."""
    sid = acp.new_session(agentAlias="sdk")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "before death"})
    err = acp.error("session/prompt", {"sessionId": sid, "prompt": "die"})
    assert err["code"] == -32603 and "exit code 3" in err["message"]
    deadline = time.monotonic() + 30
    while acp.call("session/prompt", {"sessionId": sid, "prompt": "x"})[1].get("error", {}).get(
            "code") != -32000:
        assert time.monotonic() < deadline
    replay, resp = acp.call("session/load", {"sessionId": sid})
    assert set(resp["result"]) == {"modes", "configOptions"}
    prompts = [u for u in updates(replay, sid) if u["sessionUpdate"] == "user_message_chunk"]
    # The failed turn is replayed as the client saw it, its prompt marked with how it ended.
    assert [u["content"]["text"] for u in prompts] == ["before death", "die"]
    assert "_meta" not in prompts[0]
    assert prompts[1]["_meta"] == {"acpgate": {"stopReason": "failed"}}
    acp.result("session/close", {"sessionId": sid})


# ----------------------------------------------------------------- other processes


def test_limits(tmp_path: Path) -> None:
    """§9 / §3 / §8: -32001 at max_sessions; load checks the limit before 'already active'."""
    acp = AcpProcess(write_config(tmp_path / "cfg", max_sessions=1))
    try:
        sid = acp.new_session(agentAlias="sdk")
        assert acp.error("session/new", {"agentAlias": "sdk"}) == \
            {"code": -32001, "message": "Maximum session limit reached (1)"}
        assert acp.error("session/load", {"sessionId": sid}) == \
            {"code": -32001, "message": "Maximum session limit reached (1)"}
        acp.result("session/close", {"sessionId": sid})
        sid2 = acp.new_session(agentAlias="sdk")
        assert acp.error("session/resume", {"sessionId": sid})["code"] == -32001
        acp.result("session/stop", {"sessionId": sid2})
        assert set(acp.result("session/resume", {"sessionId": sid})) == {"modes", "configOptions"}
        assert acp.close() == 0
    finally:
        acp.kill()


def test_idle_reaper(tmp_path: Path) -> None:
    """§9: an idle session is deactivated (record kept, loadable again)."""
    acp = AcpProcess(write_config(tmp_path / "cfg", session_timeout=1))
    try:
        assert acp.result("initialize", {})["_meta"]["zeroclaw"]["sessionTimeoutSecs"] == 1
        sid = acp.new_session(agentAlias="sdk")
        acp.result("session/prompt", {"sessionId": sid, "prompt": "remember me"})
        deadline = time.monotonic() + 20
        while True:  # session/load touches nothing: "already active" until the reaper ran
            replay, resp = acp.call("session/load", {"sessionId": sid})
            if "result" in resp:
                break
            assert resp["error"]["code"] == -32602 and time.monotonic() < deadline
            time.sleep(0.3)
        assert "remember me" in [u["content"]["text"] for u in updates(replay, sid)
                                 if u["sessionUpdate"] == "user_message_chunk"]
        assert acp.close() == 0
    finally:
        acp.kill()


def test_memory_fallback(tmp_path: Path) -> None:
    """§2: store cannot be opened → in-memory sessions, no load/resume/close (the seed)."""
    cfg = write_config(tmp_path / "cfg")
    (cfg / "data").mkdir()
    (cfg / "data" / "sessions").write_text("a file where the sessions dir should be")
    acp = AcpProcess(cfg)
    try:
        res = acp.result("initialize", {"protocolVersion": 1})
        assert res["agentCapabilities"]["loadSession"] is False
        assert res["agentCapabilities"]["sessionCapabilities"] == {}
        sid = acp.new_session(agentAlias="sdk")
        assert acp.say(sid, "m") == "echo: m"
        for method in ("session/close", "session/load", "session/resume"):
            assert acp.error(method, {"sessionId": sid}) == \
                {"code": -32000, "message": f"Session not found: {sid}"}
        acp.result("session/stop", {"sessionId": sid})
        assert acp.close() == 0
    finally:
        acp.kill()


def test_no_default_agent(tmp_path: Path) -> None:
    """§3 alias chain exhausted → -32602; §2 defaultModel omitted without a default agent."""
    acp = AcpProcess(write_config(tmp_path / "cfg", default_agent=""))
    try:
        meta = acp.result("initialize", {})["_meta"]["zeroclaw"]
        assert "defaultModel" not in meta
        assert acp.error("session/new", {"agentAlias": ""}) == {
            "code": -32602,
            "message": "session/new requires `agentAlias` (alias of a configured [agents.<alias>] entry)",
        }
        assert acp.close() == 0
    finally:
        acp.kill()


def test_concurrent_restores_of_one_session(acp: AcpProcess) -> None:
    """§8: two loads of one session at once — one restores, the other is 'already active'."""
    sid = acp.new_session(agentAlias="sdk")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "twice"})
    acp.result("session/close", {"sessionId": sid})
    a = acp.request_async("session/load", {"sessionId": sid})
    b = acp.request_async("session/resume", {"sessionId": sid})
    got: dict[Any, dict[str, Any]] = {}
    while len(got) < 2:
        msg = acp.next_message()
        if msg.get("id") in (a, b) and "method" not in msg:
            got[msg["id"]] = msg
    first, second = got[a], got[b]
    outcomes = sorted(["result" in first, "result" in second])
    assert outcomes == [False, True]
    loser = first if "error" in first else second
    assert loser["error"] == {"code": -32602,
                              "message": f"Session already active: {sid}. Call session/close first."}
    assert acp.say(sid, "still one") == "echo: still one"
    acp.result("session/close", {"sessionId": sid})


def test_unusable_agent_workspace(tmp_path: Path) -> None:
    """§3: an agent workspace that cannot be created fails session/new with a clear -32603."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    cfg = write_config(tmp_path / "cfg", extra=(
        "\n[agents.broken]\nkind = \"builtin\"\nprovider = \"demo\"\nmodel = \"demo\"\n"
        f"workspace = \"{blocker}/ws\"\n"))
    acp = AcpProcess(cfg)
    try:
        err = acp.error("session/new", {"agentAlias": "broken"})
        assert err["code"] == -32603 and "workspace" in err["message"]
        assert acp.new_session(agentAlias="sdk")  # the edge carries on
        assert acp.close() == 0
    finally:
        acp.kill()
