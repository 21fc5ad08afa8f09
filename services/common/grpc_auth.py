"""Authentication of every gRPC call, and optional TLS, between acpgate's processes.

The session and lifecycle services decide and spawn for whoever calls them, so
no call is served without the install's **service credential**
(:mod:`services.common.service_key`: ``[services] token_env``'s variable, else
the per-install key file), on TCP and unix sockets alike (a shell
command an agent runs can reach the sockets, and must get nothing there). Every
call carries ``authorization: Bearer <credential>`` metadata, compared in
constant time; anything else is ``UNAUTHENTICATED``. Health checks stay open so
container probes need no secret; they reveal nothing but SERVING. An in-process
channel (``services.common.inproc``) carries no token: its caller is the process
that holds the servicers.

**TLS** (TCP addresses only): ``ACPGATE_GRPC_TLS_CERT`` + ``ACPGATE_GRPC_TLS_KEY``
make a server listen with TLS; ``ACPGATE_GRPC_TLS_CA`` (optional, else the
system roots) is what clients trust; ``ACPGATE_GRPC_TLS`` = ``1`` makes a client
use TLS when it has no CA file of its own.

Servers: ``start_server(address, …, interceptors=server_interceptors(sec),
credentials=server_credentials(sec, address))``. Clients:
``open_service_channel(sec, address)``.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from services.common.config import Config
from services.common.grpc_limits import SERVER_OPTIONS
from services.common.service_key import load_or_create_key, seal_key, service_key_path

ENV_TLS_CERT = "ACPGATE_GRPC_TLS_CERT"
ENV_TLS_KEY = "ACPGATE_GRPC_TLS_KEY"
ENV_TLS_CA = "ACPGATE_GRPC_TLS_CA"
ENV_TLS_CLIENT = "ACPGATE_GRPC_TLS"
AUTH_METADATA_KEY = "authorization"
#: Methods callable without the token (container health probes).
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)


@dataclass(frozen=True)
class GrpcSecurity:
    """The effective gRPC security settings of one process (token never logged).

    ``token`` is the service credential every call carries; a server refuses to
    start without one.
    """

    token: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    client_tls: bool = False

    def __repr__(self) -> str:
        return (
            f"GrpcSecurity(token={'<set>' if self.token else '<none>'}, "
            f"cert_file={self.cert_file!r}, key_file={self.key_file!r}, "
            f"ca_file={self.ca_file!r}, client_tls={self.client_tls})"
        )

    @property
    def server_tls(self) -> bool:
        """True when a server should listen with TLS on TCP addresses."""
        return bool(self.cert_file and self.key_file)

    @property
    def wants_client_tls(self) -> bool:
        """True when clients should dial TCP addresses with TLS."""
        return self.client_tls or bool(self.ca_file)

    @property
    def seal_key(self) -> bytes:
        """The key launch specs are sealed with (derived from the credential)."""
        return seal_key(self.token)


def grpc_security(cfg: Config, environ: Mapping[str, str] | None = None, *,
                  credential: str = "") -> GrpcSecurity:
    """The service credential — ``credential`` when given, else ``[services] token_env``'s
    variable when it is set, else the install's key file, created on first use (blocking;
    start-up only) — and the TLS files from the environment. ``ServiceKeyError`` when the
    key file cannot be read or made."""
    env = os.environ if environ is None else environ
    token = credential
    if not token and cfg.services.token_env:
        token = env.get(cfg.services.token_env, "").strip()
    if not token:
        token = load_or_create_key(service_key_path(cfg.data_dir))
    return GrpcSecurity(
        token=token,
        cert_file=env.get(ENV_TLS_CERT, ""),
        key_file=env.get(ENV_TLS_KEY, ""),
        ca_file=env.get(ENV_TLS_CA, ""),
        client_tls=env.get(ENV_TLS_CLIENT, "").strip().lower() in ("1", "true", "yes", "on"),
    )


async def load_security(cfg: Config) -> GrpcSecurity:
    """:func:`grpc_security` off the event loop (it may create the key file)."""
    return await asyncio.to_thread(grpc_security, cfg)


def is_unix(address: str) -> bool:
    """True for ``unix:`` addresses (never TLS: the socket's file mode protects it)."""
    return address.startswith("unix:")


# --------------------------------------------------------------------- server side


def _abort_handler(
    handler: grpc.RpcMethodHandler, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that fails with UNAUTHENTICATED."""

    async def abort_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def abort_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator

    des = handler.request_deserializer
    ser = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream, des, ser)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort_unary, des, ser)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort_stream, des, ser)
    return grpc.unary_unary_rpc_method_handler(abort_unary, des, ser)


class SharedTokenServerInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls whose ``authorization`` metadata is not ``Bearer <the credential>``."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """Pass authorised (and health) calls on; answer the rest UNAUTHENTICATED."""
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        presented = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTH_METADATA_KEY:
                presented = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(presented, self._expected):
            return handler
        return _abort_handler(handler, "missing or wrong service token")


def server_interceptors(sec: GrpcSecurity) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors a service server installs: the credential check, always."""
    if not sec.token:
        raise ValueError("a service serves no call without a service credential")
    return [SharedTokenServerInterceptor(sec.token)]


def server_credentials(sec: GrpcSecurity, address: str) -> grpc.ServerCredentials | None:
    """TLS server credentials for a TCP address when cert and key are configured."""
    if is_unix(address) or not sec.server_tls:
        return None
    key = Path(sec.key_file).read_bytes()
    cert = Path(sec.cert_file).read_bytes()
    return grpc.ssl_server_credentials([(key, cert)])


# --------------------------------------------------------------------- client side


def _with_token(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = list(details.metadata or ())
    metadata.append((AUTH_METADATA_KEY, f"Bearer {token}"))
    return grpc.aio.ClientCallDetails(
        method=details.method,
        timeout=details.timeout,
        metadata=grpc.aio.Metadata(*metadata),
        credentials=details.credentials,
        wait_for_ready=details.wait_for_ready,
    )


class _TokenHolder:
    """The shared token of the four interceptors below.

    Four classes, not one implementing every kind: grpc.aio files an interceptor
    under the first call kind it implements only (an if/elif chain).
    """

    def __init__(self, token: str) -> None:
        self._token = token


class _TokenUnaryUnary(_TokenHolder, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Add the bearer token to a unary-unary call."""
        return await continuation(_with_token(client_call_details, self._token), request)


class _TokenUnaryStream(_TokenHolder, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        """Add the bearer token to a unary-stream call."""
        return await continuation(_with_token(client_call_details, self._token), request)


class _TokenStreamUnary(_TokenHolder, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Add the bearer token to a stream-unary call."""
        return await continuation(_with_token(client_call_details, self._token), request_iterator)


class _TokenStreamStream(_TokenHolder, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        """Add the bearer token to a stream-stream call."""
        return await continuation(_with_token(client_call_details, self._token), request_iterator)


def client_interceptors(sec: GrpcSecurity) -> list[Any]:
    """Interceptors that attach the credential to every call kind (empty without one)."""
    if not sec.token:
        return []
    return [
        _TokenUnaryUnary(sec.token),
        _TokenUnaryStream(sec.token),
        _TokenStreamUnary(sec.token),
        _TokenStreamStream(sec.token),
    ]


#: gRPC's default reconnect backoff grows to minutes: a lifecycle service restarted by
#: ``acpgate serve`` is back in about a second, and its streams re-attach at once.
RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)


def channel_credentials(sec: GrpcSecurity, address: str) -> grpc.ChannelCredentials | None:
    """TLS channel credentials for a TCP address when client TLS is configured."""
    if is_unix(address) or not sec.wants_client_tls:
        return None
    roots = Path(sec.ca_file).read_bytes() if sec.ca_file else None
    return grpc.ssl_channel_credentials(root_certificates=roots)


def open_service_channel(
    sec: GrpcSecurity, address: str, options: Sequence[tuple[str, Any]] = SERVER_OPTIONS
) -> grpc.aio.Channel:
    """An aio channel to a service with the token interceptors and TLS as configured, which
    dials a restarted service again within half a second (:data:`RECONNECT_OPTIONS`)."""
    options = [*options, *RECONNECT_OPTIONS]
    interceptors = client_interceptors(sec) or None
    creds = channel_credentials(sec, address)
    if creds is not None:
        return grpc.aio.secure_channel(address, creds, options=list(options), interceptors=interceptors)
    return grpc.aio.insecure_channel(address, options=list(options), interceptors=interceptors)
