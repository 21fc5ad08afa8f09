"""Where the two gRPC services listen and what they are called (docs/contracts.md).

Every process that serves or dials a service reads its address here: the
services themselves (``acpgate session-service`` / ``lifecycle-service``), the
WebSocket edge, and ``acpgate serve``, which pins these addresses into its
children's environment. An empty ``[services]`` address means the unix socket
under ``<data dir>/run``; embedded mode (``acpgate acp``) picks its own private
sockets instead and does not use these defaults.
"""

from __future__ import annotations

from dataclasses import replace

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from acpgate_contracts.session.v1 import session_pb2
from services.common.config import Config

#: Full gRPC names of the services, as health checking and reflection know them.
SESSION_SERVICE = session_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name
LIFECYCLE_SERVICE = lifecycle_pb2.DESCRIPTOR.services_by_name["LifecycleService"].full_name


def default_session_address(cfg: Config) -> str:
    """``[services] session_addr``, else ``unix:<data dir>/run/session.sock``."""
    return cfg.services.session_addr or f"unix:{cfg.data_dir}/run/session.sock"


def default_lifecycle_address(cfg: Config) -> str:
    """``[services] lifecycle_addr``, else ``unix:<data dir>/run/lifecycle.sock``."""
    return cfg.services.lifecycle_addr or f"unix:{cfg.data_dir}/run/lifecycle.sock"


def service_addresses(cfg: Config) -> tuple[str, str]:
    """(session, lifecycle) addresses: ``[services]``, else the unix sockets under ``<data>/run``."""
    return default_session_address(cfg), default_lifecycle_address(cfg)


def with_service_addresses(cfg: Config) -> Config:
    """``cfg`` with both service addresses filled in (never embedded)."""
    session_addr, lifecycle_addr = service_addresses(cfg)
    return replace(
        cfg, services=replace(cfg.services, session_addr=session_addr, lifecycle_addr=lifecycle_addr)
    )


def gateway_url(cfg: Config, port: int | None = None) -> str:
    """The gateway's ``/acp`` URL as a client on this host dials it (``port``: the one
    bound, default ``[gateway] port``)."""
    gw = cfg.gateway
    scheme = "wss" if gw.tls.enabled else "ws"
    return f"{scheme}://{gw.host}:{gw.port if port is None else port}{gw.path_prefix}/acp"
