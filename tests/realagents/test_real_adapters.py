"""Real ACP adapters from npm behind ``acpgate acp``, their model traffic on a local fake.

One acpgate (a real subprocess, stdio) per adapter module run, driven in raw
JSON lines like an editor would: initialize, session/new, a streamed text
prompt, a tool call whose permission request is relayed to the client (in the
mode that asks: claude-agent-acp starts in ``auto``, which does not), an image
passed through as an ACP image block, set_mode and a config option relayed to
the adapter (and set again after the restore), session/fork (the
adapter's own fork where it advertises one — claude — else acpgate's), cancel,
close, and a restart of acpgate followed by session/load. The same steps run
directly against each adapter and are compared in ``test_passthrough.py``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, streamed_text, updates
from tests.realagents.adapters import ADAPTERS, RealAdapter
from tests.realagents.fake_gemini import CARRIED_OVER
from tests.realagents.fake_models import (
    HELLO,
    SLOW_TRIGGER,
    TOOL_MARKER,
    TOOL_TRIGGER,
    FakeModelServer,
)

#: An 8x8 red PNG (codex-acp 2.6 leaves out an image it cannot decode, as it did the 1x1
#: RGBA one this tier used before).
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000080000000808020000004b6d29dc0000001249444154"
    "789c63f8cfc0801561171db4120028ff3fc16eecdf610000000049454e44ae426082")).decode()
CLIENT_INFO = {"name": "acpgate-tier", "version": "1"}
#: Real adapters boot Node/Rust runtimes and their CLIs: generous waits, never asserted on.
SLOW_WAIT = 120.0

pytestmark = pytest.mark.timeout(300)


@dataclass
class Stack:
    """acpgate with one real adapter as its default agent."""

    adapter: RealAdapter
    acp: AcpProcess
    config_dir: Path
    workspace: Path
    models: FakeModelServer

    def restart(self) -> None:
        """Stop acpgate (EOF) and start a fresh one on the same config and data."""
        assert self.acp.close(SLOW_WAIT) == 0
        self.acp = AcpProcess(self.config_dir)


def _config(adapter: RealAdapter, npm_dir: Path, models: FakeModelServer, root: Path) -> Path:
    cfg = root / "cfg"
    cfg.mkdir()
    (cfg / "config.toml").write_text(
        f'[acp]\ndefault_agent = "{adapter.alias}"\nsession_timeout_secs = 120\n\n'
        + adapter.config_entry(npm_dir, models.url, root / "state"))
    return cfg


@pytest.fixture(scope="module", params=ADAPTERS, ids=[a.alias for a in ADAPTERS])
def stack(request: pytest.FixtureRequest, npm_dir: Path, model_server: FakeModelServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    adapter: RealAdapter = request.param
    if not adapter.installed(npm_dir):
        pytest.skip(f"{adapter.bin_name} is not installed in {npm_dir}")
    root = tmp_path_factory.mktemp(adapter.alias)
    workspace = root / "ws"
    workspace.mkdir()
    cfg = _config(adapter, npm_dir, model_server, root)
    s = Stack(adapter, AcpProcess(cfg), cfg, workspace, model_server)
    yield s
    s.acp.close(SLOW_WAIT)
    s.acp.kill()


def _init(acp: AcpProcess) -> dict[str, Any]:
    return acp.result("initialize", {"protocolVersion": 1, "clientInfo": CLIENT_INFO,
                                     "clientCapabilities": {}})


def _prompt(acp: AcpProcess, sid: str, prompt: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return acp.call("session/prompt", {"sessionId": sid, "prompt": prompt}, SLOW_WAIT)


def _text(messages: list[dict[str, Any]]) -> str:
    return streamed_text(messages)


_SID: dict[str, str] = {}
#: The adapter's session/new result, per alias (its ``modes`` and ``configOptions``).
_NEW: dict[str, dict[str, Any]] = {}


def test_initialize_new_and_recorded_capabilities(stack: Stack) -> None:
    """initialize (the adapter never ran: acpgate starts it to learn what it advertises) →
    session/new (on that adapter); initialize advertises the adapter's image support."""
    first = _init(stack.acp)
    assert first["protocolVersion"] == 1
    assert first["agentCapabilities"]["promptCapabilities"]["image"] is True
    res = stack.acp.call("session/new", {"cwd": str(stack.workspace), "mcpServers": []},
                         SLOW_WAIT)[1]
    assert "result" in res, res
    _SID[stack.adapter.alias] = res["result"]["sessionId"]
    _NEW[stack.adapter.alias] = res["result"]
    # The adapter's modes come back unchanged (modes/configOptions in results).
    modes = res["result"].get("modes") or {}
    assert stack.adapter.other_mode in [m["id"] for m in modes.get("availableModes", [])], res
    again = _init(stack.acp)
    assert again["agentCapabilities"]["promptCapabilities"]["image"] is True
    assert again["agentCapabilities"]["mcpCapabilities"]["http"] is True  # both take HTTP MCP


