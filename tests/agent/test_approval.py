"""The approval gate through session/request_permission: every outcome (SPEC §6, §12)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.common.config import AutonomySection
from services.common.jsonrpc import JsonRpcError
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say


def shell_then_done() -> ScriptedProvider:
    return ScriptedProvider([call("shell", {"command": "touch approved && echo approved"}),
                             say("done")])


def answer(option: str | None):
    async def responder(method: str, params: dict[str, Any]) -> Any:
        if option is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option}}
    return responder


async def test_allow_once_runs_tool_and_request_shape_is_exact(tmp_path: Path, ws: Path) -> None:
    provider = shell_then_done()
    async with running_agent(make_config(tmp_path), provider, answer("allow-once")) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "run it")
    assert result["stopReason"] == "end_turn"
    ((method, params),) = c.requests
    assert method == "session/request_permission"
    tc = params["toolCall"]
    assert tc["toolCallId"].startswith("approval-") and len(tc["toolCallId"]) == 9 + 36
    assert params == {
        "sessionId": sid,
        "options": [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
                    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}],
        "toolCall": {"toolCallId": tc["toolCallId"], "title": "Approve shell?", "kind": "execute",
                     "status": "pending",
                     "rawInput": {"tool": "shell",
                                  "summary": "touch approved && echo approved",
                                  "arguments": {"command": "touch approved && echo approved"}},
                     "content": [{"type": "content",
                                  "content": {"type": "text",
                                              "text": "touch approved && echo approved"}}]},
    }
    (update,) = c.of("tool_call_update")
    assert update["status"] == "completed" and "approved" in update["rawOutput"]
    # The tool_call was announced before approval was asked.
    assert c.kinds().index("tool_call") < c.kinds().index("tool_call_update")


async def test_allow_always_is_remembered_for_the_session(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("shell", {"command": "echo 1"}), say("a"),
                                 call("shell", {"command": "echo 2"}, call_id="c2"), say("b")])
    async with running_agent(make_config(tmp_path), provider, answer("allow-always")) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "one")
        await c.prompt(sid, "two")
        assert len(c.requests) == 1
        sid2 = await c.new_session(ws)  # another session asks again
        provider.script = [call("shell", {"command": "echo 3"}, call_id="c3"), say("c")]
        await c.prompt(sid2, "three")
        assert len(c.requests) == 2
    assert [u["status"] for u in c.of("tool_call_update")] == ["completed"] * 3


async def test_reject_is_fed_back_to_model(tmp_path: Path, ws: Path) -> None:
    provider = shell_then_done()
    async with running_agent(make_config(tmp_path), provider, answer("reject-once")) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "run it")
    assert result["stopReason"] == "end_turn"
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed"
    assert update["rawOutput"] == "The user denied the `shell` call."
    assert provider.calls[1][1][-1].text == "The user denied the `shell` call."
    assert not (ws / "approved").exists()  # nothing ran


async def test_cancelled_outcome_denies(tmp_path: Path, ws: Path) -> None:
    provider = shell_then_done()
    async with running_agent(make_config(tmp_path), provider, answer(None)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "run it")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "dismissed" in update["rawOutput"]


async def test_timeout_denies(tmp_path: Path, ws: Path) -> None:
    never = asyncio.Event()

    async def silent(method: str, params: dict[str, Any]) -> Any:
        await never.wait()

    provider = shell_then_done()
    async with running_agent(make_config(tmp_path, timeout=1), provider, silent) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "run it")
    assert result["stopReason"] == "end_turn"
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed"
    assert "no answer within 1 seconds" in update["rawOutput"]


async def test_client_error_denies(tmp_path: Path, ws: Path) -> None:
    async def broken(method: str, params: dict[str, Any]) -> Any:
        raise JsonRpcError(-32603, "client blew up")

    async with running_agent(make_config(tmp_path), shell_then_done(), broken) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "run it")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "denied automatically" in update["rawOutput"]


async def test_full_and_auto_approve_do_not_ask(tmp_path: Path, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    async with running_agent(make_config(tmp_path, autonomy="full"), shell_then_done()) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "x")
        assert c.requests == []
    provider = ScriptedProvider([call("file_read", {"path": "a.txt"}), say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "x")
        assert c.requests == []  # file_read is in the default auto_approve
        assert c.of("tool_call_update")[0]["rawOutput"] == "A"


async def test_always_ask_beats_auto_approve_and_allow_always(tmp_path: Path, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    cfg = make_config(tmp_path)
    cfg = type(cfg)(config_dir=cfg.config_dir, acp=cfg.acp, agents=cfg.agents,
                    autonomy=AutonomySection(level="supervised", always_ask=("file_read",)))
    provider = ScriptedProvider([call("file_read", {"path": "a.txt"}), say("ok"),
                                 call("file_read", {"path": "a.txt"}, call_id="c2"), say("ok")])
    async with running_agent(cfg, provider, answer("allow-always")) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "x")
        await c.prompt(sid, "y")
    assert len(c.requests) == 2
    # SPEC §6 fixes the request's kind; the tool's own kind is on its tool_call update.
    assert c.requests[0][1]["toolCall"]["kind"] == "execute"
    assert c.of("tool_call")[0]["kind"] == "read"
    assert c.requests[0][1]["toolCall"]["rawInput"] == {"tool": "file_read", "summary": "a.txt",
                                                        "arguments": {"path": "a.txt"}}


@pytest.mark.parametrize(("tool", "args", "own_kind"), [
    ("file_write", {"path": "n.txt", "content": "x"}, "edit"),
    ("shell", {"command": "true"}, "execute"),
])
async def test_permission_kind_is_execute_whatever_the_tool_kind(
        tmp_path: Path, ws: Path, tool: str, args: dict[str, Any], own_kind: str) -> None:
    """SPEC §6 gives the request literally: ``"kind":"execute"``."""
    (ws / "n.txt").write_text("n")
    provider = ScriptedProvider([call(tool, args), say("ok")])
    async with running_agent(make_config(tmp_path), provider, answer("reject-once")) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "go")
    ((method, params),) = c.requests
    assert method == "session/request_permission"
    assert params["toolCall"]["kind"] == "execute"
    assert c.of("tool_call")[0]["kind"] == own_kind


async def test_approval_shows_every_command_line_and_the_full_arguments(tmp_path: Path,
                                                                        ws: Path) -> None:
    """A second command after a newline, or past 200 characters, is never out of sight."""
    command = "echo harmless" + " " * 300 + "\nrm -rf \"$HOME/important\""
    provider = ScriptedProvider([call("shell", {"command": command, "timeout_secs": 5}),
                                 say("ok")])
    async with running_agent(make_config(tmp_path), provider, answer("reject-once")) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "go")
    ((_, params),) = c.requests
    raw = params["toolCall"]["rawInput"]
    assert raw["arguments"] == {"command": command, "timeout_secs": 5}
    summary = raw["summary"]
    assert summary == command.replace("\n", "⏎")  # spaces kept, the newline visible
    assert "⏎rm -rf" in summary and "\n" not in summary
    assert params["toolCall"]["content"][0]["content"]["text"] == summary


def cancelled_because(reason: Any):
    async def responder(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "cancelled"}, "_meta": {"acpgate": {"reason": reason}}}
    return responder


@pytest.mark.parametrize(("reason", "sentence"), [
    ("timeout", "The `shell` call was denied automatically: the user gave no answer within "
                "30 seconds."),
    ("client_error", "The `shell` call was denied automatically: the approval request could "
                     "not be answered (the client failed or left)."),
    ("client_gone", "The `shell` call was denied automatically: the approval request could "
                    "not be answered (the client failed or left)."),
    # Unknown or malformed reasons: only the plain user dismissal is claimed.
    ("something-new", "The `shell` call was denied: the user dismissed the approval request."),
    (7, "The `shell` call was denied: the user dismissed the approval request."),
])
async def test_edge_cancel_reason_is_attributed(tmp_path: Path, ws: Path, reason: Any,
                                                sentence: str) -> None:
    """The edge answers ``cancelled`` for a silent/failed/gone client and says why."""
    provider = shell_then_done()
    async with running_agent(make_config(tmp_path), provider, cancelled_because(reason)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "run it")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and update["rawOutput"] == sentence
    assert provider.calls[1][1][-1].text == sentence  # what the model is told
    assert not (ws / "approved").exists()


async def test_timeout_names_the_seconds_the_edge_waited(tmp_path: Path, ws: Path) -> None:
    """The edge's timeout (``_meta.acpgate.timeoutSecs``) is stated, not the agent's own (30)."""
    async def edge_timed_out(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "cancelled"},
                "_meta": {"acpgate": {"reason": "timeout", "timeoutSecs": 5}}}

    provider = shell_then_done()
    async with running_agent(make_config(tmp_path), provider, edge_timed_out) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "run it")
    (update,) = c.of("tool_call_update")
    assert update["rawOutput"] == ("The `shell` call was denied automatically: the user gave "
                                   "no answer within 5 seconds.")


async def test_plain_cancelled_outcome_is_the_users_dismissal(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path), shell_then_done(), answer(None)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "run it")
    (update,) = c.of("tool_call_update")
    assert update["rawOutput"] == ("The `shell` call was denied: the user dismissed the "
                                   "approval request.")
