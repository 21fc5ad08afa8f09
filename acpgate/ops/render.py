"""How operators' commands print: sizes, durations, CPU time, columns, JSON.

Plain text for a terminal (aligned columns, lines cut to its width where a
command line would wrap) and ``--json`` for scripts: the same facts, the
dataclasses as they are, times in milliseconds since the epoch.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Sequence
from typing import Any

__all__ = ["as_json", "cpu", "cut", "duration", "size", "table"]


def size(n: int) -> str:
    """Bytes as ``512K``, ``61.2M``, ``1.4G`` (``-`` for unknown)."""
    if n <= 0:
        return "-"
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{n}B"


def duration(secs: float) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``4d03h`` (``-`` for unknown)."""
    if secs < 0:
        return "-"
    s = int(secs)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def cpu(secs: float) -> str:
    """CPU time as ``ps`` shows it: ``0:01.20`` (minutes:seconds)."""
    whole = int(secs)
    return f"{whole // 60}:{whole % 60:02d}.{int((secs - whole) * 100):02d}"


def cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def terminal_width() -> int:
    """The terminal's width (120 when output goes elsewhere)."""
    return shutil.get_terminal_size((120, 24)).columns


def table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Aligned columns (the last one unpadded)."""
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)]
        return (indent + "  ".join([*padded, cells[-1]])).rstrip()
    return [line(header), *(line(r) for r in rows)]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in ("rss_bytes", "cpu_seconds"):  # the totals a lease computes
            if hasattr(type(value), name) and name not in out:
                out[name] = getattr(value, name)
        return out
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def as_json(value: Any) -> str:
    """``value`` (dataclasses, lists, plain values) as indented JSON."""
    return json.dumps(_plain(value), indent=2, ensure_ascii=False)
