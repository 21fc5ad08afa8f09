"""``acpgate doctor`` against real processes.

A running ``acpgate serve`` (its port, services and store all ok), the same
install stopped (port free, no service: the store file checked read-only), a
damaged store file (the repair command named), a broken
config (the key named, nothing else checked), an external agent whose command
is missing, an unset API-key variable, a port another process holds, and a
service key others may read: each a failing check with why and what to do,
and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.common.service_key import service_key_path
from tests.e2e.harness import ACPGATE, child_env
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def doctor(config_dir: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """``acpgate doctor --json``: exit code and {check name: check}."""
    done = subprocess.run([*ACPGATE, "doctor", "--json", "--config-dir", str(config_dir)],
                          capture_output=True, text=True, env=env or child_env(), timeout=120)
    report = json.loads(done.stdout)
    assert report["ok"] == (done.returncode == 0), done.stderr
    return done.returncode, {c["name"]: c for c in report["checks"]}


def services_checks(checks: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for name, c in checks.items() if name.startswith("services")]


async def test_a_running_install_then_the_same_stopped(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        code, checks = await asyncio.to_thread(doctor, gw.config_dir, gw.env())
        assert code == 0, checks
        assert checks["config"]["status"] == "ok"
        assert checks["permissions"]["status"] == "ok"
        port = checks["port"]
        assert port["status"] == "ok" and f"acpgate serve (pid {gw.proc.pid}" in port["why"]
        (services,) = services_checks(checks)
        assert services["status"] == "ok" and services["name"] == f"services serve[{gw.proc.pid}]"
        assert checks["store"]["status"] == "ok" and "sqlite" in checks["store"]["why"]
        assert checks["agent attacker"]["status"] == "ok"
        assert checks["node"]["status"] == "ok"
        assert checks["landlock"]["status"] in ("ok", "warn")
        config_dir, env = gw.config_dir, gw.env()
        # Each of serve's processes said what it serves where, in the install's log file.
        log = gw.data_dir / "logs" / "acpgate.log"
        startups = {e["process"]: e for e in map(json.loads, log.read_text().splitlines())
                    if e["event"] == "startup"}
        assert set(startups) == {"serve", "session", "lifecycle", "edge"}
        assert startups["serve"]["pid"] == gw.proc.pid
        assert startups["edge"]["gateway"] == f"ws://127.0.0.1:{gw.port}/acp"
        assert startups["session"]["address"].endswith("/run/session.sock")
    code, checks = await asyncio.to_thread(doctor, config_dir, env)
    assert code == 0, checks
    assert checks["port"]["status"] == "ok" and "is free" in checks["port"]["why"]
    (services,) = services_checks(checks)
    assert services["status"] == "ok" and "none runs" in services["why"]
    store = checks["store"]
    assert store["status"] == "ok" and "read-only check" in store["why"], store


def test_a_damaged_store_fails_with_the_repair_command(tmp_path: Path) -> None:
    db = tmp_path / "data" / "sessions" / "acp-sessions.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8000)
    code, checks = doctor(tmp_path)
    store = checks["store"]
    assert code == 1 and store["status"] == "fail", store
    assert str(db) in store["why"] and "refuses to start" in store["why"]
    assert f"acpgate store repair --config-dir {tmp_path}" in store["fix"]
    db.unlink()
    code, checks = doctor(tmp_path)
    assert checks["store"]["status"] == "ok" and "no store yet" in checks["store"]["why"]


def test_a_broken_config_names_the_key_and_stops_there(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[acp]\nmax_sessions = "many"\n')
    code, checks = doctor(tmp_path)
    assert code == 1 and list(checks) == ["config"]
    config = checks["config"]
    assert config["status"] == "fail" and "[acp] max_sessions" in config["why"]
    assert "acpgate config set" in config["fix"]


def test_missing_commands_keys_a_taken_port_and_open_files_fail(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "config.toml").write_text(f"""
[acp]
default_agent = "ghost"
[gateway]
port = {port}
[agents.ghost]
kind = "acp"
command = "acpgate-no-such-adapter"
[agents.claude]
kind = "acp"
command = "claude-agent-acp"
[agents.keyed]
kind = "builtin"
provider = "openai"
model = "m"
api_key_env = "ACPGATE_DOCTOR_UNSET_KEY"
""")
        data = tmp_path / "data"
        key = service_key_path(data)
        key.parent.mkdir(parents=True)
        key.write_text("k" * 64)
        os.chmod(data, 0o700)
        os.chmod(key.parent, 0o700)
        os.chmod(key, 0o644)  # left readable by a careless copy
        env = child_env()
        env.pop("ACPGATE_DOCTOR_UNSET_KEY", None)
        env["PATH"] = os.path.dirname(sys.executable)  # no node, no adapters
        code, checks = doctor(tmp_path, env)
    assert code == 1
    assert "default agent" not in checks  # ghost is complete, only not installed
    ghost = checks["agent ghost"]
    assert ghost["status"] == "fail" and "'acpgate-no-such-adapter' is not found" in ghost["why"]
    claude = checks["agent claude"]
    assert claude["status"] == "fail" and "@agentclientprotocol/claude-agent-acp" in claude["fix"]
    keyed = checks["key keyed"]
    assert keyed["status"] == "fail" and "ACPGATE_DOCTOR_UNSET_KEY" in keyed["why"]
    assert checks["key claude"]["status"] == "warn"  # no ANTHROPIC_API_KEY reaches it
    assert checks["node"]["status"] == "fail" and "claude" in checks["node"]["why"]
    assert checks["port"]["status"] == "fail"
    assert f"port {port} on 127.0.0.1 is in use by pid {os.getpid()}" in checks["port"]["why"]
    perms = checks["permissions"]
    assert perms["status"] == "fail" and "service.key (644)" in perms["why"]
    assert key.stat().st_mode & 0o777 == 0o644, "doctor only looks"


def test_the_text_report_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[acp]\ndefault_agent = "y"\n'
                                          '[agents.x]\nkind = "acp"\ncommand = "nope-nope"\n')
    done = subprocess.run([*ACPGATE, "doctor", "--config-dir", str(tmp_path)],
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    (failed,) = [i for i, line in enumerate(lines) if line.startswith("fail  agent x")]
    assert "→" in lines[failed + 1] and "agents.x.command" in lines[failed + 1]
    assert any(line.startswith("fail  default agent") and "'y'" in line for line in lines)
    assert lines[-1].endswith("2 failed")


def test_a_bridge_token_others_may_read_fails(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("")
    os.chmod(tmp_path / "config.toml", 0o600)
    token = tmp_path / "acp-bridge-token"
    token.write_text("acpg_secret\n")
    os.chmod(token, 0o644)
    code, checks = doctor(tmp_path)
    perms = checks["permissions"]
    assert code == 1 and perms["status"] == "fail" and "acp-bridge-token (644)" in perms["why"]
    assert "acpg_secret" not in json.dumps(checks)
    os.chmod(token, 0o600)
    _, checks = doctor(tmp_path)
    assert checks["permissions"]["status"] == "ok"

