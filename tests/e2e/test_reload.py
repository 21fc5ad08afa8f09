"""`acpgate acp` (stdio, services embedded) reloads its config on SIGHUP instead of
ending: an agent added to config.toml is resolvable by the next session/new, and
`acpgate config set` reaches the process through its endpoint record."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from .harness import ACPGATE, WAIT, AcpProcess, child_env, write_config

NEW_AGENT = '\n[agents.fresh]\nkind = "builtin"\nprovider = "demo"\nmodel = "demo"\n'


def reloaded(acp: AcpProcess, count: int) -> list[dict[str, Any]]:
    """Wait for the ``count``-th ``config_reloaded`` line on the process's stderr."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        lines = []
        for raw in list(acp.stderr):
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "config_reloaded":
                lines.append(event)
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"no reload logged: {''.join(acp.stderr)[-2000:]}")


def test_acp_stdio_reloads_on_sighup_and_config_set(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    acp = AcpProcess(cfg, env={**child_env(), "ACPGATE_LOG_LEVEL": "info"})
    try:
        acp.result("initialize", {"protocolVersion": 1})
        assert "Unknown agent" in acp.error("session/new", {"agent": "fresh"})["message"]
        with (cfg / "config.toml").open("a", encoding="utf-8") as fh:
            fh.write(NEW_AGENT)
        acp.proc.send_signal(signal.SIGHUP)
        assert reloaded(acp, 1)[-1]["applied"] == ["agents.fresh"]
        sid = acp.new_session(agent="fresh")
        assert acp.say(sid, "hello")
        assert acp.proc.poll() is None

        out = subprocess.run([*ACPGATE, "config", "set", "agents.fresh.model", "demo2",
                              "--config-dir", str(cfg)], env=child_env(), check=True,
                             capture_output=True, text=True).stdout
        assert f"applied by acp[{acp.proc.pid}]: agents.fresh.model" in out, out
        assert reloaded(acp, 2)[-1]["applied"] == ["agents.fresh.model"]
        assert acp.proc.poll() is None
    finally:
        assert acp.close() == 0
