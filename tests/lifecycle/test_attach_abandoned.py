"""A channel closed before anyone waited for its adapter's start leaves no loose error.

A spawn given up between starting the wrapper and reading its start report (the
lease closed meanwhile: ``launch.LaunchSteps.complete``) retires the channel;
the report pipe then ends and the channel's ``started`` future fails with
``SpawnFailed``. Nobody will wait for it any more, so that failure must not be
left for the garbage collector to print ("Future exception was never retrieved"
on acpgate's stderr as it exits: tests/e2e/test_clean_exits.py, which met it
under load). The process that owns the channel runs in a subprocess here, so
its exit — and what it prints then — is real.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.harness import REPO, child_env

#: A wrapper that is gone without reporting the adapter's start; the channel closed.
ABANDONED = """
import asyncio, os, sys
from pathlib import Path
from services.lifecycle.attach.channel import AdapterChannel

async def main() -> None:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "pass", stdin=in_r, stdout=out_w)
    os.close(in_r)
    os.close(out_w)
    report = asyncio.StreamReader()
    report.feed_eof()
    channel = AdapterChannel("lease-abandoned", process, report, Path(sys.argv[1]),
                             stdin_fd=in_w, stdout_fd=out_r)
    await process.wait()
    await channel.aclose()
    assert channel.started.done()
    print("closed")

asyncio.run(main())
"""


def test_a_start_nobody_waits_for_fails_quietly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", ABANDONED, str(tmp_path / "stderr.log")],
                          capture_output=True, text=True, env=child_env(), cwd=str(REPO),
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "closed", done
    assert "never retrieved" not in done.stderr, done.stderr
