"""What the lifecycle controller takes, answers and raises.

Apart from the controller so that its collaborators (the servicer, a spawn in
flight) can name them without importing the controller itself.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class LeaseNotFound(Exception):
    """No such lease (or no open lease for the session key)."""


class InvalidRequest(Exception):
    """The request is malformed; the message says how."""


class Unavailable(Exception):
    """The adapter could not be started."""


@dataclass(frozen=True)
class EnsureRequest:
    """Spawn request for a session key."""

    session_key: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    #: Take a warm adapter of this pool when one matches (see ``services.lifecycle.warm``).
    warm_pool: str = ""


@dataclass(frozen=True)
class InstanceInfo:
    """This gateway's identity."""

    gateway_instance_id: str
    state_dir: str
    wrapper_root: str
    started_at: int


async def check_launch(command: str, args: Sequence[str], cwd: str) -> None:
    """Refuse a launch spec that cannot run (InvalidRequest says why)."""
    if not command:
        raise InvalidRequest("command is required")
    if "\0" in command or any("\0" in a for a in args):
        raise InvalidRequest("command and args must not contain NUL")
    if cwd and not await asyncio.to_thread(os.path.isdir, cwd):
        raise InvalidRequest(f"cwd is not a directory: {cwd}")
