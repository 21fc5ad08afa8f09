"""Opening a sealed launch spec: the lifecycle service's half of the seal.

``EnsureSession``, ``Attach{open.ensure}`` and ``KeepWarm`` name what to run only
as a ``SealedLaunch`` the session service made (``services.common.launch_seal``).
A missing, altered or foreign seal is refused before anything is spawned: a
caller of this service — whatever it holds — never names a command of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from acpgate_contracts.launch.v1 import launch_pb2
from services.common.launch_seal import sealed_by

__all__ = ["LaunchRefused", "OpenedLaunch", "open_launch"]


class LaunchRefused(Exception):
    """The launch spec is not one the session service sealed; ``str(exc)`` says how."""


@dataclass(frozen=True)
class OpenedLaunch:
    """A verified launch spec, as the controller takes it."""

    alias: str
    kind: str
    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    pass_env: tuple[str, ...]


def open_launch(sealed: launch_pb2.SealedLaunch, key: bytes) -> OpenedLaunch:
    """The spec ``sealed`` carries, once its seal proves the session service made it."""
    if not sealed.spec or not sealed.seal:
        raise LaunchRefused("a launch spec sealed by the session service is required")
    if not sealed_by(key, sealed.spec, sealed.seal):
        raise LaunchRefused("the launch spec's seal does not verify: only specs the session "
                            "service resolved from configuration are run")
    spec = launch_pb2.LaunchSpec()
    try:
        spec.ParseFromString(sealed.spec)
    except DecodeError:
        raise LaunchRefused("the sealed launch spec cannot be read") from None
    return OpenedLaunch(alias=spec.alias, kind=spec.kind, command=spec.command,
                        args=tuple(spec.args), env=dict(spec.env), pass_env=tuple(spec.pass_env))
