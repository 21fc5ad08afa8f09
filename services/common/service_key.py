"""The install's service credential: what every gRPC call between acpgate's own
processes carries (ARCHITECTURE.md "Trust model").

The session and lifecycle services accept a call only with this secret, on TCP
and on unix sockets alike: a shell command an agent runs, which can reach the
sockets, holds no credential and gets nothing. Where it comes from:

- ``[services] token_env`` names an environment variable that is set: its value
  (docker compose and several hosts, where processes share no disk);
- else the per-install key file ``<data dir>/run/service.key``: 32 random bytes
  (hex), created ``0600`` in a ``0700`` dir on first use, read by every acpgate
  process of the install (``serve``'s three children, ``acpgate acp``, operator
  tools). It sits in the data dir, which every agent-side process is denied
  (forbidden paths, Landlock), and it is never placed in a child's environment.

The seal key (:func:`seal_key`) that seals launch specs is derived from it,
so holding the credential is the only way to make the lifecycle service spawn.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import uuid
from pathlib import Path

from services.common.config import ConfigError
from services.common.private_files import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_dir, tighten

__all__ = [
    "KEY_BYTES",
    "SERVICE_KEY_NAME",
    "ServiceKeyError",
    "ephemeral_key",
    "load_or_create_key",
    "seal_key",
    "service_key_path",
]

SERVICE_KEY_NAME = "service.key"
KEY_BYTES = 32
#: Domain separation: the launch key is never the credential itself.
_LAUNCH_KEY_LABEL = b"acpgate/launch-spec-seal/v1"


class ServiceKeyError(ConfigError):
    """The key file cannot be read or created; ``str(exc)`` says which and why (a
    start-up error the command line reports like a configuration error)."""


def service_key_path(data_dir: Path) -> Path:
    """``<data dir>/run/service.key``."""
    return data_dir / "run" / SERVICE_KEY_NAME


def _read(path: Path) -> str:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 2 * KEY_BYTES:
        raise ServiceKeyError(f"{path} does not hold a service key (remove it to make a new one)")
    return text


def load_or_create_key(path: Path) -> str:
    """The key in ``path``, created (owner-only) on first use (blocking).

    Concurrent first starts agree: the key is written to a temporary file and
    linked into place, and whoever loses the race reads the winner's key.
    """
    try:
        tighten(path.parent, PRIVATE_DIR_MODE)
        tighten(path, PRIVATE_FILE_MODE)
        return _read(path)
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        raise ServiceKeyError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        private_dir(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(KEY_BYTES) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process won: its key is the key
        finally:
            tmp.unlink(missing_ok=True)
        return _read(path)
    except ServiceKeyError:
        raise
    except OSError as exc:
        raise ServiceKeyError(f"cannot create {path}: {exc.strerror or exc}") from None


def ephemeral_key() -> str:
    """A key for one process only (its own in-process services when the data dir is not
    writable): nobody else can call them, which is what such a process needs."""
    return secrets.token_hex(KEY_BYTES)


def seal_key(credential: str) -> bytes:
    """The key launch specs are sealed with, derived from the service credential."""
    return hmac.new(credential.encode(), _LAUNCH_KEY_LABEL, hashlib.sha256).digest()
