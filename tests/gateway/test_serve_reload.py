"""`acpgate serve` reloads its config on SIGHUP and after `acpgate config set`, in every
child, as a real process tree: a new agent is resolvable, a limit changes, an invalid file
keeps the running config, a restart-only key is named as such, and serve lives on."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from .stack import RawClient, select
from .wsfixtures import free_port, mint, start_serve, wait_healthy, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PROCESSES = ("serve", "session", "lifecycle", "edge")
NEW_AGENT = '\n[agents.new]\nkind = "builtin"\nprovider = "demo"\nmodel = "demo"\n'


async def events(log: Path, name: str) -> list[dict[str, Any]]:
    out = []
    for line in (await asyncio.to_thread(log.read_text)).splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == name:
            out.append(event)
    return out


async def reloads_seen(log: Path, count: int) -> dict[str, dict[str, Any]]:
    """Wait until every process logged its ``count``-th ``config_reloaded``; the last of each."""
    for _ in range(1200):
        seen: dict[str, list[dict[str, Any]]] = {}
        for event in await events(log, "config_reloaded"):
            seen.setdefault(event["process"], []).append(event)
        if all(len(seen.get(p, [])) >= count for p in PROCESSES):
            return {p: seen[p][-1] for p in PROCESSES}
        await asyncio.sleep(0.05)
    raise AssertionError(f"not every process reloaded {count} times")


async def config_set(config_dir: Path, key: str, value: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "acpgate", "config", "set", key, value,
        "--config-dir", str(config_dir), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_sighup_and_config_set_reload_serve_and_its_children(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port)
    _, secret = mint(cfg)
    log = tmp_path / "serve.log"
    proc = await start_serve(cfg.config_dir, log)
    try:
        await wait_healthy(port, proc)
        ws = await connect(f"ws://127.0.0.1:{port}/acp", proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"})
        client = RawClient(ws, select("allow-once"))
        _, refused = await client.call("session/new", {"agent": "new"})
        assert "Unknown agent" in refused["error"]["message"]

        # A new agent, appended by hand: resolvable for the next session/new after SIGHUP.
        with cfg.config_file.open("a", encoding="utf-8") as fh:
            fh.write(NEW_AGENT)
        proc.send_signal(signal.SIGHUP)
        last = await reloads_seen(log, 1)
        assert all(e["applied"] == ["agents.new"] for e in last.values()), last
        sid = (await client.result("session/new", {"agent": "new"}))["sessionId"]
        assert await client.say(sid, "hello")
        assert proc.returncode is None

        # An invalid file: logged with its section, the running config stays, serve lives.
        good = cfg.config_file.read_text(encoding="utf-8")
        cfg.config_file.write_text(good + "\n[bogus]\nx = 1\n", encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        for _ in range(1200):
            if await events(log, "config_reload_refused"):
                break
            await asyncio.sleep(0.05)
        refusal = (await events(log, "config_reload_refused"))[0]
        assert refusal["process"] == "serve" and "[bogus]" in refusal["error"]
        assert proc.returncode is None
        cfg.config_file.write_text(good, encoding="utf-8")  # (the built-in agent reads it too)
        other = (await client.result("session/new", {"agent": "new"}))["sessionId"]

        # A limit, through `config set`: a token's share set to two is full with two
        # sessions; raised to three, a third session starts.
        out = await config_set(cfg.config_dir, "acp.max_sessions_per_token", "2")
        assert f"applied by serve[{proc.pid}]: acp.max_sessions_per_token" in out, out
        await reloads_seen(log, 2)
        _, full = await client.call("session/new", {"agent": "new"})
        assert full["error"]["code"] == -32001, full
        out = await config_set(cfg.config_dir, "acp.max_sessions_per_token", "3")
        assert f"applied by serve[{proc.pid}]: acp.max_sessions_per_token" in out, out
        await reloads_seen(log, 3)
        third = (await client.result("session/new", {"agent": "new"}))["sessionId"]
        assert len({sid, other, third}) == 3

        # A key that needs a restart: reported by config set and in every process's line.
        out = await config_set(cfg.config_dir, "gateway.ping_interval_secs", "7")
        assert f"needs a restart of serve[{proc.pid}] to take effect: " \
               "gateway.ping_interval_secs" in out, out
        last = await reloads_seen(log, 4)
        assert all(e["restart_needed"] == ["gateway.ping_interval_secs"]
                   for e in last.values()), last
        assert proc.returncode is None
        await ws.close()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 90) == 0
