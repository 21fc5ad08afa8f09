"""``acpgate ps`` against a real ``acpgate serve`` and a real ``acpgate acp``.

Two live sessions of one gateway token on the built-in agent (the local fake
model server), and one of an editor's ``acpgate acp`` on the same config dir:
``acpgate ps --json`` lists all three with their agent, their owner by the
token's label (never the token), their process trees (PIDs that exist, RSS
above 0) and their adapter logs by session id; it sees a turn that waits for
the client's permission answer, then idle again; ``--leases`` shows the warm
adapters too; a session whose adapter is killed disappears from it. Nothing is
read from the databases: the CLI asks the services.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.harness import ACPGATE, AcpProcess, child_env
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ALLOW = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}


async def ps(gw: Gateway, *args: str) -> dict[str, Any]:
    """``acpgate ps --json`` as the operator runs it."""
    code, out, err = await gw.cli("ps", "--json", *args)
    assert code == 0, err
    return dict(json.loads(out))


def sessions_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["session_id"]: s for s in report["sessions"]}


async def until(gw: Gateway, check: Callable[[dict[str, Any]], bool], what: str,
                *args: str) -> dict[str, Any]:
    """``acpgate ps`` again until ``check`` holds of its report (no timed assertion: a
    bounded number of looks)."""
    for _ in range(300):
        report = await ps(gw, *args)
        if check(report):
            return report
        await asyncio.sleep(0.1)
    raise AssertionError(f"acpgate ps never showed {what}: {report}")


def assert_tree(session: dict[str, Any]) -> list[int]:
    """The session's lease is verified and its processes live, with memory; their PIDs."""
    lease = session["lease"]
    assert lease is not None and lease["verified"], session
    roles = [p["role"] for p in lease["processes"]]
    assert roles[:2] == ["wrapper", "adapter"], roles
    for process in lease["processes"]:
        assert psutil.pid_exists(process["pid"]), process
        assert process["rss_bytes"] > 0, process
    assert lease["rss_bytes"] > 0
    assert Path(session["log"]).is_symlink()
    assert f"serves session {session['session_id']}" in Path(session["log"]).read_text()
    return [p["pid"] for p in lease["processes"]]


async def test_ps_shows_every_live_session_its_processes_and_what_it_does(
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running_gateway(tmp_path / "gw", autonomy="supervised") as gw:
        token = await gw.token("laptop")
        ws = await gw.connect(token)
        client = RawClient(ws)  # answers nothing by itself: the permission waits
        a = (await client.result("session/new", {"cwd": str(work)}))["sessionId"]
        b = (await client.result("session/new", {"cwd": str(work)}))["sessionId"]
        await client.result("session/prompt", {"sessionId": a, "prompt": "hello"})
        editor = AcpProcess(gw.config_dir)
        try:
            local = await asyncio.to_thread(editor.new_session, cwd=str(work))
            report = await until(gw, lambda r: {a, b, local} <= set(sessions_of(r)),
                                 "all three sessions")
            found = sessions_of(report)
            serve_name = f"serve[{gw.proc.pid}]"
            assert {v["name"] for v in report["services"]} >= {
                serve_name, f"acp[{editor.proc.pid}]"}
            for sid in (a, b):
                s = found[sid]
                assert (s["agent"], s["owner"], s["served_by"]) == ("attacker", "laptop",
                                                                    serve_name)
                assert s["state"] in ("idle", "setting-up"), s
                assert_tree(s)
            assert found[a]["title"] == "hello"
            assert found[local]["owner"] == "local"
            assert found[local]["served_by"] == f"acp[{editor.proc.pid}]"
            assert_tree(found[local])
            assert token.secret not in json.dumps(report)

            # A turn that waits for the client's answer is "waiting", then idle again.
            rid = await client.send("session/prompt", {"sessionId": b,
                                                       "prompt": "shell echo from-b"})
            turn = asyncio.create_task(client.until_response(rid))
            waiting = await until(gw, lambda r: sessions_of(r).get(b, {}).get("state")
                                  == "waiting", "the permission wait")
            assert sessions_of(waiting)[b]["waiting_requests"] == 1
            for _ in range(100):
                if client.requests:
                    break
                await asyncio.sleep(0.05)
            (asked,) = client.requests
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": ALLOW}))
            _, done = await asyncio.wait_for(turn, 60)
            assert done["result"]["stopReason"] == "end_turn", done
            await until(gw, lambda r: sessions_of(r)[b]["state"] == "idle", "b idle again")

            # --leases: every live lease, the warm adapters too.
            leases = (await ps(gw, "--leases"))["leases"]
            assert {x["state"] for x in leases} >= {"open", "warm"}
            assert {x["session_id"] for x in leases} >= {a, b, local}

            # A killed session's adapter: the session is gone from ps.
            adapter = found[a]["lease"]["adapter_pid"]
            os.kill(adapter, signal.SIGKILL)
            report = await until(gw, lambda r: a not in sessions_of(r), "a gone")
            assert {b, local} <= set(sessions_of(report))
            assert all(x["session_id"] != a for x in (await ps(gw, "--leases"))["leases"])

            code, text, err = await gw.cli("ps")
            assert code == 0, err
            assert b in text and local in text and a not in text
            assert "PID" in text and "adapter" in text and "laptop" in text
        finally:
            assert await asyncio.to_thread(editor.close) == 0
        await ws.close()


def test_ps_with_nothing_running_exits_1(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("")
    for args in (["ps"], ["ps", "--json"]):
        done = subprocess.run([*ACPGATE, *args, "--config-dir", str(tmp_path)],
                              capture_output=True, text=True, env=child_env(), timeout=120)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
    assert "no acpgate service runs" in subprocess.run(
        [*ACPGATE, "ps", "--config-dir", str(tmp_path)], capture_output=True, text=True,
        env=child_env(), timeout=120).stdout
