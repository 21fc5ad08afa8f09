"""Instance slots: any number of lifecycle services on one data dir, each with its own leases.

Two editor windows each run ``acpgate acp`` (each with a lifecycle service inside) on
one ``~/.acpgate``, ``acpgate serve`` may run beside them: every lifecycle service holds
one *slot* for its whole life, ``<lifecycle state dir>/slots/<N>.lock`` locked with an
exclusive ``flock``. The kernel drops the lock when its holder dies, however it dies,
so "this slot's holder is dead" is exact — no PID guessing. A service takes the
lowest free slot: a restarted lone ``serve`` or ``acp`` gets its slot back and reaps
its own leftovers; a second one running beside it takes the next.

Each slot has its own gateway instance id, derived from the install's
(:func:`slot_instance_id`): slot 0's *is* the install's id, so leases written before
slots existed (which carry it) are slot 0's, and slot N's is ``<install id>-s<N>``.
That id labels the slot's leases, is in its wrappers' argv and environment, and names
its claims on stored sessions: verification never lets one slot's reaper take another
slot's processes for its own, and claims keep each process off the sessions another
one serves.

A lock file is opened ``O_CLOEXEC``: no wrapper or agent inherits it, so an orphan
can never keep a dead service's slot "alive". ``acpgate serve`` takes the slot itself
and hands the open file to its lifecycle child (:func:`adopt_slot`): a restart of
that child keeps the slot, and the instance id its edge claims sessions under.

Blocking (file-system calls and locks): run off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from services.common.config import ConfigError
from services.common.lock_files import open_lock_file, try_lock
from services.common.private_files import private_dir

__all__ = [
    "MAX_SLOTS",
    "SLOTS_DIR_NAME",
    "Slot",
    "SlotError",
    "acquire_slot",
    "adopt_slot",
    "slot_instance_id",
    "slot_of",
    "try_slot",
]

SLOTS_DIR_NAME = "slots"
#: More lifecycle services than this on one data dir is a runaway, not a use.
MAX_SLOTS = 256
#: How a slot's instance id extends the install's (slot 0 has none).
_SLOT_SUFFIX = "-s"
_LOCK_NAME = re.compile(r"(0|[1-9][0-9]*)\.lock")
#: The slot number in a slot's instance id (slot 0 has no suffix).
_SUFFIX_NUMBER = re.compile(r"[1-9][0-9]*")


class SlotError(ConfigError):
    """No slot could be taken (all held, or the slots dir unusable); the message says why."""


@dataclass
class Slot:
    """One held slot: its number and the open, locked lock file (None once released)."""

    number: int
    path: Path
    file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def held(self) -> bool:
        """True until :meth:`release`."""
        return self.file is not None

    def fileno(self) -> int:
        """The lock file's descriptor (``acpgate serve`` passes it to its lifecycle child)."""
        if self.file is None:
            raise ValueError(f"slot {self.number} was released")
        return self.file.fileno()

    def release(self) -> None:
        """Unlock and close: the slot is free for the next starter (idempotent)."""
        file, self.file = self.file, None
        if file is not None:
            file.close()  # closing the last descriptor of the open file drops the flock


def slot_instance_id(install_id: str, number: int) -> str:
    """The gateway instance id of slot ``number`` of the install ``install_id``."""
    return install_id if number == 0 else f"{install_id}{_SLOT_SUFFIX}{number}"


def slot_of(install_id: str, instance_id: str) -> int | None:
    """The slot whose instance id ``instance_id`` is (None: not one of this install's)."""
    if instance_id == install_id:
        return 0
    prefix = install_id + _SLOT_SUFFIX
    if not instance_id.startswith(prefix):
        return None
    rest = instance_id[len(prefix):]
    if not _SUFFIX_NUMBER.fullmatch(rest):
        return None
    number = int(rest)
    return number if number < MAX_SLOTS else None


def slots_dir(state_dir: Path) -> Path:
    """``<state_dir>/slots``."""
    return state_dir / SLOTS_DIR_NAME


def _note_holder(file: IO[bytes]) -> None:
    """Write this process's PID into the held lock file (for a person reading it)."""
    with contextlib.suppress(OSError):
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()}\n".encode())


def try_slot(state_dir: Path, number: int) -> Slot | None:
    """Slot ``number``, locked for the caller, or None while a live process holds it."""
    directory = private_dir(slots_dir(state_dir))
    path = directory / f"{number}.lock"
    file = open_lock_file(path)
    try:
        if not try_lock(file):
            file.close()
            return None
    except BaseException:
        file.close()
        raise
    _note_holder(file)
    return Slot(number, path, file)


def acquire_slot(state_dir: Path) -> Slot:
    """The lowest free slot under ``state_dir``, held until released or this process ends."""
    try:
        for number in range(MAX_SLOTS):
            slot = try_slot(state_dir, number)
            if slot is not None:
                return slot
    except OSError as exc:
        raise SlotError(f"cannot take a lifecycle slot in {slots_dir(state_dir)}: "
                        f"{exc.strerror or exc}") from None
    raise SlotError(f"all {MAX_SLOTS} lifecycle slots in {slots_dir(state_dir)} are held by "
                    "running acpgate processes")


def adopt_slot(state_dir: Path, fd: int) -> Slot:
    """The slot whose locked lock file ``fd`` is, inherited from ``acpgate serve``.

    ``fd`` must be one of ``<state_dir>/slots/<N>.lock``, and its lock this process's
    (the open file serve locked): anything else is a SlotError, never a guess.
    """
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise SlotError(f"--slot-fd {fd} is not an open file: {exc.strerror or exc}") from None
    directory = slots_dir(state_dir)
    number = None
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if _LOCK_NAME.fullmatch(entry.name):
                est = entry.stat(follow_symlinks=False)
                if (est.st_dev, est.st_ino) == (st.st_dev, st.st_ino):
                    number = int(entry.name.split(".", 1)[0])
                    break
    if number is None:
        raise SlotError(f"--slot-fd {fd} is not a lifecycle slot of {directory}")
    os.set_inheritable(fd, False)  # like every lock file: never a wrapper's or an agent's
    file = os.fdopen(fd, "r+b", buffering=0)
    try:
        # The open file serve locked: re-locking it succeeds at once. Another's lock fails.
        if not try_lock(file):
            raise SlotError(f"--slot-fd {fd}: slot {number} is held by another process")
    except BaseException:
        file.close()
        raise
    return Slot(number, directory / f"{number}.lock", file)
