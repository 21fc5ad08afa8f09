"""The edge's glibc malloc options (services.common.malloc_tuning, bench/PROFILE.md).

Each check runs in a fresh interpreter: mallopt changes the whole process, and
the dynamic mmap threshold these tests probe is per process state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from services.common.malloc_tuning import EDGE_MALLOC, tune_malloc

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

#: Frees a 1 MiB block (glibc's dynamic threshold then rises to 1 MiB), then asks for
#: 100 KiB and prints how many blocks are mmapped while it is held.
_PROBE = """
import ctypes, json, sys
from services.common.malloc_tuning import tune_malloc
applied = tune_malloc() if sys.argv[1] == "tuned" else {}
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MI2
libc.free(libc.malloc(1 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(100 * 1024)
print(json.dumps({"applied": applied, "mmapped": libc.mallinfo2().hblks - before}))
libc.free(block)
"""


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _probe(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env=_clean_env(),
                         capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_tuned_large_blocks_stay_their_own_mapping() -> None:
    # Control: glibc's default moves the threshold up after the 1 MiB free, so 100 KiB
    # comes out of the heap (and its space is kept resident after it is freed).
    assert _probe("default")["mmapped"] == 0
    tuned = _probe("tuned")
    assert tuned["applied"] == {"MALLOC_MMAP_THRESHOLD_": 64 * 1024, "MALLOC_ARENA_MAX": 2}
    assert tuned["mmapped"] == 1


def test_an_operators_glibc_variable_wins() -> None:
    applied = tune_malloc(EDGE_MALLOC, environ={"MALLOC_ARENA_MAX": "4",
                                                "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert applied == {}


def test_the_edge_process_tunes_malloc_at_start(tmp_path: Path) -> None:
    """``acpgate edge`` (what serve and docker compose run) applies the options itself."""
    env = _clean_env()
    env["ACPGATE_LOG_LEVEL"] = "info"
    # Services that never answer: the edge logs its start, then waits for their health.
    env["ACPGATE_services__session_addr"] = f"unix:{tmp_path}/none-session.sock"
    env["ACPGATE_services__lifecycle_addr"] = f"unix:{tmp_path}/none-lifecycle.sock"
    proc = subprocess.Popen([sys.executable, "-m", "acpgate", "edge", "--config-dir",
                             str(tmp_path / "cfg")], env=env, cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    found: dict[str, object] | None = None
    watchdog = threading.Timer(60, proc.kill)  # a silent edge ends the read below
    watchdog.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if '"malloc_tuned"' in line:
                found = json.loads(line)
                break
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    assert found is not None, "the edge never logged malloc_tuned"
    assert found["options"] == {"MALLOC_MMAP_THRESHOLD_": 64 * 1024, "MALLOC_ARENA_MAX": 2}
