"""The demo model's slash commands: advertised after setup, `/help`, `/shell` through approval;
a real model's agent advertises none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.agent.providers.demo_commands import COMMANDS
from tests.agent.harness import ScriptedProvider, make_config, running_agent, say
from tests.golden import validate

NAMES = ["shell", "read", "write", "ask", "plan", "escalate", "deliver", "help"]


def _advertised(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u["update"] for u in updates
            if u["update"]["sessionUpdate"] == "available_commands_update"]


async def test_commands_are_advertised_after_new_resume_and_load(tmp_path: Path,
                                                                 ws: Path) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws)
        await c.wait_until(lambda: len(_advertised(c.updates)) == 1)
        (update,) = _advertised(c.updates)
        assert c.updates[0]["sessionId"] == sid
        assert [cmd["name"] for cmd in update["availableCommands"]] == NAMES
        shell = update["availableCommands"][0]
        assert shell["input"] == {"hint": "command to run, e.g. ls"}
        assert "permission" in shell["description"]
        plan = update["availableCommands"][NAMES.index("plan")]
        assert "input" not in plan  # a command without input says none
        validate("SessionNotification", c.updates[0])
        await c.call("session/resume", {"sessionId": sid, "cwd": str(ws)})
        await c.wait_until(lambda: len(_advertised(c.updates)) == 2)
        await c.call("session/load", {"sessionId": sid, "cwd": str(ws)})
        await c.wait_until(lambda: len(_advertised(c.updates)) == 3)


async def test_help_lists_every_command_with_an_example(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "/help")
    assert result["stopReason"] == "end_turn"
    assert not c.of("tool_call")
    text = c.text()
    for command in COMMANDS:
        assert f"`/{command.name}`" in text and command.description in text
    assert "Example: `/shell ls`" in text and "Example: `/read README.md`" in text


async def test_slash_shell_makes_a_tool_call_and_asks_permission(tmp_path: Path,
                                                                 ws: Path) -> None:
    async with running_agent(make_config(tmp_path, autonomy="supervised")) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "/shell echo hi")
    assert result["stopReason"] == "end_turn"
    (tool_call,) = c.of("tool_call")
    assert tool_call["rawInput"] == {"command": "echo hi"}
    ((method, params),) = c.requests
    assert method == "session/request_permission" and params["sessionId"] == sid
    (done,) = c.of("tool_call_update")
    assert done["status"] == "completed" and "hi" in done["rawOutput"]


async def test_other_slash_forms_and_bad_input(tmp_path: Path, ws: Path) -> None:
    (ws / "a.txt").write_text("file body")
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "/read a.txt")
        assert c.of("tool_call")[-1]["rawInput"] == {"path": "a.txt"}
        await c.prompt(sid, "/shell")  # no input: the usage, no tool call
        assert "`/shell` needs command to run" in c.text()
        await c.prompt(sid, "/nosuch thing")
        assert "`/nosuch` is not a command of the demo model" in c.text()
        await c.prompt(sid, "/etc/hosts")  # a path, not a command: the plain reply
        assert "You said: /etc/hosts" in c.text()
    assert len(c.of("tool_call")) == 1


async def test_plain_reply_tells_a_newcomer_what_to_try(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "hello")
    text = c.text()
    assert "You said: hello" in text and "/shell ls" in text and "/help" in text
    assert "only echo" not in text


async def test_a_real_model_advertises_no_commands(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([say("/help is just text to me")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "/help")
        await c.call("session/load", {"sessionId": sid, "cwd": str(ws)})
    assert result["stopReason"] == "end_turn"
    assert not _advertised(c.updates)
    # The prompt reached the model as it was typed.
    assert provider.calls[0][1][-1].text == "/help"
