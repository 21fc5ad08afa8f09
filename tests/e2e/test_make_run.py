"""``make run`` is the README's quick start: stdout carries the protocol from its first byte.

An editor (or a script piping frames in) reads stdout as JSON-RPC; ``make`` echoing the
command line there would be the first "frame". Run as a new user would, with a fresh
``HOME`` (the first run writes its embedded defaults).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None or not (ROOT / ".venv").exists(),
                                reason="needs make and the clone's .venv (make install)")


def test_make_run_writes_only_frames_to_stdout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACPGATE_", "MAKE"))}
    env["HOME"] = str(tmp_path)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}}
    done = subprocess.run(["make", "run"], cwd=ROOT, env=env,
                          input=json.dumps(init) + "\n", capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines, done.stderr
    first = json.loads(lines[0])
    assert first["id"] == 1 and first["result"]["protocolVersion"] == 1, lines[0]
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in lines)
    assert (tmp_path / ".acpgate" / "config.toml").exists()
