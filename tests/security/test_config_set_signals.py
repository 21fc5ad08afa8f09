"""`acpgate config set` signals the running acpgate processes of the install, found
through ``<data dir>/run/endpoints``. A record there is only a claim: one forged to point
at another process of the user (with that process's real start time), or a stale one
whose PID now belongs to something else, must never get that process signalled — a
SIGHUP ends most programs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from acpgate.ops.reload_notify import is_acpgate_command
from services.common.config import ensure_default_config, load_config
from tests.e2e.harness import ACPGATE, child_env


def forge(endpoints: Path, pid: int, created: float, process: str = "serve") -> None:
    record = {"process": process, "pid": pid, "created": created,
              "session_addr": "unix:/nowhere", "lifecycle_addr": "unix:/nowhere",
              "gateway": "", "version": "", "started_at": 0.0}
    (endpoints / f"{pid}.json").write_text(json.dumps(record), encoding="utf-8")


def test_config_set_never_signals_a_forged_or_stale_endpoint(tmp_path: Path) -> None:
    config_dir = tmp_path / "cfg"
    ensure_default_config(config_dir)
    endpoints = load_config(config_dir).data_dir / "run" / "endpoints"
    endpoints.mkdir(parents=True)
    victims = [
        subprocess.Popen(["sleep", "600"]),
        # Names acpgate serve in its arguments, but runs other code.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                          "acpgate", "serve"]),
        subprocess.Popen(["sleep", "600"]),
    ]
    try:
        starts = [psutil.Process(v.pid).create_time() for v in victims]
        forge(endpoints, victims[0].pid, starts[0])                # forged, live
        forge(endpoints, victims[1].pid, starts[1])                # forged, acpgate-looking
        forge(endpoints, victims[2].pid, starts[2] - 3600.0)       # stale: PID reused
        out = subprocess.run([*ACPGATE, "config", "set", "acp.max_sessions", "5",
                              "--config-dir", str(config_dir)], env=child_env(),
                             capture_output=True, text=True, check=True).stdout
        assert [v.poll() for v in victims] == [None, None, None], out
        assert "no acpgate process of this install is running" in out
        assert f"not signalled (stale or not acpgate): serve[{victims[0].pid}]" in out
    finally:
        for victim in victims:
            victim.kill()
            victim.wait()


def test_only_an_acpgate_command_line_of_the_recorded_kind_counts() -> None:
    assert is_acpgate_command([sys.executable, "-I", "-m", "acpgate", "serve"], "serve")
    assert is_acpgate_command(["/venv/bin/python3", "/venv/bin/acpgate", "acp"], "acp")
    assert not is_acpgate_command([sys.executable, "-m", "acpgate", "acp"], "serve")
    assert not is_acpgate_command([sys.executable, "-c", "x", "acpgate", "serve"], "serve")
    assert not is_acpgate_command([sys.executable, "-c", "-m", "acpgate", "serve"], "serve")
    assert not is_acpgate_command(["sleep", "600", "acpgate", "serve"], "serve")
