"""The edge's connections to the two services: dialling, health, closing.

A :data:`Channel` is an opaque handle to one service; the backends
(:class:`~.session.SessionBackend`, :class:`~.lifecycle.LifecycleBackend`) are built on
one each. Dialled channels carry the install's service credential on every call
(:func:`~services.common.grpc_auth.open_service_channel`).
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.grpc_auth import GrpcSecurity, open_service_channel
from services.common.grpc_channel import wait_healthy

__all__ = ["UNREACHABLE", "Channel", "dial", "serving_status", "wait_serving"]

#: A connection to one service (gRPC underneath; only the backends look inside).
Channel = grpc.aio.Channel
#: :func:`serving_status` of a service that did not answer.
UNREACHABLE = "UNREACHABLE"


def dial(security: GrpcSecurity | None, address: str) -> Channel:
    """A channel to a service at ``address``, every call carrying ``security``'s credential;
    ValueError without one."""
    if security is None:
        raise ValueError(f"no service credential to dial {address}")
    return open_service_channel(security, address)


async def wait_serving(channel: Channel, *, within: float) -> None:
    """Return once the service behind ``channel`` reports SERVING; TimeoutError (naming the
    last failure) after ``within`` seconds."""
    await wait_healthy(channel, within=within)


async def serving_status(channel: Channel, service: str, *, wait_secs: float) -> str:
    """The standard health status of ``service`` on ``channel`` (``SERVING``,
    ``NOT_SERVING``…), or :data:`UNREACHABLE` when no answer came within ``wait_secs``."""
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=wait_secs)
    except grpc.aio.AioRpcError:
        return UNREACHABLE
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
