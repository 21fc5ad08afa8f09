"""Transparent by default, against an external agent speaking ACP's newer surface.

``relay_agent.py`` (raw JSON-RPC, no SDK) advertises capabilities acpgate's schema
does not know, an auth method carrying its credential in ``_meta``, models,
extension methods and requests of its own; it logs every message it receives.
Through ``acpgate acp``:

- ``initialize`` advertises its profile (learnt by starting it when nothing is
  recorded yet; that adapter then serves the first session), less what acpgate
  cannot relay or does not know, plus acpgate's own;
- unknown session methods and ``_`` extension methods reach the session's adapter
  under its own session id and come back whole; ``session/fork`` does not (the
  edge must understand it: it serves it, with the agent's own fork inside, whose
  params and result pass whole);
- ``session/set_model`` is relayed, stored and set again on a restored session;
- session/new's and prompt's params acpgate does not read reach the agent, and
  its results come back whole; usage reported only in ``_meta.quota`` is counted;
- a cancelled turn is stored with what was streamed and replayed, marked;
- the agent's own requests and notifications reach the client for its session;
- ``session/resume`` of a session the connection holds answers at once;
- ``authenticate`` reaches the agent, its refusal comes back exactly, and every
  adapter the connection starts afterwards gets it; ``logout`` forgets it;
- prompts queue while a turn runs when the agent says it queues them (claude's
  ``_meta.claudeCode.promptQueueing``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import AcpProcess, streamed_text, updates, write_config
from tests.security.relay_agent import agent_section, received

pytestmark = pytest.mark.slow

KEY = "relay-key-0123456789"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "relay.log"


def _acp(tmp_path: Path, log: Path, key: str = "") -> AcpProcess:
    cfg = write_config(tmp_path / "cfg", default_agent="relay", max_sessions=10,
                       extra=agent_section("relay", str(log), key))
    return AcpProcess(cfg)


@pytest.fixture
def acp(tmp_path: Path, log: Path) -> Iterator[AcpProcess]:
    proc = _acp(tmp_path, log)
    yield proc
    proc.close()
    proc.kill()


def _work(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return str(work)


def test_initialize_advertises_the_agents_profile(acp: AcpProcess, log: Path,
                                                  tmp_path: Path) -> None:
    init = acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    caps = init["agentCapabilities"]
    # The agent's own where acpgate relays them; withheld where it cannot do what they ask
    # of a host (subagents needs a client opt-in acpgate does not forward) or cannot know.
    assert caps["auth"] == {"logout": {}} and caps["providers"] == {}
    assert caps["_meta"] == {"claudeCode": {"promptQueueing": True}}
    assert caps["sessionCapabilities"]["systemPrompt"] == {"mode": {}}
    assert not {"futureThing", "subagents"} & set(caps["sessionCapabilities"])
    assert caps["promptCapabilities"] == {"image": True, "embeddedContext": True}
    # What acpgate decides: its store's session methods and fork (acpgate's, for every
    # agent: the agent's own fork inside when it has one); no MCP over ACP.
    assert {"list", "delete", "resume", "close", "additionalDirectories", "fork"} <= \
        set(caps["sessionCapabilities"])
    assert caps["mcpCapabilities"] == {"http": True, "sse": False}
    assert init["authMethods"] == [{"id": "key", "name": "API key",
                                    "_meta": {"api-key": {"provider": "x"}}}]
    assert init["_meta"]["steering"] == {"supported": True}
    assert init["agentInfo"]["name"] == "acpgate" and "zeroclaw" in init["_meta"]
    # The adapter started to learn it serves the first session: one process for both.
    sid = acp.new_session(cwd=_work(tmp_path))
    pids = {m["pid"] for m in received(str(log))}
    assert len(pids) == 1, pids
    acp.result("session/close", {"sessionId": sid})


def test_session_methods_pass_through(acp: AcpProcess, log: Path, tmp_path: Path) -> None:
    new = acp.result("session/new", {"cwd": _work(tmp_path), "mcpServers": [],
                                     "systemPrompt": {"append": "be brief"},
                                     "_meta": {"client": 1, "acpgate": {"policy": "mine"}}})
    sid = new["sessionId"]
    # The agent's result whole; acpgate's addition under _meta.acpgate.
    assert new["models"]["currentModelId"] == "small" and new["modes"]["currentModeId"] == "ask"
    assert new["_meta"]["vendor"] == 1 and new["_meta"]["got"] == ["_meta", "systemPrompt"]
    assert set(new["_meta"]["acpgate"]) == {"workspaceDir"}
    got = next(m for m in received(str(log)) if m.get("method") == "session/new")
    assert got["params"]["systemPrompt"] == {"append": "be brief"}
    assert got["params"]["_meta"] == {"client": 1}  # never the client's _meta.acpgate
    own = got["params"].get("sessionId")
    assert own is None
    echoed = acp.result("_vendor/echo", {"sessionId": sid, "x": [1, 2]})
    assert echoed["sessionId"] == sid  # rewritten back
    inner = echoed["echo"]
    assert inner["x"] == [1, 2] and inner["sessionId"].startswith("own-")  # the adapter's id
    err = acp.error("_vendor/unknown", {"sessionId": sid})
    assert err == {"code": -32601, "message": "Method not found: _vendor/unknown",
                   "data": {"acpgate": {"during": "_vendor/unknown", "agent": "relay"}}}
    # session/fork creates a session: acpgate's own (its rules first), never relayed blindly.
    assert acp.error("session/fork", {"sessionId": sid, "cwd": "/"})["code"] == -32602
    assert acp.error("_acpgate/history_append", {"sessionId": sid})["code"] == -32601
    methods = [m.get("method") for m in received(str(log))]
    assert "session/fork" not in methods and "_acpgate/history_append" not in methods
    # Prompt: the client's other params reach the agent; the result comes back whole.
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "hi",
                                               "messageId": "m-1"})
    assert resp["result"] == {"stopReason": "end_turn"} and streamed_text(before) == "echo: hi"
    prompt = [m for m in received(str(log)) if m.get("method") == "session/prompt"][-1]
    assert prompt["params"]["messageId"] == "m-1"
    acp.result("session/close", {"sessionId": sid})


def test_fork_keeps_the_agents_result_and_params(acp: AcpProcess, log: Path,
                                                 tmp_path: Path) -> None:
    """session/fork is acpgate's, with the agent's own fork inside: the client's params
    acpgate does not read reach the agent's session/fork (never ``_meta.acpgate``), and its
    result comes back whole with the fork's id and acpgate's note of the parent."""
    sid = acp.new_session(cwd=_work(tmp_path))
    assert acp.result("session/set_model", {"sessionId": sid, "modelId": "large"}) == {}
    forked = acp.result("session/fork", {"sessionId": sid, "systemPrompt": {"append": "fork"},
                                         "_meta": {"client": 2, "acpgate": {"x": 1}}})
    fork = forked["sessionId"]
    assert fork != sid and forked["_meta"]["acpgate"] == {"forkedFrom": sid}
    assert forked["_meta"]["vendor"] == "fork" and forked["_meta"]["got"] == [
        "_meta", "systemPrompt"]
    assert forked["models"]["currentModelId"] == "large"  # the parent's, set again
    asked = [m for m in received(str(log)) if m.get("method") == "session/fork"]
    assert len(asked) == 1 and asked[0]["params"]["sessionId"] == forked["_meta"]["of"]
    assert asked[0]["params"]["sessionId"].startswith("own-")  # the parent's agent id
    assert asked[0]["params"]["_meta"] == {"client": 2}
    assert asked[0]["pid"] != next(m["pid"] for m in received(str(log))
                                   if m.get("method") == "session/new")  # its own adapter
    assert acp.say(fork, "model") == "model large"
    for s in (fork, sid):
        acp.result("session/close", {"sessionId": s})


def test_set_model_is_relayed_stored_and_set_again(acp: AcpProcess, log: Path,
                                                   tmp_path: Path) -> None:
    sid = acp.new_session(cwd=_work(tmp_path))
    assert acp.result("session/set_model", {"sessionId": sid, "modelId": "large"}) == {}
    err = acp.error("session/set_model", {"sessionId": sid, "modelId": "huge"})
    assert (err["code"], err["message"], err["data"]["model"]) == (-32602, "unknown model", "huge")
    assert acp.say(sid, "model") == "model large"
    acp.result("session/close", {"sessionId": sid})
    restored = acp.result("session/resume", {"sessionId": sid})
    assert restored["models"]["currentModelId"] == "large"  # set again on the new adapter
    assert restored["sessionId"] == sid  # the agent's result names it: acpgate's id
    assert acp.say(sid, "model") == "model large"
    acp.result("session/close", {"sessionId": sid})


def test_quota_usage_is_counted(acp: AcpProcess, tmp_path: Path) -> None:
    sid = acp.new_session(cwd=_work(tmp_path))
    _, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "quota"})
    assert resp["result"] == {"stopReason": "end_turn", "_meta": {"quota": {
        "token_count": {"input_tokens": 7, "output_tokens": 3}}}}
    rows = acp.result("session/list", {})["sessions"]
    usage = next(r for r in rows if r["sessionId"] == sid)["_meta"]["acpgate"]["usage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (7, 3)
    acp.result("session/close", {"sessionId": sid})


def test_cancelled_turn_is_stored_and_replayed(acp: AcpProcess, tmp_path: Path) -> None:
    sid = acp.new_session(cwd=_work(tmp_path))
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "stream 200"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    acp.notify("session/cancel", {"sessionId": sid})
    rest, resp = acp.response(rid)
    # The agent's result whole: its stop reason and its usage.
    assert resp["result"] == {"stopReason": "cancelled", "usage": {
        "inputTokens": 5, "outputTokens": 2, "totalTokens": 7}}
    streamed = "chunk 0 " + streamed_text(rest)
    acp.result("session/close", {"sessionId": sid})
    replay, loaded = acp.call("session/load", {"sessionId": sid})
    # The agent's own load result, whole: it names the session (acpgate's id, of course).
    assert loaded["result"]["sessionId"] == sid
    ups = updates(replay, sid)
    assert ups[0] == {"sessionUpdate": "user_message_chunk",
                      "content": {"type": "text", "text": "stream 200"},
                      "_meta": {"acpgate": {"stopReason": "cancelled"}}}
    assert [u["content"]["text"] for u in ups[1:]] == [streamed]
    acp.result("session/close", {"sessionId": sid})


def test_agent_requests_and_notifications_reach_the_client(acp: AcpProcess,
                                                           tmp_path: Path) -> None:
    sid = acp.new_session(cwd=_work(tmp_path))
    acp.handlers["_vendor/ask"] = lambda params: {"seen": params["sessionId"]}
    try:
        before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "ask"})
        assert streamed_text(before) == f'answer {{"seen": "{sid}"}}'
        asked = [m for m in before if m.get("method") == "_vendor/ask"]
        assert asked[0]["params"] == {"sessionId": sid, "q": 1}
        # A request naming another session is refused; nothing reaches the client.
        before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "askother"})
        assert streamed_text(before) == "error -32000"
        assert not [m for m in before if m.get("method") == "_vendor/ask"]
    finally:
        acp.handlers.clear()
    before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "notes"})
    notes = [m["params"] for m in before if m.get("method") == "_vendor/note"]
    assert notes == [{"n": "none"}, {"sessionId": sid, "n": "own"}]  # not another session's
    acp.result("session/close", {"sessionId": sid})


def test_resume_of_an_active_session_answers_at_once(acp: AcpProcess, log: Path,
                                                     tmp_path: Path) -> None:
    sid = acp.new_session(cwd=_work(tmp_path))
    again = acp.result("session/resume", {"sessionId": sid})
    # Its setup was a session/new, not the agent's own resume: no sessionId in the answer.
    assert again["models"]["currentModelId"] == "small" and "sessionId" not in again
    # The same session on the same adapter: nothing was restored.
    assert [m.get("method") for m in received(str(log))].count("session/resume") == 0
    assert acp.say(sid, "still") == "echo: still"
    # A load of it is still refused (it would replay over a live session).
    assert acp.error("session/load", {"sessionId": sid})["code"] == -32602
    acp.result("session/close", {"sessionId": sid})


def test_authenticate_reaches_the_agent_and_every_adapter(tmp_path: Path, log: Path) -> None:
    proc = _acp(tmp_path, log, KEY)
    try:
        work = _work(tmp_path)
        assert proc.result("initialize", {"protocolVersion": 1})["authMethods"][0]["id"] == "key"
        err = proc.error("session/new", {"cwd": work})
        assert (err["code"], err["message"]) == (-32000, "Authentication required")
        bad = proc.error("authenticate", {"methodId": "key", "_meta": {"api-key": "wrong"}})
        assert bad == {"code": -32000, "message": "bad key", "data": {
            "why": "key", "acpgate": {"during": "authenticate", "agent": "relay"}}}
        assert proc.result("authenticate", {"methodId": "key",
                                            "_meta": {"api-key": KEY}}) == {}
        first = proc.new_session(cwd=work)
        second = proc.new_session(cwd=work)  # a second adapter, authenticated the same way
        assert proc.say(first, "hi") == "echo: hi" and proc.say(second, "hi") == "echo: hi"
        by_pid: dict[int, list[str]] = {}
        for m in received(str(log)):
            by_pid.setdefault(m["pid"], []).append(str(m.get("method")))
        authenticated = [pid for pid, methods in by_pid.items()
                         if "session/new" in methods and "authenticate" in methods]
        assert len(authenticated) >= 2, by_pid
        assert proc.result("logout", {}) == {}
        # Logged out: a new adapter gets no credentials any more.
        assert proc.error("session/new", {"cwd": work})["message"] == "Authentication required"
        assert proc.result("providers/list", {}) == {"providers": [{"id": "main"}]}
    finally:
        proc.close()
        proc.kill()
    assert KEY not in "".join(proc.stderr)


def test_prompts_queue_when_the_agent_queues_them(acp: AcpProcess, log: Path,
                                                 tmp_path: Path) -> None:
    """The agent advertised ``_meta.claudeCode.promptQueueing``: a prompt sent while a turn
    runs waits for it (as the agent would queue it) instead of -32002."""
    sid = acp.new_session(cwd=_work(tmp_path))
    first = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "stream 5"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    second = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "next"})
    _, one = acp.response(first)
    rest, two = acp.response(second)
    assert one["result"]["stopReason"] == two["result"]["stopReason"] == "end_turn"
    assert streamed_text(rest) == "echo: next"
    prompts = [m["params"]["prompt"][0]["text"] for m in received(str(log))
               if m.get("method") == "session/prompt"]
    assert prompts == ["stream 5", "next"]  # the second only once the first had ended
    acp.result("session/close", {"sessionId": sid})


def test_builtin_cancelled_turn_keeps_the_dialect_and_is_only_logged(tmp_path: Path) -> None:
    """The built-in agent keeps SPEC §7's dialect (the marker update, ``content`` with the
    marker) and its usage; nothing of the cancelled turn is in its stored conversation
    (SPEC §7: completed turns only), while the replay — the session's event log — shows
    it as the client saw it live, the marker last."""
    cfg = write_config(tmp_path / "cfg", autonomy="full")
    proc = AcpProcess(cfg)
    try:
        sid = proc.new_session(cwd=_work(tmp_path))
        rid = proc.request_async("session/prompt", {"sessionId": sid, "prompt": "!sleep 30"})
        early, call = proc.read_until(lambda m: m.get("method") == "session/update"
                                      and m["params"]["update"]["sessionUpdate"] == "tool_call")
        proc.notify("session/cancel", {"sessionId": sid})
        live, resp = proc.response(rid)
        result = resp["result"]
        assert result["stopReason"] == "cancelled" and result["sessionId"] == sid
        assert result["content"] == \
            "[demo model] Running `sleep 30` in the shell.\n\n[turn cancelled via client]"
        assert "inputTokens" in result["usage"]
        assert updates(live, sid)[-1]["toolCallId"] == f"turn-cancelled-{sid}"
        seen = updates([*early, call, *live], sid)  # all the client got, from session/new on
        assert [u["sessionUpdate"] for u in seen[-3:]] == [
            "tool_call", "tool_call_update", "tool_call"]
        proc.result("session/close", {"sessionId": sid})
        replay, _ = proc.call("session/load", {"sessionId": sid})
        *logged, commands = updates(replay, sid)  # the restored demo agent's commands last
        assert commands["sessionUpdate"] == "available_commands_update"
        prompts = [u for u in logged if u["sessionUpdate"] == "user_message_chunk"]
        assert prompts == [{"sessionUpdate": "user_message_chunk",
                            "content": {"type": "text", "text": "!sleep 30"},
                            "_meta": {"acpgate": {"stopReason": "cancelled"}}}]
        # the log: the commands sent after session/new, the prompt, then every update
        # exactly as the client got it live, the failed tool call and the marker last
        assert logged[1] is prompts[0] and [logged[0], *logged[2:]] == seen
        assert logged[-2]["status"] == "failed"
        assert logged[-1]["toolCallId"] == f"turn-cancelled-{sid}"
        proc.result("session/close", {"sessionId": sid})
        with contextlib.closing(sqlite3.connect(cfg / "data" / "sessions" / "acp-sessions.db")) \
                as db:
            assert db.execute("SELECT COUNT(*) FROM history WHERE session_id = ?",
                              (sid,)).fetchone() == (0,)
    finally:
        proc.close()
        proc.kill()