def test_prompt_streams_text(stack: Stack) -> None:
    sid = _SID[stack.adapter.alias]
    before, resp = _prompt(stack.acp, sid, [{"type": "text", "text": "hello"}])
    assert resp["result"]["stopReason"] == "end_turn", resp
    assert "".join(HELLO) in _text(before)
    # The agent's result, whole: no dialect fields; its usage (or gemini's _meta.quota).
    assert "content" not in resp["result"] and "sessionId" not in resp["result"]
    if stack.adapter.reports_usage:
        assert "usage" in resp["result"] or "quota" in resp["result"].get("_meta", {}), resp
    assert all(m["params"]["sessionId"] == sid for m in before if m.get("method") == "session/update")


def test_tool_call_with_permission_relayed(stack: Stack) -> None:
    sid = _SID[stack.adapter.alias]
    asked: list[dict[str, Any]] = []

    def allow(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        option = next(o for o in params["options"] if o["kind"] == "allow_once")
        return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}

    if stack.adapter.ask_mode:  # a mode in which it asks before running a command
        _, mode = stack.acp.call("session/set_mode", {
            "sessionId": sid, "modeId": stack.adapter.ask_mode}, SLOW_WAIT)
        assert "result" in mode, mode
    stack.acp.handlers["session/request_permission"] = allow
    try:
        before, resp = _prompt(stack.acp, sid, TOOL_TRIGGER)
    finally:
        stack.acp.handlers.clear()
    assert resp["result"]["stopReason"] == "end_turn", resp
    assert asked and asked[0]["sessionId"] == sid
    req = next(m for m in before if m.get("method") == "session/request_permission")
    assert re.match(r"^zc-out-\d+$", req["id"])
    kinds = [u["sessionUpdate"] for u in updates(before)]
    assert "tool_call_update" in kinds
    assert "tool_call" in kinds or not stack.adapter.announces_tool_calls, kinds
    assert req["params"]["toolCall"]["toolCallId"]
    assert (stack.workspace / TOOL_MARKER).read_text().strip() == "acpgate"
    assert "TOOL_DONE" in _text(before)


def _carries_image(body: Any) -> bool:
    text = str(body)
    return "'type': 'image'" in text or "'type': 'input_image'" in text \
        or ("'inlineData': {" in text and "'mimeType': 'image/png'" in text)


