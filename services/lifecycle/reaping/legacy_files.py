"""Pre-lease record files: the processes an earlier system started, for acpgate to reap.

An operator migrating to acpgate from a system that kept no lease ids (the ACP gateway
the seed describes kept a PID and a command per ACP session; an earlier acpgate the
same) drops files named ``*.jsonl`` into ``<data dir>/lifecycle/legacy/``. Each line
is one JSON object, one process the old system started::

    {"pid": 4242, "command": "node '/opt/my agent/index.js' --acp"}
    {"pid": 4243, "command": ["/usr/bin/codex-acp", "--flag"], "started_at": 1720000000000}
    {"pid": 4244, "wrapper": true}

- ``pid`` (required): the root process's PID, an integer above 1.
- ``command``: the root's command as the old system stored it, a string (shell-quoted
  or not) or the exact argv as a list of strings; required unless ``wrapper``.
- ``wrapper``: ``true`` when the root was a wrapper spawned under this install's wrapper
  root (``<data dir>/lifecycle/wrapper``), or the absolute path of the wrapper root it
  was spawned under; such a record is matched by wrapper-root ownership, not by command.
- ``started_at``: when it started, ms since the epoch (kept for the operator: it proves
  nothing about a live process).

Other keys are ignored; blank lines are allowed. A file is imported whole or not at
all: one bad line and the whole file is refused (logged with the line number and why)
and left where it is for the operator to fix. So is a file or directory another user
could have written (not this user's, writable by group or others, not a regular file
or directory). Blocking (file-system calls): run off the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from services.common.private_files import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, tighten

__all__ = [
    "IMPORTED_SUFFIX",
    "LEGACY_DIR_NAME",
    "MAX_FILE_BYTES",
    "MAX_RECORDS",
    "RECORD_SUFFIX",
    "ImportedRecord",
    "LegacyFile",
    "LegacyFileError",
    "RefusedFile",
    "mark_imported",
    "parse_record",
    "parse_records",
    "read_legacy_dir",
]

LEGACY_DIR_NAME = "legacy"
#: Only files with this suffix are read; an imported one gets :data:`IMPORTED_SUFFIX` added.
RECORD_SUFFIX = ".jsonl"
IMPORTED_SUFFIX = ".imported"
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_RECORDS = 10_000
#: A stored command longer than this is no command line (Linux's ARG_MAX is 2 MiB,
#: but no agent runs with 64 KiB of arguments).
MAX_COMMAND_CHARS = 64 * 1024
#: Linux's PID_MAX_LIMIT: no PID is above it.
PID_MAX = 4_194_304
#: Group or others may write: someone else could have written the records.
_FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH


class LegacyFileError(ValueError):
    """A record file cannot be imported; the message says where and why."""


@dataclass(frozen=True)
class ImportedRecord:
    """One line of a record file, checked."""

    line: int
    pid: int
    #: The stored command, shell-quoted when the file gave an argv ("" for a wrapper without one).
    command: str
    #: The wrapper root the file named ("" with ``expects_wrapper``: this install's).
    wrapper_root: str = ""
    expects_wrapper: bool = False
    #: ms since the epoch; 0 = not given.
    started_at: int = 0


@dataclass(frozen=True)
class LegacyFile:
    """A record file read whole: where it is, its content's digest, its records."""

    path: Path
    digest: str
    records: tuple[ImportedRecord, ...]


@dataclass(frozen=True)
class RefusedFile:
    """A record file (or the directory) left as it is, and why."""

    path: Path
    why: str


