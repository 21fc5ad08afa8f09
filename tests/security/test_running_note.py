"""Attacks on the hand-over note a stepping-down edge leaves its successor.

The note (``<data dir>/run/edge-<hash>.running.json``) names the sessions whose turn ran.
Whoever could plant one, or leave one behind, must not be believed: a symlink to a
note elsewhere, a note of another uid, one anybody else may read or write, one in a run
dir that is not private, a FIFO (the successor must not hang on it), a stale note, and
another install's note are all ignored — and removed. Writing the note never follows a
link planted at its temporary path. The genuine note is ``0600``, taken once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from services.edge.sessions.running_note import note_path, take_note, write_note

CLAIM = "gw-1111/w2"
OTHER_INSTALL = "gw-2222/w2"


def _data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "run").mkdir(parents=True, mode=0o700)
    return data


def _forge(path: Path, *, claim: str = CLAIM, age_ms: int = 0, mode: int = 0o600) -> None:
    """A note as an attacker (or an earlier start) would leave it."""
    path.write_text(json.dumps({"claim": claim, "written_ms": int(time.time() * 1000) - age_ms,
                                "running": ["victim"]}))
    path.chmod(mode)


def test_the_genuine_note_is_private_and_taken_once(tmp_path: Path) -> None:
    path = note_path(_data_dir(tmp_path), CLAIM)
    write_note(path, CLAIM, ["s1", "s2"])
    assert path.stat().st_mode & 0o777 == 0o600
    assert take_note(path, CLAIM) == {"s1", "s2"}
    assert not path.exists(), "removed once read"
    assert take_note(path, CLAIM) == frozenset()


def test_a_symlinked_note_is_not_followed(tmp_path: Path) -> None:
    path = note_path(_data_dir(tmp_path), CLAIM)
    elsewhere = tmp_path / "planted.json"
    _forge(elsewhere)
    path.symlink_to(elsewhere)
    assert take_note(path, CLAIM) == frozenset()
    assert not path.is_symlink() and elsewhere.exists(), "the link removed, its target not"


def test_another_uids_note_is_ignored(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to give the note to another uid)")
    path = note_path(_data_dir(tmp_path), CLAIM)
    _forge(path)
    os.chown(path, 65534, 65534)
    assert take_note(path, CLAIM) == frozenset()
    assert not path.exists()


def test_a_note_others_may_read_or_write_is_ignored(tmp_path: Path) -> None:
    path = note_path(_data_dir(tmp_path), CLAIM)
    for mode in (0o644, 0o620, 0o606):
        _forge(path, mode=mode)
        assert take_note(path, CLAIM) == frozenset(), oct(mode)
        assert not path.exists()


def test_a_note_in_a_run_dir_others_may_enter_is_ignored(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    (data / "run").chmod(0o777)
    path = note_path(data, CLAIM)
    _forge(path)
    assert take_note(path, CLAIM) == frozenset()
    assert not path.exists()


async def test_a_fifo_at_the_notes_path_does_not_hang_the_successor(tmp_path: Path) -> None:
    path = note_path(_data_dir(tmp_path), CLAIM)
    os.mkfifo(path, 0o600)
    try:
        taken = await asyncio.wait_for(asyncio.to_thread(take_note, path, CLAIM), 20)
    finally:  # a reader blocked on the FIFO gets its end of file (the test ends either way)
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert taken == frozenset()
    assert not path.exists()


def test_a_stale_note_is_ignored(tmp_path: Path) -> None:
    path = note_path(_data_dir(tmp_path), CLAIM)
    _forge(path, age_ms=24 * 3600 * 1000)  # left by a start a day ago
    assert take_note(path, CLAIM) == frozenset()
    assert not path.exists()


def test_another_installs_note_is_ignored(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    path = note_path(data, CLAIM)
    _forge(path, claim=OTHER_INSTALL)  # copied over from another install
    assert take_note(path, CLAIM) == frozenset()
    assert not path.exists()


def test_writing_the_note_never_follows_a_planted_link(tmp_path: Path) -> None:
    path = note_path(_data_dir(tmp_path), CLAIM)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path.with_suffix(".tmp").symlink_to(victim)
    write_note(path, CLAIM, ["s1"])
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600
    assert take_note(path, CLAIM) == {"s1"}
