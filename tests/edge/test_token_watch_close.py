"""``TokenWatch.close`` while a read runs on another thread (a caller cancelled at
shutdown leaves its ``to_thread`` read running) neither crashes nor leaks.

Closing an ``sqlite3`` connection under a running statement is a segmentation fault, so
the race runs in a child process and the test reads its exit status.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from services.edge.tokens import TokenWatch

REPO = Path(__file__).resolve().parents[2]

_RACE = textwrap.dedent("""
    import sqlite3, sys, threading
    from pathlib import Path
    from services.edge.tokens import TokenWatch
    db = Path(sys.argv[1])
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE tokens (token_id TEXT, revoked_at INTEGER)")
    c.executemany("INSERT INTO tokens VALUES (?, NULL)", [(f"t{i}",) for i in range(2000)])
    c.commit()
    watch = TokenWatch(db)
    done = threading.Event()
    reads = 0
    def reader():
        global reads
        while not done.is_set():
            watch._version = None  # read the whole table every time
            assert watch.active_ids_if_changed() in (None, {f"t{i}" for i in range(2000)})
            reads += 1
    thread = threading.Thread(target=reader)
    thread.start()
    for _ in range(400_000):
        watch.close()
    done.set()
    thread.join()
    watch.close()
    assert watch._conn is None, "closed at the end"
    print("reads", reads)
""")


def test_close_during_a_read_on_another_thread(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _RACE, str(tmp_path / "tokens.db")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert int(proc.stdout.split()[1]) > 0, "the reader ran beside the closes"


def test_a_closed_watch_reads_again(tmp_path: Path) -> None:
    watch = TokenWatch(tmp_path / "missing.db")
    assert watch.active_ids_if_changed() == set()  # no store yet: no active token
    watch.close()
    assert watch.active_ids_if_changed() is None