def _whole_number(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LegacyFileError(f"{name} must be an integer")
    if not low <= value <= high:
        raise LegacyFileError(f"{name} must be between {low} and {high}")
    return value


def _command(value: object) -> str:
    """The stored command as one string (an argv is shell-quoted, which matching undoes)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        if not value[0]:
            raise LegacyFileError("command's first argument is empty")
        text = shlex.join(value)
    else:
        raise LegacyFileError("command must be a string or a non-empty list of strings")
    if not text.strip():
        raise LegacyFileError("command is empty")
    if "\0" in text:
        raise LegacyFileError("command holds a NUL character")
    if len(text) > MAX_COMMAND_CHARS:
        raise LegacyFileError(f"command is longer than {MAX_COMMAND_CHARS} characters")
    return text


def _wrapper(value: object) -> tuple[bool, str]:
    """``(expects_wrapper, wrapper_root)`` from the ``wrapper`` key."""
    if isinstance(value, bool):
        return value, ""
    if isinstance(value, str) and value and os.path.isabs(value) and "\0" not in value:
        return True, os.path.normpath(value)
    raise LegacyFileError("wrapper must be true, false or an absolute path")


def parse_record(value: object, line: int) -> ImportedRecord:
    """One decoded line as a record; :class:`LegacyFileError` (with the line) when it is not."""
    try:
        if not isinstance(value, dict):
            raise LegacyFileError("not a JSON object")
        if "pid" not in value:
            raise LegacyFileError("pid is missing")
        pid = _whole_number(value["pid"], "pid", 2, PID_MAX)
        expects_wrapper, wrapper_root = _wrapper(value.get("wrapper", False))
        if "command" in value:
            command = _command(value["command"])
        elif expects_wrapper:
            command = ""
        else:
            raise LegacyFileError("command is missing (required unless wrapper)")
        started_at = 0
        if value.get("started_at") is not None:
            started_at = _whole_number(value["started_at"], "started_at", 0, 2**53)
    except LegacyFileError as exc:
        raise LegacyFileError(f"line {line}: {exc}") from None
    return ImportedRecord(line, pid, command, wrapper_root, expects_wrapper, started_at)


def parse_records(data: bytes) -> tuple[ImportedRecord, ...]:
    """Every record of a file's content; the first bad line refuses them all."""
    if len(data) > MAX_FILE_BYTES:
        raise LegacyFileError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LegacyFileError(f"not UTF-8 (byte {exc.start})") from None
    records: list[ImportedRecord] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        if len(records) == MAX_RECORDS:
            raise LegacyFileError(f"more than {MAX_RECORDS} records")
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            # The decoder's message names a position, never the line's content.
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise LegacyFileError(f"line {number}: not JSON ({why})") from None
        records.append(parse_record(value, number))
    return tuple(records)


def _trusted(st: os.stat_result, kind: str) -> str:
    """Why a file or directory with status ``st`` may not be trusted ("" when it may)."""
    if st.st_uid != os.getuid():
        return f"{kind} belongs to another user (uid {st.st_uid})"
    if st.st_mode & _FOREIGN_WRITE:
        return f"{kind} is writable by group or others (chmod go-w)"
    return ""


def _read_file(path: Path) -> LegacyFile:
    """One record file, read whole through a descriptor that cannot follow a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise LegacyFileError(why) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LegacyFileError("not a regular file")
        distrust = _trusted(st, "file")
        if distrust:
            raise LegacyFileError(distrust)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    tighten(path, PRIVATE_FILE_MODE)  # records name processes: the owner's alone
    return LegacyFile(path, hashlib.sha256(data).hexdigest(), parse_records(data))


def read_legacy_dir(directory: Path) -> tuple[list[LegacyFile], list[RefusedFile]]:
    """The record files waiting in ``directory`` (name order), and those refused.

    A missing directory is nothing to do; one that is not a directory or that another
    user could write is refused whole.
    """
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [RefusedFile(directory, exc.strerror or str(exc))]
    if not stat.S_ISDIR(st.st_mode):
        return [], [RefusedFile(directory, "not a directory")]
    distrust = _trusted(st, "directory")
    if distrust:
        return [], [RefusedFile(directory, distrust)]
    tighten(directory, PRIVATE_DIR_MODE)
    files: list[LegacyFile] = []
    refused: list[RefusedFile] = []
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(RECORD_SUFFIX))
    except OSError as exc:
        return [], [RefusedFile(directory, exc.strerror or str(exc))]
    for name in names:
        path = directory / name
        try:
            files.append(_read_file(path))
        except LegacyFileError as exc:
            refused.append(RefusedFile(path, str(exc)))
        except OSError as exc:
            refused.append(RefusedFile(path, exc.strerror or str(exc)))
    return files, refused


def mark_imported(path: Path) -> Path:
    """Rename an imported file to ``<name>.imported`` (kept for the operator, never read
    again); the new path. A file already gone is fine."""
    target = path.with_name(path.name + IMPORTED_SUFFIX)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, target)
    return target
