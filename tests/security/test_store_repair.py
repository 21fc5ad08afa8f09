"""``acpgate store repair`` follows nothing and writes nowhere but the data dir's store.

Someone who can put a path in place of the store (a symbolic link to a file of another
user, a FIFO, a ``sessions`` dir that links elsewhere) must not get repair to open,
move or write that target: a link would have repair move and rewrite a file it does
not own, a FIFO would hang it, a linked ``sessions`` dir would put the fresh store and
the moved file outside the data dir. Each is refused, and every target stays as it was.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import ACPGATE, child_env

pytestmark = pytest.mark.timeout(120)

#: A SQLite header and then garbage: a store repair would act on.
DAMAGED = b"SQLite format 3\x00" + b"\xff" * 8000
#: The uid the other user's file belongs to.
OTHER_UID = 65534


def repair(config_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ACPGATE, "store", "repair", "--config-dir", str(config_dir)],
                          capture_output=True, text=True, env=child_env(), timeout=60)


def _sessions_dir(tmp_path: Path) -> Path:
    sessions = tmp_path / "cfg" / "data" / "sessions"
    sessions.mkdir(parents=True)
    return sessions


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_a_store_that_links_to_another_users_file_is_refused(tmp_path: Path) -> None:
    victim_dir = tmp_path / "other-user"
    victim_dir.mkdir()
    victim = victim_dir / "their.db"
    victim.write_bytes(DAMAGED)
    if os.geteuid() == 0:
        os.chown(victim, OTHER_UID, OTHER_UID)
    (_sessions_dir(tmp_path) / "acp-sessions.db").symlink_to(victim)
    done = repair(tmp_path / "cfg")
    assert done.returncode == 1 and "symbolic link" in done.stderr, done.stderr
    assert _listing(victim_dir) == {"their.db": DAMAGED}
    assert (tmp_path / "cfg" / "data" / "sessions" / "acp-sessions.db").is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs to give a file to another user")
def test_another_users_file_in_place_of_the_store_is_refused(tmp_path: Path) -> None:
    store = _sessions_dir(tmp_path) / "acp-sessions.db"
    store.write_bytes(DAMAGED)
    os.chown(store, OTHER_UID, OTHER_UID)
    done = repair(tmp_path / "cfg")
    assert done.returncode == 1 and "another user" in done.stderr, done.stderr
    assert _listing(store.parent) == {"acp-sessions.db": DAMAGED}


def test_a_fifo_in_place_of_the_store_or_its_wal_is_refused_without_hanging(
        tmp_path: Path) -> None:
    sessions = _sessions_dir(tmp_path)
    os.mkfifo(sessions / "acp-sessions.db")
    done = repair(tmp_path / "cfg")
    assert done.returncode == 1 and "not a regular file" in done.stderr, done.stderr
    (sessions / "acp-sessions.db").unlink()
    (sessions / "acp-sessions.db").write_bytes(DAMAGED)
    os.mkfifo(sessions / "acp-sessions.db-wal")
    done = repair(tmp_path / "cfg")
    assert done.returncode == 1 and "not a regular file" in done.stderr, done.stderr
    assert sorted(p.name for p in sessions.iterdir()) == ["acp-sessions.db",
                                                          "acp-sessions.db-wal"]


def test_a_sessions_dir_linked_outside_the_data_dir_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "acp-sessions.db").write_bytes(DAMAGED)
    data = tmp_path / "cfg" / "data"
    data.mkdir(parents=True)
    (data / "sessions").symlink_to(outside)
    done = repair(tmp_path / "cfg")
    assert done.returncode == 1 and "repairs only the store of its data dir" in done.stderr, \
        done.stderr
    assert _listing(outside) == {"acp-sessions.db": DAMAGED}
