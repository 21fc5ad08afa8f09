"""What ``acpgate serve`` supervises: its children, one :class:`ChildSpec` each, in start
order — the session service, the lifecycle service, and the edge, or with ``[gateway]
workers`` above one that many edge workers on the one port — and the
environment they run in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from services.common.addresses import LIFECYCLE_SERVICE, SESSION_SERVICE, service_addresses
from services.common.config import Config
from services.common.config.schema import worker_count

__all__ = ["ChildSpec", "child_environment", "child_specs", "edge_specs"]


@dataclass(frozen=True)
class ChildSpec:
    """One supervised child: its CLI sub-command and, for services, what to health-check."""

    name: str
    command: str
    health_address: str = ""
    health_service: str = ""
    #: Which edge worker this is (1…N, ``--worker``); 0 = the one edge (``workers = 1``).
    worker: int = 0


def child_environment(cfg: Config, base: Mapping[str, str]) -> dict[str, str]:
    """The children's environment: ``base`` plus both service addresses pinned.

    Pinning the addresses (``ACPGATE_services__*``) makes the edge dial exactly
    the sockets the services listen on, whatever defaults would say.
    """
    session_addr, lifecycle_addr = service_addresses(cfg)
    env = dict(base)
    env["ACPGATE_services__session_addr"] = session_addr
    env["ACPGATE_services__lifecycle_addr"] = lifecycle_addr
    return env


def edge_specs(cfg: Config, cores: int | None = None) -> list[ChildSpec]:
    """The edge children: one ``edge``, or with ``[gateway] workers`` above one, ``edge-1``
    … ``edge-N``, every one on the same inherited listening sockets."""
    count = worker_count(cfg.gateway.workers, os.cpu_count() if cores is None else cores)
    if count <= 1:
        return [ChildSpec("edge", "edge")]
    return [ChildSpec(f"edge-{n}", "edge", worker=n) for n in range(1, count + 1)]


def child_specs(cfg: Config) -> list[ChildSpec]:
    """session-service, lifecycle-service, the edge(s) — in start order."""
    session_addr, lifecycle_addr = service_addresses(cfg)
    return [
        ChildSpec("session", "session-service", session_addr, SESSION_SERVICE),
        ChildSpec("lifecycle", "lifecycle-service", lifecycle_addr, LIFECYCLE_SERVICE),
        *edge_specs(cfg),
    ]
