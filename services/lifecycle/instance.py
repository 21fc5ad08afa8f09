"""The gateway instance id: generated once, persisted in the lifecycle state dir.

It is an ownership label, not a secret: it tells this install's wrappers apart
from another gateway's on the same host (SPEC §13).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

INSTANCE_FILE_NAME = "instance-id"


def _load_or_create_sync(state_dir: Path) -> str:
    path = state_dir / INSTANCE_FILE_NAME
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    state_dir.mkdir(parents=True, exist_ok=True)
    new_id = f"gw-{uuid.uuid4()}"
    tmp = path.with_name(f".{INSTANCE_FILE_NAME}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(new_id + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        # link() fails if another starter won the race: then its id is the id.
        os.link(tmp, path)
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip() or new_id
    finally:
        tmp.unlink(missing_ok=True)
    return new_id


async def load_or_create_instance_id(state_dir: Path) -> str:
    """The instance id stored in ``<state_dir>/instance-id``, created on first use."""
    return await asyncio.to_thread(_load_or_create_sync, state_dir)
