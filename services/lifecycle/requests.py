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


class NoWarmAdapter(Exception):
    """A take that may not spawn (``warm_only``) found no warm adapter ready."""


@dataclass(frozen=True)
class EnsureRequest:
    """Spawn request for a session key: a launch spec the servicer verified was sealed by
    the session service (:mod:`services.lifecycle.adapters.sealed`)."""

    session_key: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    #: Variables (names or ``*`` globs) the adapter gets from this service's environment
    #: on top of the clean base (:mod:`services.lifecycle.adapters.child_env`).
    pass_env: tuple[str, ...] = ()
    #: Take a warm adapter of this pool when one matches (see ``services.lifecycle.adapters.warm``).
    warm_pool: str = ""
    #: Never spawn: the key's live lease or a warm adapter, else :class:`NoWarmAdapter`.
    warm_only: bool = False


@dataclass(frozen=True)
class InstanceInfo:
    """This gateway's identity."""

    gateway_instance_id: str
    state_dir: str
    wrapper_root: str
    started_at: int
    #: The instance slot this service holds (services.lifecycle.leases.instance_slots).
    slot: int = 0
    #: The install's instance id, which the slot's is derived from.
    install_id: str = ""


def check_spec(command: str, args: Sequence[str]) -> None:
    """Refuse a command or args that cannot run (InvalidRequest says why; no I/O)."""
    if not command:
        raise InvalidRequest("command is required")
    if "\0" in command or any("\0" in a for a in args):
        raise InvalidRequest("command and args must not contain NUL")


def cwd_refusal(cwd: str) -> InvalidRequest | None:
    """Why ``cwd`` cannot be an adapter's working directory, or None (blocking; off-loop)."""
    if cwd and not os.path.isdir(cwd):
        return InvalidRequest(f"cwd is not a directory: {cwd}")
    return None


async def check_launch(command: str, args: Sequence[str], cwd: str) -> None:
    """Refuse a launch spec that cannot run (InvalidRequest says why)."""
    check_spec(command, args)
    refusal = await asyncio.to_thread(cwd_refusal, cwd)
    if refusal is not None:
        raise refusal
