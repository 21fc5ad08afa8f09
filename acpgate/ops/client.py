"""Reaching an install's services as its operator: where they run, and the credential.

An install's services are the ones ``[services]`` names (several hosts, docker
compose), else every process that registered an endpoint in the data dir
(``acpgate serve``, each ``acpgate acp``: :mod:`.endpoints`), else the default
sockets under ``<data dir>/run`` when a service runs there on its own. Every
call carries the install's service credential — the operator is whoever can
read ``<data dir>/run/service.key`` (or ``[services] token_env``'s variable);
without it every call is refused, as it is to anybody. Nothing here opens a
database: what the commands show comes from the services' gRPC APIs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from acpgate.ops.endpoints import live_endpoints
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.addresses import default_lifecycle_address, default_session_address
from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity, grpc_security, open_service_channel
from services.common.in_use import socket_is_served
from services.common.service_key import ServiceKeyError, service_key_path

__all__ = ["CALL_TIMEOUT_SECS", "Connected", "OpsError", "Target", "connect", "connect_all",
           "describe", "find_targets", "operator_security", "relative_home"]

#: How long one call may take before the service counts as not answering.
CALL_TIMEOUT_SECS = 10.0


class OpsError(Exception):
    """An operator's command cannot do its job; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """One process (or pair of processes) serving this install's two services."""

    #: How the commands name it: ``serve[4242]``, ``acp[4243]``, ``services``.
    name: str
    session_addr: str
    lifecycle_addr: str
    gateway: str = ""
    pid: int = 0


def _unix_served(address: str) -> bool:
    return address.startswith("unix:") and socket_is_served(address.removeprefix("unix:"))


def find_targets(cfg: Config) -> list[Target]:
    """The install's running services, as described in the module doc (blocking)."""
    if cfg.services.session_addr or cfg.services.lifecycle_addr:
        return [Target("services", default_session_address(cfg),
                       default_lifecycle_address(cfg))]
    targets = [Target(e.name, e.session_addr, e.lifecycle_addr, e.gateway, e.pid)
               for e in live_endpoints(cfg.data_dir)]
    session_addr, lifecycle_addr = default_session_address(cfg), default_lifecycle_address(cfg)
    if not any(t.session_addr == session_addr for t in targets) and \
            _unix_served(session_addr) and _unix_served(lifecycle_addr):
        targets.append(Target("services", session_addr, lifecycle_addr))  # started by hand
    return targets


def operator_security(cfg: Config, environ: Mapping[str, str] | None = None) -> GrpcSecurity:
    """The install's service credential, read — never made: an install whose key file does
    not exist has never served (blocking)."""
    env = os.environ if environ is None else environ
    if cfg.services.token_env:
        if not env.get(cfg.services.token_env, "").strip():
            raise OpsError(f"[services] token_env names {cfg.services.token_env}, which is not "
                           "set here: set it to the install's service credential")
        return grpc_security(cfg, env)
    path = service_key_path(cfg.data_dir)
    if not path.exists():
        raise OpsError(f"no service key at {path}: no acpgate service has run on this data dir "
                       "(start one with `acpgate serve`, or open a session with `acpgate acp`)")
    try:
        return grpc_security(cfg, env)
    except ServiceKeyError as exc:
        raise OpsError(f"{exc} (run this as the user acpgate runs as)") from None


@dataclass
class Connected:
    """Stubs of both services of one target, carrying the credential."""

    target: Target
    session: session_pb2_grpc.SessionServiceAsyncStub
    lifecycle: lifecycle_pb2_grpc.LifecycleServiceAsyncStub


@contextlib.asynccontextmanager
async def connect(security: GrpcSecurity, target: Target) -> AsyncIterator[Connected]:
    """Channels to ``target``'s services for the duration of the block."""
    session = open_service_channel(security, target.session_addr)
    lifecycle = open_service_channel(security, target.lifecycle_addr)
    try:
        yield Connected(target, session_pb2_grpc.SessionServiceStub(session),
                        lifecycle_pb2_grpc.LifecycleServiceStub(lifecycle))
    finally:
        await session.close(None)
        await lifecycle.close(None)


@contextlib.asynccontextmanager
async def connect_all(security: GrpcSecurity,
                      targets: list[Target]) -> AsyncIterator[list[Connected]]:
    """:func:`connect` to every target at once."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(connect(security, t)) for t in targets]


def describe(exc: grpc.aio.AioRpcError, address: str) -> str:
    """A refused or failed call, in a sentence an operator can act on."""
    code = exc.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return (f"{address} refused the service credential (a service of another install, "
                "or a key changed since it started)")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return f"{address} does not answer ({code.name})"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return f"{address} is an older acpgate that does not answer this ({code.name})"
    return f"{address}: {code.name} {exc.details() or ''}".rstrip()


def relative_home(path: str | Path) -> str:
    """``path`` with the home directory written as ``~`` (shorter lines)."""
    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home):] if home != "/" and text.startswith(home + "/") else text
