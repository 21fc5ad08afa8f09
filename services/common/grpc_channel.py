"""Opening gRPC channels to the services and waiting for them to be healthy."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.grpc_limits import SERVER_OPTIONS


def open_channel(address: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.aio.Channel:
    """An aio channel to ``unix:/path`` or ``host:port``."""
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=SERVER_OPTIONS)
    return grpc.aio.insecure_channel(address, options=SERVER_OPTIONS)


async def wait_healthy(channel: grpc.aio.Channel, service: str = "", within: float = 10.0) -> None:
    """Wait until ``service`` on ``channel`` reports SERVING, or raise TimeoutError."""
    stub = health_pb2_grpc.HealthStub(channel)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: Exception | None = None
    while loop.time() < deadline:
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError as exc:
            last = exc
        await asyncio.sleep(0.05)
    raise TimeoutError(f"gRPC service {service or '<server>'} not healthy: {last}")
