"""Agent-to-agent sessions end to end: `acpgate acp`, a built-in parent on the fake
model issuing the session tools, a child on another alias (the SDK test agent, kind "acp").

The parent spawns the child, sends to it, reads its history and status, lists sessions;
the child's permission request reaches the human through the parent's connection,
labelled; cancelling the parent cancels the child's turn but keeps the child; closing
the parent reaps the child's processes (verified through its lease).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.agent.fake_http import Recorded, Reply
from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply, tool_reply
from tests.e2e.harness import AcpProcess, gone, listed_lineage, updates, write_config

pytestmark = pytest.mark.slow

Step = Callable[[list[str]], Reply]


@pytest.fixture(autouse=True)
def _child_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    ws.mkdir()
    return Path(os.path.realpath(ws))


class Script:
    """The parent's model: each step turns the tool outputs sent so far into the next reply."""

    def __init__(self, *steps: Step) -> None:
        self._steps = list(steps)
        self._lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply:
        outputs = [str(m["content"]) for m in request.body["messages"] if m["role"] == "tool"]
        with self._lock:
            step = self._steps.pop(0) if self._steps else None
        return step(outputs) if step is not None else text_reply("(the script is over)")


def spawned(outputs: list[str]) -> str:
    """The session id of the first session a sessions_spawn output reported."""
    for text in outputs:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("agent") == "sdk" and "cwd" in value:
            return str(value["sessionId"])
    raise AssertionError(f"no spawn output among {outputs}")


def tool_outputs(messages: list[dict[str, Any]], sid: str) -> dict[str, str]:
    """rawOutput of each finished tool call of session ``sid``, by tool name."""
    return {u["name"]: u["rawOutput"] for u in updates(messages, sid)
            if u["sessionUpdate"] == "tool_call_update"}


def child_of(params: dict[str, Any]) -> str:
    """The ``_meta.acpgate.childSessionId`` of a relayed request ("" for the parent's own)."""
    return str(((params.get("_meta") or {}).get("acpgate") or {}).get("childSessionId") or "")


def start(tmp_path: Path, model: ModelServer) -> AcpProcess:
    cfg = write_config(tmp_path / "cfg", default_agent="boss", autonomy="supervised",
                       extra=agent_entry("boss", model))
    return AcpProcess(cfg)


