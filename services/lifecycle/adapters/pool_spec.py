"""What a warm pool is made of: its spec, the launch key a take must match, and the
fingerprint of the files its adapters read when they start (:mod:`services.lifecycle.adapters.warm`).

Pure data and blocking file reads (run :func:`fingerprint` off the loop); nothing
here spawns, signals or stores anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.lifecycle.requests import EnsureRequest, InvalidRequest, cwd_refusal

__all__ = ["PoolSpec", "fingerprint", "launch_key", "watched_files"]


def launch_key(command: str, args: tuple[str, ...], env: Mapping[str, str],
               pass_env: tuple[str, ...] = ()) -> str:
    """What a take must match: sha256 of the command, its args, its env and what it takes
    from this service's environment."""
    h = hashlib.sha256()
    for part in (command, *args, "\0env", *(f"{k}={v}" for k, v in sorted(env.items())),
                 "\0pass", *pass_env):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class PoolSpec:
    """One KeepWarm request: the pool's name, launch spec, watched files and size."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    watch_paths: tuple[str, ...] = ()
    count: int = 1
    pass_env: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The launch key of every adapter of this pool."""
        return launch_key(self.command, self.args, self.env, self.pass_env)

    @property
    def session_key(self) -> str:
        """The session key of the pool's leases while they wait."""
        return f"{self.name}:warm"

    def same_launch(self, other: PoolSpec) -> bool:
        """True when ``other`` starts the very same adapters (only the count may differ)."""
        return (self.key, self.cwd, self.watch_paths) == (other.key, other.cwd, other.watch_paths)

    def request(self) -> EnsureRequest:
        """The spawn request of one warm adapter."""
        return EnsureRequest(session_key=self.session_key, command=self.command,
                             args=self.args, env=self.env, cwd=self.cwd,
                             pass_env=self.pass_env)


def watched_files(spec: PoolSpec) -> list[str]:
    """The executable, the args that name existing files, and the watch paths (blocking)."""
    exe = spec.command if os.sep in spec.command else shutil.which(spec.command) or spec.command
    files = [exe, *(a for a in spec.args if os.path.isabs(a) and os.path.isfile(a))]
    return files + list(spec.watch_paths)


def fingerprint(spec: PoolSpec) -> str:
    """sha256 of identity, size and mtime of every watched file (blocking; run off-loop)."""
    h = hashlib.sha256()
    for path in watched_files(spec):
        try:
            st = os.stat(path)
            stamp = f"{path}\0{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
        except OSError as exc:
            stamp = f"{path}\0missing:{exc.errno}"
        h.update(stamp.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


def launch_reads(cwd: str, spec: PoolSpec | None) -> tuple[InvalidRequest | None, str]:
    """What an ensure reads from the file system, in one go (blocking; off-loop): why
    ``cwd`` is refused (None: it is not), and ``spec``'s :func:`fingerprint` ("" without
    a pool)."""
    return cwd_refusal(cwd), fingerprint(spec) if spec is not None else ""
