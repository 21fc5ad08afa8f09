"""The service credential, its interceptors and TLS (services/common/grpc_auth)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.config import ServicesSection, load_config, with_overrides
from services.common.grpc_auth import (
    GrpcSecurity,
    grpc_security,
    open_service_channel,
    server_credentials,
    server_interceptors,
)
from services.common.grpc_server import start_server
from services.common.service_key import ServiceKeyError, service_key_path

SERVICE = "acpgate.lifecycle.v1.LifecycleService"


class _Instance(lifecycle_pb2_grpc.LifecycleServiceServicer):
    """A one-method servicer: enough to see calls pass or fail the interceptor."""

    async def GetInstance(self, request: Any, context: Any) -> lifecycle_pb2.Instance:
        return lifecycle_pb2.Instance(gateway_instance_id="gw-test")

    async def ListLeases(self, request: Any, context: Any) -> lifecycle_pb2.ListLeasesResponse:
        return lifecycle_pb2.ListLeasesResponse()


async def _start(sec: GrpcSecurity, address: str):
    return await start_server(
        address,
        lambda s: lifecycle_pb2_grpc.add_LifecycleServiceServicer_to_server(
            _Instance(), s),  # type: ignore[abstract]
        [SERVICE],
        interceptors=server_interceptors(sec),
        credentials=server_credentials(sec, address),
    )


def test_security_from_env(tmp_path: Path) -> None:
    cfg = with_overrides(load_config(tmp_path, environ={}),
                         services=ServicesSection(token_env="MY_TOKEN"))
    sec = grpc_security(cfg, {"MY_TOKEN": " s3cret ", "ACPGATE_GRPC_TLS": "1"})
    assert sec.token == "s3cret" and sec.wants_client_tls and not sec.server_tls
    assert "s3cret" not in repr(sec)
    # No token_env (or its variable unset): the install's key file, made once, owner-only.
    plain = load_config(tmp_path, environ={})
    key = grpc_security(plain, {"MY_TOKEN": "x"}).token
    assert len(key) == 64 and key == grpc_security(plain, {}).token
    key_file = service_key_path(plain.data_dir)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert grpc_security(cfg, {"MY_TOKEN": ""}).token == key
    assert grpc_security(cfg, {}, credential="given").token == "given"


def test_an_unreadable_key_file_is_a_clear_error(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, environ={})
    key_file = service_key_path(cfg.data_dir)
    key_file.parent.mkdir(parents=True)
    key_file.write_text("short\n")
    with pytest.raises(ServiceKeyError, match="does not hold a service key"):
        grpc_security(cfg, {})


def test_a_server_without_a_credential_refuses_to_start() -> None:
    with pytest.raises(ValueError, match="service credential"):
        server_interceptors(GrpcSecurity())


async def test_token_required_over_tcp(tmp_path: Path) -> None:
    server = await _start(GrpcSecurity(token="right"), "127.0.0.1:0")
    try:
        for token, ok in (("right", True), ("wrong", False), ("", False)):
            channel = open_service_channel(GrpcSecurity(token=token), server.address)
            stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
            if ok:
                reply = await stub.GetInstance(lifecycle_pb2.GetInstanceRequest(), timeout=5)
                assert reply.gateway_instance_id == "gw-test"
            else:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.GetInstance(lifecycle_pb2.GetInstanceRequest(), timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # Health stays open for container probes.
            health = health_pb2_grpc.HealthStub(channel)
            status = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
            assert status.status == health_pb2.HealthCheckResponse.SERVING
            await channel.close(grace=None)
    finally:
        await server.stop(0)


async def test_unix_sockets_check_the_credential_too(tmp_path: Path) -> None:
    address = f"unix:{tmp_path}/s.sock"
    server = await _start(GrpcSecurity(token="right"), address)
    try:
        for token, ok in (("right", True), ("wrong", False), ("", False)):
            channel = open_service_channel(GrpcSecurity(token=token), address)
            stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
            if ok:
                reply = await stub.ListLeases(lifecycle_pb2.ListLeasesRequest(), timeout=5)
                assert reply.leases == []
            else:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.ListLeases(lifecycle_pb2.ListLeasesRequest(), timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            await channel.close(grace=None)
    finally:
        await server.stop(0)


async def test_tls_with_token(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_sec = GrpcSecurity(token="t", cert_file=str(cert), key_file=str(key))
    server = await _start(server_sec, "127.0.0.1:0")
    try:
        port = server.address.rsplit(":", 1)[1]
        channel = open_service_channel(GrpcSecurity(token="t", ca_file=str(cert)), f"localhost:{port}")
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        reply = await stub.GetInstance(lifecycle_pb2.GetInstanceRequest(), timeout=5)
        assert reply.gateway_instance_id == "gw-test"
        await channel.close(grace=None)
        # A plaintext client cannot talk to the TLS server.
        plain = open_service_channel(GrpcSecurity(token="t"), f"localhost:{port}")
        with pytest.raises(grpc.aio.AioRpcError):
            await lifecycle_pb2_grpc.LifecycleServiceStub(plain).GetInstance(
                lifecycle_pb2.GetInstanceRequest(), timeout=3)
        await plain.close(grace=None)
    finally:
        await server.stop(0)
