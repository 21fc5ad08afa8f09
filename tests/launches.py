"""Test helpers for talking to acpgate's gRPC services as acpgate itself does.

Every call to a service carries the install's service credential, and the
lifecycle service runs only launch specs the session service sealed. Tests that
call the lifecycle service directly stand in for the session service: they seal
their test adapters' specs with the same seal key the server derives from its
credential — exactly what the session service does for configured agents.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from acpgate_contracts.launch.v1 import launch_pb2
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity, grpc_security, open_service_channel
from services.common.grpc_server import RunningServer
from services.common.launch_seal import seal_of
from services.common.private_files import private_dir, private_file
from services.common.service_key import service_key_path

KeySource = RunningServer | Config | GrpcSecurity | bytes

#: The service key tests write into their installs (:func:`install_test_key`), so that
#: helpers can seal and dial without being handed a server.
TEST_SERVICE_KEY = "7e57" * 16
TEST_SECURITY = GrpcSecurity(token=TEST_SERVICE_KEY)


def install_test_key(cfg: Config) -> None:
    """Make :data:`TEST_SERVICE_KEY` the install's service key (as a first start would make
    a random one: ``<data dir>/run/service.key``, owner-only)."""
    path = service_key_path(cfg.data_dir)
    private_dir(path.parent)
    private_file(path)
    path.write_text(TEST_SERVICE_KEY + "\n", encoding="ascii")


def seal_key_of(source: KeySource | None) -> bytes:
    """The seal key of a started server, of an install (its key file), of a credential
    (None: the test key, :func:`install_test_key`)."""
    if source is None:
        return TEST_SECURITY.seal_key
    if isinstance(source, bytes):
        return source
    if isinstance(source, RunningServer):
        assert source.security is not None
        return source.security.seal_key
    if isinstance(source, Config):
        return grpc_security(source, {}).seal_key
    return source.seal_key


def sealed(source: KeySource | None, command: str, args: Sequence[str] = (),
           env: Mapping[str, str] | None = None, pass_env: Sequence[str] = (),
           alias: str = "test") -> launch_pb2.SealedLaunch:
    """A launch spec of ``command`` sealed as the session service would seal it."""
    spec = launch_pb2.LaunchSpec(alias=alias, kind="acp", command=command, args=list(args),
                                 env=dict(env or {}), pass_env=list(pass_env))
    data = spec.SerializeToString(deterministic=True)
    return launch_pb2.SealedLaunch(spec=data, seal=seal_of(seal_key_of(source), data))


def ensure_request(source: KeySource | None = None, *, session_key: str = "", command: str = "",
                   args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                   pass_env: Sequence[str] = (), **fields: Any) -> pb.EnsureSessionRequest:
    """``EnsureSessionRequest`` for ``command`` (sealed); other fields (cwd, warm_pool,
    warm_only) as given. An empty ``command`` leaves the launch out."""
    request = pb.EnsureSessionRequest(session_key=session_key, **fields)
    if command:
        request.launch.CopyFrom(sealed(source, command, args, env, pass_env))
    return request


def keep_request(source: KeySource | None = None, *, command: str = "", args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, pass_env: Sequence[str] = (),
                 **fields: Any) -> pb.KeepWarmRequest:
    """``KeepWarmRequest`` for ``command`` (sealed); other fields as given."""
    request = pb.KeepWarmRequest(**fields)
    if command:
        request.launch.CopyFrom(sealed(source, command, args, env, pass_env))
    return request


def dial(cfg: Config, address: str) -> grpc.aio.Channel:
    """A channel to one of ``cfg``'s install's services, carrying its credential."""
    return open_service_channel(grpc_security(cfg, {}), address)


def service_channel(address: str) -> grpc.aio.Channel:
    """A channel to a service of an install holding :data:`TEST_SERVICE_KEY`."""
    return open_service_channel(TEST_SECURITY, address)


#: The environment variable that picks the adapters' data path.
DATA_PATH_ENV = "ACPGATE_services__data_path"


def config_environ() -> dict[str, str]:
    """What of the test run's environment a config loaded in a test takes: only
    ``[services] data_path`` (``ACPGATE_services__data_path=grpc pytest …`` runs the
    adapters' lines over the Attach stream; unset, the default: their pipes where the
    lifecycle service shares the host)."""
    value = os.environ.get(DATA_PATH_ENV)
    return {DATA_PATH_ENV: value} if value else {}