def lease_pids(cfg: Path, session_key: str) -> tuple[str, list[int]]:
    """The state of the session's lease and its live process tree (root first)."""
    with sqlite3.connect(cfg / "data" / "lifecycle" / "leases.db") as conn:
        state, root = conn.execute(
            "SELECT state, root_pid FROM leases WHERE session_key = ? ORDER BY started_at DESC",
            (session_key,)).fetchone()
    try:
        tree = [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
    except psutil.NoSuchProcess:
        tree = []
    return state, tree


def row(cfg: Path, sid: str) -> dict[str, Any]:
    with sqlite3.connect(cfg / "data" / "sessions" / "acp-sessions.db") as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()
    return dict(found)


def test_spawn_send_history_status_list_and_close_reaps_the_child(tmp_path: Path,
                                                                  workspace: Path) -> None:
    script = Script(
        lambda o: tool_reply(("sessions_spawn", {"agent": "sdk", "prompt": "perm",
                                                 "label": "helper"})),
        lambda o: tool_reply(("sessions_send", {"sessionId": spawned(o), "message": "second"})),
        lambda o: tool_reply(("sessions_history", {"sessionId": spawned(o)}),
                             ("session_status", {"sessionId": spawned(o)}),
                             ("sessions_list", {})),
        lambda o: text_reply("all done"),
    )
    asked: list[dict[str, Any]] = []

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}

    with ModelServer([], script) as model:
        acp = start(tmp_path, model)
        try:
            acp.handlers["session/request_permission"] = answer
            psid = acp.new_session(cwd=str(workspace))
            parent_key = f"agent:boss:acp:{psid}"
            before, resp = acp.call("session/prompt", {"sessionId": psid, "prompt": "delegate"})
            assert resp["result"]["stopReason"] == "end_turn", resp
            assert resp["result"]["content"] == "all done"
            out = tool_outputs(before, psid)
            spawn = json.loads(out["sessions_spawn"])
            cid = spawn["sessionId"]
            assert spawn == {"sessionId": cid, "agent": "sdk", "cwd": str(workspace),
                             "status": "completed", "stopReason": "end_turn",
                             "reply": "permission: yes"}
            assert json.loads(out["sessions_send"]) == {
                "sessionId": cid, "agent": "sdk", "status": "completed",
                "stopReason": "end_turn", "reply": "echo: second"}

            # The child's permission request came through the parent's connection, labelled;
            # the parent's own (supervised) approvals for spawn and send came unlabelled.
            relayed = [p for p in asked if child_of(p)]
            assert len(relayed) == 1
            assert relayed[0]["sessionId"] == psid and child_of(relayed[0]) == cid
            assert relayed[0]["_meta"]["acpgate"]["agent"] == "sdk"
            assert relayed[0]["toolCall"]["title"] == f"[sdk · session {cid}] sdk tool"
            own = [p["toolCall"]["rawInput"]["tool"] for p in asked if not child_of(p)]
            assert own == ["sessions_spawn", "sessions_send"]
            assert updates(before, cid) == [], "a hosted child's stream goes nowhere"

            history = json.loads(out["sessions_history"])
            said = [(i["role"], i.get("text")) for i in history["items"]
                    if i["role"] in ("user", "assistant")]
            assert said == [("user", "perm"), ("assistant", "permission: yes"),
                            ("user", "second"), ("assistant", "echo: second")]
            status = json.loads(out["session_status"])
            assert {k: status[k] for k in ("sessionId", "agent", "state", "busy", "leaseState",
                                           "owner", "parentSessionId", "spawnedBy", "title")} \
                == {"sessionId": cid, "agent": "sdk", "state": "idle", "busy": False,
                    "leaseState": "open", "owner": parent_key, "parentSessionId": psid,
                    "spawnedBy": parent_key, "title": "helper"}
            listed = {r["sessionId"]: r for r in json.loads(out["sessions_list"])["sessions"]}
            assert listed[psid]["you"] is True and listed[psid]["state"] == "active"
            assert listed[cid]["parentSessionId"] == psid and listed[cid]["spawnedByYou"]

            stored = row(acp.config_dir, cid)
            assert (stored["agent_alias"], stored["spawned_by"], stored["parent_session_key"],
                    stored["owner_session_key"], stored["workspace_dir"], stored["title"]) == (
                "sdk", parent_key, parent_key, parent_key, str(workspace), "helper")

            # What the user sees in session/list after the spawn (the operator: all rows).
            acp_rows = {r["sessionId"]: r for r in acp.result("session/list", {})["sessions"]}
            metas = listed_lineage(list(acp_rows.values()))
            assert metas[psid] == {"agent": "boss"}
            assert metas[cid] == {
                "agent": "sdk", "parentSessionId": psid, "spawnedBy": parent_key}
            assert acp_rows[cid]["title"] == "helper"

            child_key = f"agent:sdk:acp:{cid}"
            state, pids = lease_pids(acp.config_dir, child_key)
            assert state == "open" and len(pids) >= 2, "wrapper and SDK agent are running"
            assert acp.result("session/close", {"sessionId": psid}) == {}
            assert gone(pids), "closing the parent left the child's processes alive"
            assert lease_pids(acp.config_dir, child_key)[0] in ("closed", "lost")
            assert row(acp.config_dir, cid)["state"] == "inactive"
        finally:
            assert acp.close() == 0
            acp.kill()


