"""session/cancel during a long shell command: the command's whole process group goes away."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil

from services.agent.turn import CANCELLED_TOOL_OUTPUT
from services.common.protocol import CANCEL_MARKER
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say

MARKER = "sleep 37"


def live_group_members(pgid: int) -> list[int]:
    """PIDs still in process group ``pgid`` that are not zombies."""
    out = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def find_shell() -> psutil.Process | None:
    for child in psutil.Process().children(recursive=True):
        try:
            if MARKER in " ".join(child.cmdline()) and child.name() == "sh":
                return child
        except psutil.Error:
            continue
    return None


async def test_cancel_kills_running_shell_group(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    command = f"{MARKER} & {MARKER}; echo never"
    provider = ScriptedProvider([call("shell", {"command": command}), say("unreachable")])
    async with running_agent(make_config(tmp_path, autonomy="full"), provider) as c:
        sid = await c.new_session(ws)
        running = asyncio.create_task(c.prompt(sid, "go"))
        await c.wait_until(lambda: bool(c.of("tool_call")))
        shell: psutil.Process | None = None
        pgid = -1
        for _ in range(250):
            shell = shell or await asyncio.to_thread(find_shell)
            if shell is not None:
                pgid = os.getpgid(shell.pid)
                if len(await asyncio.to_thread(live_group_members, pgid)) >= 3:
                    break  # sh + both sleeps
            await asyncio.sleep(0.02)
        assert shell is not None and pgid == shell.pid  # its own process group
        assert pgid != os.getpgid(0)
        await c.peer.notify("session/cancel", {"sessionId": sid})  # a notification, as the edge
        result = await asyncio.wait_for(running, 10)
        assert result["stopReason"] == "cancelled"
        assert result["usage"]["inputTokens"] >= 0
        assert await asyncio.to_thread(live_group_members, pgid) == []
        (closed,) = c.of("tool_call_update")
        assert closed["status"] == "failed" and "Cancelled" in closed["rawOutput"]
        assert c.kinds()[-1] == "tool_call_update"  # nothing after the cancel
        assert len(provider.calls) == 1  # the model was not called again
        # The session stays usable; the cancelled turn stays in its context as far as it
        # went, marked, as the edge stores it and seeds it again.
        provider.script = [say("fresh")]
        assert (await c.prompt(sid, "again"))["stopReason"] == "end_turn"
        assert [(m.role, m.text) for m in provider.calls[1][1]] == [
            ("user", "go"), ("assistant", ""), ("tool", CANCELLED_TOOL_OUTPUT),
            ("assistant", CANCEL_MARKER), ("user", "again")]


async def test_shell_timeout_kills_group_and_reports(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    provider = ScriptedProvider([call("shell", {"command": f"echo start; {MARKER}",
                                                "timeout_secs": 1}), say("ok")])
    async with running_agent(make_config(tmp_path, autonomy="full"), provider) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "go")
    assert result["stopReason"] == "end_turn"
    (closed,) = c.of("tool_call_update")
    assert closed["status"] == "failed"
    assert "timed out after 1 s" in closed["rawOutput"] and "start" in closed["rawOutput"]
    assert await asyncio.to_thread(find_shell) is None


async def test_cancel_while_waiting_for_approval_and_close_during_turn(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    asked = asyncio.Event()
    never = asyncio.Event()

    async def hold(method: str, params: dict) -> object:
        asked.set()
        await never.wait()
        return None

    provider = ScriptedProvider([call("shell", {"command": "touch ran"}), say("x")])
    async with running_agent(make_config(tmp_path), provider, hold) as c:
        sid = await c.new_session(ws)
        running = asyncio.create_task(c.prompt(sid, "go"))
        await asyncio.wait_for(asked.wait(), 10)
        await c.peer.notify("session/cancel", {"sessionId": sid})
        assert (await asyncio.wait_for(running, 10))["stopReason"] == "cancelled"
        assert not (ws / "ran").exists()
        assert c.of("tool_call_update")[-1]["status"] == "failed"

        asked.clear()
        provider.script = [call("shell", {"command": "touch ran"}, call_id="c2"), say("x")]
        running = asyncio.create_task(c.prompt(sid, "again"))
        await asyncio.wait_for(asked.wait(), 10)
        assert await c.call("session/close", {"sessionId": sid}) == {}
        assert (await asyncio.wait_for(running, 10))["stopReason"] == "cancelled"
        assert not (ws / "ran").exists()
