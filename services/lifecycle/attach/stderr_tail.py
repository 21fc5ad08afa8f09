"""The last lines of an adapter's stderr, for the error a client sees when it exits.

The wrapper writes each lease's adapter stderr to a bounded, rotated log
(``<state dir>/logs/<lease id>.log`` and ``.log.1``); this reads its tail.
Blocking: run it off the event loop.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STDERR_TAIL_BYTES", "read_stderr_tail"]

#: How much of the stderr log an exit report carries.
STDERR_TAIL_BYTES = 4096


def read_stderr_tail(log_path: Path, limit: int = STDERR_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of the per-lease stderr log (and its rotated part)."""
    data = b""
    for path in (log_path, log_path.with_name(log_path.name + ".1")):
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                need = limit - len(data)
                fh.seek(max(0, size - need))
                data = fh.read() + data
        except OSError:
            continue
        if len(data) >= limit:
            break
    data = data[-limit:]
    text = data.decode("utf-8", "replace")
    if len(data) == limit and "\n" in text:
        text = text.split("\n", 1)[1]  # start on a line boundary
    return text.rstrip("\n")
