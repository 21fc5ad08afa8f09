"""Sealing what an alias launches: the session service's half of the seal.

The lifecycle service runs only launch specs this service resolved from
configuration and sealed (``services.common.launch_seal``); every
``ResolvedAgent`` answer carries its alias's sealed spec, which the edge passes
on unchanged to ``EnsureSession``/``KeepWarm``.
"""

from __future__ import annotations

from acpgate_contracts.launch.v1 import launch_pb2
from services.common.launch_seal import seal_of
from services.session.decisions.aliases import AgentLaunch

__all__ = ["launch_spec_pb", "seal_launch"]


def launch_spec_pb(launch: AgentLaunch) -> launch_pb2.LaunchSpec:
    """The ``LaunchSpec`` of ``launch``."""
    return launch_pb2.LaunchSpec(alias=launch.alias, kind=launch.kind, command=launch.command,
                                 args=list(launch.args), env=dict(launch.env),
                                 pass_env=list(launch.pass_env))


def seal_launch(launch: AgentLaunch, key: bytes) -> launch_pb2.SealedLaunch:
    """``launch``'s spec, serialized deterministically (map keys sorted: the same launch
    always yields the same bytes) and sealed with ``key``."""
    spec = launch_spec_pb(launch).SerializeToString(deterministic=True)
    return launch_pb2.SealedLaunch(spec=spec, seal=seal_of(key, spec))
