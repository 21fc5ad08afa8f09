"""Instance slots (services/lifecycle/leases/instance_slots.py): the lowest free one, held for life,
exact about dead holders, handed from ``acpgate serve`` to its lifecycle child."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from services.lifecycle.leases.instance_slots import (
    MAX_SLOTS,
    SlotError,
    acquire_slot,
    adopt_slot,
    slot_instance_id,
    slot_of,
    try_slot,
)
from tests.lifecycle.conftest import REPO

INSTALL = "gw-0f0e"


def test_instance_ids_of_slots_round_trip() -> None:
    assert slot_instance_id(INSTALL, 0) == INSTALL  # rows without a slot are slot 0's
    assert slot_instance_id(INSTALL, 3) == f"{INSTALL}-s3"
    for number in (0, 1, 7, MAX_SLOTS - 1):
        assert slot_of(INSTALL, slot_instance_id(INSTALL, number)) == number
    for foreign in ("gw-other", f"{INSTALL}-s", f"{INSTALL}-s0", f"{INSTALL}-s01",
                    f"{INSTALL}-sx", f"{INSTALL}-s{MAX_SLOTS}", f"{INSTALL}x-s1"):
        assert slot_of(INSTALL, foreign) is None, foreign


def test_the_lowest_free_slot_is_taken_and_given_back(tmp_path: Path) -> None:
    first, second = acquire_slot(tmp_path), acquire_slot(tmp_path)
    assert (first.number, second.number) == (0, 1)
    assert try_slot(tmp_path, 0) is None  # held (another open file of this very process)
    assert (tmp_path / "slots" / "0.lock").read_text().strip() == str(os.getpid())
    first.release()
    first.release()  # idempotent
    third = acquire_slot(tmp_path)
    assert third.number == 0  # a restart gets its slot back
    for slot in (second, third):
        slot.release()


def test_a_dead_holders_slot_is_free_at_once(tmp_path: Path) -> None:
    """The kernel drops the lock with its holder, whatever kills it: no PID is read."""
    import subprocess

    code = ("import sys, time\n"
            "from pathlib import Path\n"
            "from services.lifecycle.leases.instance_slots import acquire_slot\n"
            "slot = acquire_slot(Path(sys.argv[1]))\n"
            "print(slot.number, flush=True)\n"
            "time.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=REPO,
                              stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == b"0"
        assert try_slot(tmp_path, 0) is None
        holder.kill()
        holder.wait()
        slot = try_slot(tmp_path, 0)
        assert slot is not None
        slot.release()
    finally:
        holder.kill()
        holder.wait()


async def test_serves_child_adopts_the_slot_serve_holds(tmp_path: Path) -> None:
    """``acpgate serve`` takes a slot and hands the open file to its lifecycle child
    (``--slot-fd``): the child holds that very slot, and while serve lives the slot
    stays held across the child's exit (a restart gets it back)."""
    held = await asyncio.to_thread(acquire_slot, tmp_path / "lc")
    fd = held.fileno()
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from services.lifecycle.leases.instance_slots import adopt_slot\n"
            "slot = adopt_slot(Path(sys.argv[1]), int(sys.argv[2]))\n"
            "print(slot.number, flush=True)\n")
    try:
        for _ in range(2):  # a first child, then its restart
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", code, str(tmp_path / "lc"), str(fd), pass_fds=(fd,),
                stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
            out, _ = await asyncio.wait_for(child.communicate(), 60)
            assert child.returncode == 0 and out.strip() == b"0"
            assert try_slot(tmp_path / "lc", 0) is None  # still serve's
    finally:
        held.release()
    again = try_slot(tmp_path / "lc", 0)
    assert again is not None
    again.release()


def test_adopting_anything_but_a_slot_file_is_refused(tmp_path: Path) -> None:
    acquire_slot(tmp_path).release()  # the slots dir exists
    other = tmp_path / "not-a-slot"
    other.write_text("x")
    with other.open("rb") as fh:
        with pytest.raises(SlotError, match="is not a lifecycle slot"):
            adopt_slot(tmp_path, os.dup(fh.fileno()))
    with pytest.raises(SlotError, match="is not an open file"):
        adopt_slot(tmp_path, 987654)