def test_image_block_reaches_the_model(stack: Stack) -> None:
    """The adapter advertised image support: the client's image block is passed, not dropped."""
    sid = _SID[stack.adapter.alias]
    seen = len(stack.models.requests)
    _, resp = _prompt(stack.acp, sid, [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image", "mimeType": "image/png", "data": PNG}])
    assert resp["result"]["stopReason"] == "end_turn", resp
    assert any(_carries_image(r.body) for r in stack.models.requests[seen:])


def test_set_mode(stack: Stack) -> None:
    """session/set_mode is relayed to the adapter (the restore below checks that it held)."""
    _, resp = stack.acp.call("session/set_mode", {
        "sessionId": _SID[stack.adapter.alias], "modeId": stack.adapter.other_mode}, SLOW_WAIT)
    assert "result" in resp, resp


def _select_option(result: dict[str, Any]) -> tuple[str, str] | None:
    """A select config option the adapter offered and a value other than its current one.

    Not one of category ``mode``: claude-agent-acp mirrors its modes as a config option,
    and switching that would undo the set_mode the restore test checks.
    """
    for option in result.get("configOptions") or []:
        if option.get("type") != "select" or option.get("category") == "mode":
            continue
        values = [o["value"] for o in option.get("options", []) if "value" in o]
        others = [v for v in values if v != option.get("currentValue")]
        if others:
            return option["id"], others[0]
    return None


def test_set_config_option(stack: Stack) -> None:
    """session/set_config_option is relayed; the adapter's answer carries the new value."""
    choice = _select_option(_NEW[stack.adapter.alias])
    if choice is None:
        pytest.skip(f"{stack.adapter.bin_name} offered no select config option in session/new")
    config_id, value = choice
    _, resp = stack.acp.call("session/set_config_option", {
        "sessionId": _SID[stack.adapter.alias], "configId": config_id, "value": value}, SLOW_WAIT)
    assert "result" in resp, resp
    current = {o["id"]: o.get("currentValue") for o in resp["result"].get("configOptions", [])}
    assert current.get(config_id) == value, resp


def _asked_with(models: FakeModelServer, since: int, text: str) -> list[str]:
    """The model requests since ``since`` that carry ``text``, as text."""
    return [str(r.body) for r in models.requests[since:] if text in str(r.body)]


def test_fork(stack: Stack) -> None:
    """session/fork of the session so far: the fork's agent knows the parent's turns (the
    adapter's own fork when it advertises ``sessionCapabilities.fork``, in the fork's own
    adapter process; else acpgate's carry-over), and the two go their own ways."""
    sid = _SID[stack.adapter.alias]
    forked = stack.acp.call("session/fork", {"sessionId": sid, "cwd": str(stack.workspace),
                                             "mcpServers": []}, SLOW_WAIT)[1]
    assert "result" in forked, forked
    fork = forked["result"]["sessionId"]
    # The agent's own result, whole, and acpgate's note of the parent.
    assert fork != sid and forked["result"]["_meta"]["acpgate"] == {"forkedFrom": sid}
    assert forked["result"]["modes"]["currentModeId"] == stack.adapter.other_mode, forked
    native = stack.adapter.forks_itself  # it advertises session/fork
    seen = len(stack.models.requests)
    # A carried-over transcript shares the prompt's message, so the fake model may see the
    # parent's tool trigger there and run the tool again: allow it.
    stack.acp.handlers["session/request_permission"] = lambda params: {"outcome": {
        "outcome": "selected", "optionId": next(o["optionId"] for o in params["options"]
                                                if o["kind"] == "allow_once")}}
    try:
        _, resp = _prompt(stack.acp, fork, "hello from the fork")
    finally:
        stack.acp.handlers.clear()
    assert resp["result"]["stopReason"] == "end_turn", resp
    asked = _asked_with(stack.models, seen, "hello from the fork")
    assert any(TOOL_TRIGGER in body for body in asked), asked  # the parent's turns
    carried = any(CARRIED_OVER in body for body in asked)
    assert carried is not native, asked
    seen = len(stack.models.requests)
    streamed, resp = _prompt(stack.acp, sid, "hello from the parent")
    assert resp["result"]["stopReason"] == "end_turn", resp
    assert "".join(HELLO) in _text(streamed)
    asked = _asked_with(stack.models, seen, "hello from the parent")
    assert asked and not any("hello from the fork" in body for body in asked)
    rows = {r["sessionId"]: r for r in stack.acp.result("session/list", {})["sessions"]}
    assert rows[fork]["_meta"]["acpgate"]["forkedFrom"] == sid
    assert stack.acp.result("session/close", {"sessionId": fork}) == {}


def test_cancel(stack: Stack) -> None:
    sid = _SID[stack.adapter.alias]
    rid = stack.acp.request_async("session/prompt", {"sessionId": sid, "prompt": SLOW_TRIGGER})
    stack.acp.read_until(lambda m: m.get("method") == "session/update"
                         and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                         and "tick" in str(m["params"]["update"]["content"]), SLOW_WAIT)
    stack.acp.notify("session/cancel", {"sessionId": sid})
    _, resp = stack.acp.response(rid, SLOW_WAIT)
    assert resp["result"]["stopReason"] == "cancelled", resp


def test_close_restart_load(stack: Stack) -> None:
    sid = _SID[stack.adapter.alias]
    assert stack.acp.result("session/close", {"sessionId": sid}) == {}
    stack.restart()
    replay, resp = stack.acp.call("session/load", {"sessionId": sid, "cwd": str(stack.workspace),
                                                   "mcpServers": []}, SLOW_WAIT)
    assert "result" in resp, resp
    # The mode chosen before the restart holds again (the adapter's own restore, or the edge
    # setting the stored mode again on a fresh adapter session).
    assert resp["result"]["modes"]["currentModeId"] == stack.adapter.other_mode, resp
    users = [u["content"]["text"] for u in updates(replay) if u["sessionUpdate"] == "user_message_chunk"]
    assert users[0] == "hello"
    seen = len(stack.models.requests)
    streamed, again = _prompt(stack.acp, sid, "hello again")
    assert again["result"]["stopReason"] == "end_turn", again
    assert "".join(HELLO) in _text(streamed)
    # The adapter restored its own session (session/resume or load under its stored id):
    # the model sees the earlier turns as the adapter kept them, not acpgate's carry-over.
    # gemini-cli 0.61's own load fails or loses them at times: then acpgate carries them over.
    asked = [str(r.body) for r in stack.models.requests[seen:] if "hello again" in str(r.body)]
    assert any(TOOL_TRIGGER in body for body in asked)
    carried = any(CARRIED_OVER in body for body in asked)
    assert not carried or not stack.adapter.restores_itself, asked
    assert stack.acp.result("session/close", {"sessionId": sid}) == {}
