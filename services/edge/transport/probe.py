"""How the gateway sees the two services: gRPC health and lease counts (SPEC §11).

``/healthz`` and ``/metrics`` ask a :class:`ServiceProbe`; ``acpgate edge`` waits
with :func:`wait_for_services` until both services answer SERVING before it
opens its port. The probe has its own channels, so a health check still
answers while the runtime's channels are busy relaying.
"""

from __future__ import annotations

import asyncio

from services.common.addresses import LIFECYCLE_SERVICE, SESSION_SERVICE
from services.common.grpc_auth import GrpcSecurity
from services.common.logs import get_logger
from services.edge.backends.channels import Channel, dial, serving_status
from services.edge.backends.errors import ServiceError
from services.edge.backends.lifecycle import LifecycleBackend
from services.edge.backends.session import SessionBackend

log = get_logger("edge.ws")


class ServiceProbe:
    """gRPC health of both services and lease counts, for ``/healthz`` and ``/metrics``."""

    def __init__(self, sec: GrpcSecurity, session_addr: str, lifecycle_addr: str) -> None:
        self._channels = {
            "session": (dial(sec, session_addr), SESSION_SERVICE),
            "lifecycle": (dial(sec, lifecycle_addr), LIFECYCLE_SERVICE),
        }
        self._lifecycle = LifecycleBackend(self._channels["lifecycle"][0])

    async def _check(self, channel: Channel, service: str) -> str:
        return await serving_status(channel, service, wait_secs=2.0)

    async def health(self) -> dict[str, str]:
        """service name → serving status."""
        names = list(self._channels)
        states = await asyncio.gather(*(self._check(*self._channels[n]) for n in names))
        return dict(zip(names, states, strict=True))

    async def store(self) -> dict[str, object] | None:
        """``{"persistent": false, "reason": …}`` when the session service keeps sessions in
        memory; None when it stores them (or does not answer: its health says so)."""
        channel = self._channels["session"][0]
        try:
            status = await SessionBackend(channel).store_status(deadline_secs=2.0)
        except ServiceError:
            return None
        if status.persistent:
            return None
        return {"persistent": False, "reason": status.fallback_reason}

    async def leases_by_state(self) -> dict[str, int] | None:
        """Lease counts by lowercase state name, or ``None`` when the service is unreachable."""
        try:
            leases = await self._lifecycle.list_leases(wait_secs=3.0)
        except ServiceError:
            return None
        out: dict[str, int] = {}
        for lease in leases:
            out[lease.state.value] = out.get(lease.state.value, 0) + 1
        return out

    async def close(self) -> None:
        """Close both channels."""
        for channel, _ in self._channels.values():
            await channel.close(grace=None)


async def wait_for_services(probe: ServiceProbe, stop: asyncio.Event,
                            within: float = 60.0) -> bool:
    """Wait until both services report SERVING (or a signal, or ``within`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    states: dict[str, str] = {}
    while not stop.is_set() and loop.time() < deadline:
        states = await probe.health()
        if all(s == "SERVING" for s in states.values()):
            return True
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except TimeoutError:
            pass
    if not stop.is_set():
        log.error("edge_services_unavailable", services=states)
    return False
