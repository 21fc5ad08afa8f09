"""The service skeleton of services/common/grpc_server: start, release, stop on a signal."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import textwrap
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from services.common.grpc_auth import GrpcSecurity
from services.common.grpc_channel import open_channel, wait_healthy
from services.common.grpc_server import start_service

REPO = Path(__file__).resolve().parents[2]
SERVICE = "acpgate.test.v1.Nothing"


def no_servicer(server: grpc.aio.Server) -> None:
    """The skeleton's own health and reflection services are all these tests need."""


class Closer:
    """Records when the service's resources were released."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1


async def test_service_serving_until_stopped_then_released(tmp_path: Path) -> None:
    close = Closer()
    address = f"unix:{tmp_path}/run/s.sock"
    running = await start_service(address, SERVICE, no_servicer, security=GrpcSecurity(token="t"), close=close)
    channel = running.dial()
    try:
        await wait_healthy(channel, SERVICE, within=5.0)
        assert close.calls == 0  # nothing released while serving
    finally:
        await channel.close()
    await running.stop()
    assert close.calls == 1
    assert not (tmp_path / "run" / "s.sock").exists()


async def test_a_server_that_cannot_start_releases_the_service(tmp_path: Path) -> None:
    # TLS on TCP with a key file that does not exist: the credentials cannot be read.
    security = GrpcSecurity(token="t", cert_file=str(tmp_path / "c.pem"),
                            key_file=str(tmp_path / "k.pem"))
    close = Closer()
    with pytest.raises(FileNotFoundError):
        await start_service("127.0.0.1:0", SERVICE, no_servicer, security=security, close=close)
    assert close.calls == 1


async def test_a_shared_token_guards_the_service_but_not_health(tmp_path: Path) -> None:
    close = Closer()
    running = await start_service(
        f"unix:{tmp_path}/s.sock", SERVICE, no_servicer, security=GrpcSecurity(token="t0k"),
        close=close,
    )
    channel = open_channel(running.address)  # no credential
    try:
        await wait_healthy(channel, SERVICE, within=5.0)  # health stays open
        list_services = channel.unary_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in list_services(b""):
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()
        await running.stop()
    assert close.calls == 1


SERVE_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from services.common.grpc_auth import GrpcSecurity
    from services.common.grpc_server import run_until_signalled, start_service
    from services.common.logs import get_logger, setup_logging

    async def main() -> int:
        async def close() -> None:
            print("released", flush=True)

        address = sys.argv[1]
        starting = start_service(address, "acpgate.test.v1.Nothing", lambda server: None,
                                 security=GrpcSecurity(token="t"), close=close)
        return await run_until_signalled(starting, address=address, log=get_logger("t"),
                                         stopped_event="test_service_stopped")

    setup_logging("info")
    sys.exit(asyncio.run(main()))
    """
)


@pytest.mark.slow
async def test_run_until_signalled_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    address = f"unix:{tmp_path}/s.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVE_SCRIPT, address,
        cwd=str(REPO), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        channel = open_channel(address)
        try:
            await wait_healthy(channel, SERVICE, within=20.0)
            stub = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            reply = await stub(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5.0)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await channel.close()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 20.0)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()
    assert stdout.decode().split() == ["released"]
    events = [json.loads(line)["event"] for line in stderr.decode().splitlines() if line.startswith("{")]
    assert "test_service_stopped" in events
    assert not (tmp_path / "s.sock").exists()