def test_cancel_of_the_parent_cancels_the_child_turn_and_keeps_the_child(
        tmp_path: Path, workspace: Path) -> None:
    script = Script(
        lambda o: tool_reply(("sessions_spawn", {"agent": "sdk", "prompt": "hello"})),
        lambda o: text_reply("spawned"),
        lambda o: tool_reply(("sessions_send", {"sessionId": spawned(o), "message": "perm"})),
        # (the cancelled turn asks the model nothing more)
        lambda o: tool_reply(("session_status", {"sessionId": spawned(o)}),
                             ("sessions_history", {"sessionId": spawned(o)})),
        lambda o: text_reply("checked"),
    )

    def answer(params: dict[str, Any]) -> dict[str, Any] | None:
        if child_of(params):
            return None  # the human has not decided yet when the parent is cancelled
        return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

    with ModelServer([], script) as model:
        acp = start(tmp_path, model)
        try:
            acp.handlers["session/request_permission"] = answer
            psid = acp.new_session(cwd=str(workspace))
            first = acp.result("session/prompt", {"sessionId": psid, "prompt": "start one"})
            assert first["content"] == "spawned"
            rid = acp.request_async("session/prompt", {"sessionId": psid, "prompt": "ask it"})
            # The child's turn is running for sure once its permission request arrives.
            _, ask = acp.read_until(lambda m: m.get("method") == "session/request_permission"
                                    and bool(child_of(m["params"])))
            cid = child_of(ask["params"])
            acp.notify("session/cancel", {"sessionId": psid})
            _, resp = acp.response(rid)
            assert resp["result"]["stopReason"] == "cancelled"

            before, resp = acp.call("session/prompt", {"sessionId": psid, "prompt": "check"})
            assert resp["result"]["content"] == "checked"
            out = tool_outputs(before, psid)
            status = json.loads(out["session_status"])
            assert (status["state"], status["busy"], status["leaseState"]) == (
                "idle", False, "open"), "the child's turn ended, the child stayed"
            items = json.loads(out["sessions_history"])["items"]
            assert [(i["role"], i.get("text")) for i in items[:3]] == [
                ("user", "hello"), ("assistant", "echo: hello"), ("user", "perm")]
            # The child's turn is stored as its agent ended it: this one answered
            # its cancelled question and ended the turn itself (end_turn).
            assert ("assistant", "permission: cancelled") in [
                (i["role"], i.get("text")) for i in items]
            assert [i.get("status") for i in items if i["role"] == "user"] == [None, None]
            state, pids = lease_pids(acp.config_dir, f"agent:sdk:acp:{cid}")
            assert state == "open" and pids
        finally:
            assert acp.close() == 0
            acp.kill()


def test_a_child_asks_the_parents_human_under_the_parents_autonomy(tmp_path: Path,
                                                                   workspace: Path) -> None:
    """A child of a supervised parent on an agent configured `full` runs supervised: its
    shell command asks — through the parent's connection, labelled — instead of running;
    and still asks when the child is resumed on its own after the parent closed, where
    session/set_mode cannot lift it to `full` either."""
    script = Script(
        lambda o: tool_reply(("sessions_spawn", {"agent": "worker", "prompt": "!echo hi"})),
        lambda o: text_reply("asked"),
    )
    asked: list[dict[str, Any]] = []

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        choice = "reject-once" if child_of(params) else "allow-once"
        return {"outcome": {"outcome": "selected", "optionId": choice}}

    with ModelServer([], script) as model:
        worker = '\n[agents.worker]\nkind = "builtin"\nprovider = "demo"\nmodel = "demo"\n' \
                 'autonomy = "full"\n'
        cfg = write_config(tmp_path / "cfg", default_agent="boss", autonomy="supervised",
                           extra=agent_entry("boss", model) + worker)
        acp = AcpProcess(cfg)
        try:
            acp.handlers["session/request_permission"] = answer
            psid = acp.new_session(cwd=str(workspace))
            before, resp = acp.call("session/prompt", {"sessionId": psid, "prompt": "go"})
            assert resp["result"]["content"] == "asked"
            spawn = json.loads(tool_outputs(before, psid)["sessions_spawn"])
            cid = spawn["sessionId"]
            relayed = [p for p in asked if child_of(p)]
            assert len(relayed) == 1, asked
            assert relayed[0]["sessionId"] == psid
            assert relayed[0]["_meta"]["acpgate"] == {"childSessionId": cid, "agent": "worker"}
            assert relayed[0]["toolCall"]["title"] == f"[worker · session {cid}] Approve shell?"
            assert relayed[0]["toolCall"]["rawInput"]["tool"] == "shell"
            assert "denied" in spawn["reply"].lower() or "reject" in spawn["reply"].lower(), spawn

            # Restored on its own later (the parent closed), the child is still capped.
            asked.clear()
            assert acp.result("session/close", {"sessionId": psid}) == {}
            modes = acp.result("session/resume", {"sessionId": cid})["modes"]
            # Its modes stop at the parent's level; a client cannot set it higher either.
            assert modes["currentModeId"] == "supervised"
            assert [m["id"] for m in modes["availableModes"]] == ["readonly", "supervised"]
            refused = acp.error("session/set_mode", {"sessionId": cid, "modeId": "full"})
            assert refused["code"] == -32602, refused
            acp.result("session/prompt", {"sessionId": cid, "prompt": "!echo hi"})
            assert [(p["sessionId"], p["toolCall"]["rawInput"]["tool"]) for p in asked] == [
                (cid, "shell")], "a restored child ran with its alias's own autonomy"
        finally:
            assert acp.close() == 0
            acp.kill()


