"""The gateway instance id: generated once, persisted in the lifecycle state dir.

It is an ownership label, not a secret: it tells this install's wrappers apart
from another gateway's on the same host (SPEC §13).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from services.common.private_files import PRIVATE_FILE_MODE, private_dir, tighten

INSTANCE_FILE_NAME = "instance-id"


def _load_or_create_sync(state_dir: Path) -> str:
    path = state_dir / INSTANCE_FILE_NAME
    tighten(path, PRIVATE_FILE_MODE)
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    private_dir(state_dir)
    new_id = f"gw-{uuid.uuid4()}"
    tmp = path.with_name(f".{INSTANCE_FILE_NAME}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
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
