"""The running processes' endpoints in the data dir: what ps and doctor reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from acpgate.ops.endpoints import live_endpoints, register, unregister


def test_only_live_processes_count_and_the_next_writer_sweeps_the_rest(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder = tmp_path / "run" / "endpoints"
    folder.mkdir(parents=True)
    stale = {"process": "acp", "pid": gone.pid, "created": 1.0, "session_addr": "unix:/x/s",
             "lifecycle_addr": "unix:/x/l"}
    (folder / f"{gone.pid}.json").write_text(json.dumps(stale))
    # This very PID, but born at another time: a recycled PID is another process.
    reused = {**stale, "pid": os.getpid(), "created": 1.0}
    (folder / "reused.json").write_text(json.dumps(reused))
    (folder / "garbage.json").write_text("{not json")
    assert live_endpoints(tmp_path) == []
    path = register(tmp_path, "serve", "unix:/a/s", "unix:/a/l", gateway="ws://h:1/acp",
                    version="9")
    (me,) = live_endpoints(tmp_path)
    assert (me.process, me.pid, me.gateway, me.name) == ("serve", os.getpid(), "ws://h:1/acp",
                                                         f"serve[{os.getpid()}]")
    assert sorted(p.name for p in folder.iterdir()) == [path.name]
    assert (path.stat().st_mode & 0o777, folder.stat().st_mode & 0o777) == (0o600, 0o700)
    unregister(path)
    assert live_endpoints(tmp_path) == []
