"""Which sessions had a turn running when an edge stepped down for a hot restart.

The session service knows what each session is doing only from the edges' reports, in
its memory; a hot restart replaces it too, so the successor edge that re-adopts the
sessions (:mod:`services.edge.sessions.readopt`) would not know which turns to carry on.
The edge that steps down therefore writes the ids of its sessions whose turn runs into
``<data dir>/run/edge-<hash of its claim name>.running.json`` (owner-only, the private
run dir), and its successor — the same claim name — reads and removes it at start. A
missing or unreadable note says nothing: the session service's report decides alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["note_path", "take_note", "write_note"]

#: The most bytes a note may have (a session id per running turn).
MAX_NOTE_BYTES: Final = 4 * 1024 * 1024


def note_path(data_dir: Path, claim_name: str) -> Path:
    """The note of the edge whose sessions are claimed as ``claim_name``."""
    digest = hashlib.sha256(claim_name.encode()).hexdigest()[:16]
    return data_dir / "run" / f"edge-{digest}.running.json"


def write_note(path: Path, claim_name: str, session_ids: Iterable[str]) -> None:
    """Write the note (atomically, owner-only). Blocking: a stepping-down edge only."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"claim": claim_name, "running": sorted(session_ids)}, out)
    os.replace(tmp, path)


def take_note(path: Path, claim_name: str) -> frozenset[str]:
    """The session ids the note names for ``claim_name``, the note removed; empty when
    there is none (or it is unreadable, too big, or another name's)."""
    with contextlib.suppress(OSError, ValueError):
        try:
            if path.stat().st_size > MAX_NOTE_BYTES:
                return frozenset()
            note = json.loads(path.read_text())
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        if not isinstance(note, dict) or note.get("claim") != claim_name:
            return frozenset()
        running = note.get("running")
        if isinstance(running, list):
            return frozenset(s for s in running if isinstance(s, str))
    return frozenset()