def test_startup_reap_covers_a_childs_lease_and_the_child_outlives_a_restart(
        tmp_path: Path, workspace: Path) -> None:
    """acpgate dies (SIGKILL): the child's lease is left open like any other; the next start
    reaps it; the stored child is brought up again by the parent's next send."""
    script = Script(
        lambda o: tool_reply(("sessions_spawn", {"agent": "sdk", "prompt": "first"})),
        lambda o: text_reply("spawned"),
        lambda o: tool_reply(("sessions_send", {"sessionId": spawned(o), "message": "again"})),
        lambda o: text_reply("sent"),
    )
    with ModelServer([], script) as model:
        first = start(tmp_path, model)
        first.handlers["session/request_permission"] = lambda p: {
            "outcome": {"outcome": "selected", "optionId": "allow-once"}}
        try:
            psid = first.new_session(cwd=str(workspace))
            before, resp = first.call("session/prompt", {"sessionId": psid, "prompt": "go"})
            assert resp["result"]["content"] == "spawned"
            cid = json.loads(tool_outputs(before, psid)["sessions_spawn"])["sessionId"]
            child_key = f"agent:sdk:acp:{cid}"
            state, pids = lease_pids(first.config_dir, child_key)
            assert state == "open" and pids
        finally:
            first.kill()
        assert gone(pids), "the wrapper kills its adapter when the lifecycle service dies"
        assert lease_pids(first.config_dir, child_key)[0] == "open", "nobody closed it"

        second = AcpProcess(first.config_dir)
        second.handlers = first.handlers
        try:
            second.result("initialize", {"protocolVersion": 1})  # serving: the reap ran
            assert lease_pids(second.config_dir, child_key)[0] in ("closed", "lost")
            assert set(second.result("session/resume", {"sessionId": psid})) == {
                "modes", "configOptions"}
            before, resp = second.call("session/prompt", {"sessionId": psid, "prompt": "more"})
            assert resp["result"]["content"] == "sent", resp
            assert json.loads(tool_outputs(before, psid)["sessions_send"])["reply"] == \
                "echo: again"
            state, pids = lease_pids(second.config_dir, child_key)
            assert state == "open" and pids, "a new lease serves the restored child"
        finally:
            assert second.close() == 0
            second.kill()


def test_a_childs_url_elicitation_and_its_completion_reach_the_parents_human(
        tmp_path: Path, workspace: Path) -> None:
    """A hosted child's ``elicitation/create`` reaches the parent's client labelled, and
    the child's ``elicitation/complete`` for it follows through the same connection."""
    script = Script(
        lambda o: tool_reply(("sessions_spawn", {"agent": "sdk", "prompt": "elicit-url"})),
        lambda o: text_reply("signed in"),
    )
    with ModelServer([], script) as model:
        acp = start(tmp_path, model)
        try:
            acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {
                "elicitation": {"form": {}, "url": {}}}})
            acp.handlers["elicitation/create"] = lambda p: {"action": "accept"}
            acp.handlers["session/request_permission"] = lambda p: {  # the spawn itself
                "outcome": {"outcome": "selected", "optionId": "allow-once"}}
            psid = acp.new_session(cwd=str(workspace))
            before, resp = acp.call("session/prompt", {"sessionId": psid, "prompt": "sign in"})
            assert resp["result"]["content"] == "signed in", resp
            cid = json.loads(tool_outputs(before, psid)["sessions_spawn"])["sessionId"]
            methods = [m.get("method") for m in before
                       if m.get("method", "").startswith("elicitation/")]
            assert methods == ["elicitation/create", "elicitation/complete"], methods
            (asked,) = [m for m in before if m.get("method") == "elicitation/create"]
            assert asked["params"]["sessionId"] == psid
            assert asked["params"]["message"] == f"[sdk · session {cid}] Sign in"
            assert child_of(asked["params"]) == cid
            (done,) = [m for m in before if m.get("method") == "elicitation/complete"]
            assert done["params"] == {"elicitationId": "el-1"} and "id" not in done
        finally:
            assert acp.close() == 0
            acp.kill()
