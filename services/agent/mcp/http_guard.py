"""HTTP clients for the MCP transports; a gateway client's only reach addresses it may.

The edge checked a gateway client's HTTP/SSE URL when the session was set up,
but a host name may resolve elsewhere by the time the agent connects (DNS
rebinding: public at ``session/new``, ``127.0.0.1`` a second later). So the
client of such a server resolves the host itself on every new connection,
checks every address (:func:`services.common.net_targets.checked_addresses`)
and connects to exactly those addresses — never resolving again in between.
TLS still verifies the URL's host name. Proxies from the environment are not
used for these servers: through a proxy, the address connected to would be
the proxy's, not the target's.

The operator's servers and the local stdio user's use plain clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpcore2
import httpx2
from mcp.client.streamable_http import streamable_http_client

from services.common.mcp_servers import McpHttpServer
from services.common.net_targets import HostAllowList, Resolver, TargetRefused, checked_addresses

__all__ = ["CheckedBackend", "ClientFactory", "checked_client_factory", "open_http"]

#: HTTP timeouts: connect/write, and the idle read of a response or event stream.
HTTP_TIMEOUT_SECS = 30.0
HTTP_READ_TIMEOUT_SECS = 300.0


class ClientFactory:
    """Makes the ``httpx2.AsyncClient`` of one MCP transport (the SDK's factory shape)."""

    def __call__(self, headers: dict[str, str] | None = None,
                 timeout: httpx2.Timeout | None = None,
                 auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        """A plain client (redirects off, the httpx default; the SDK follows same-origin
        ones itself)."""
        return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth)


class CheckedBackend(httpcore2.AsyncNetworkBackend):
    """A network backend that connects only to checked addresses of the host asked for."""

    def __init__(self, allow: HostAllowList, resolve: Resolver,
                 inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self._allow = allow
        self._resolve = resolve
        self._inner = inner if inner is not None else httpcore2.AnyIOBackend()

    # The signatures are httpcore2's network backend interface (``timeout`` included).
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None,
                          ) -> httpcore2.AsyncNetworkStream:
        """Resolve, check every address (:class:`TargetRefused` if one may not be reached),
        then connect to the first that answers."""
        addresses = await checked_addresses(host, port, self._allow, self._resolve)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # checked_addresses never returns an empty list
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109
                                  socket_options: Iterable[Any] | None = None,
                                  ) -> httpcore2.AsyncNetworkStream:
        """Never: a URL names no unix socket, and none is configured."""
        raise TargetRefused("a unix socket is not a reachable MCP target")

    async def sleep(self, seconds: float) -> None:
        """The inner backend's sleep."""
        await self._inner.sleep(seconds)


class _CheckedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's own transport (request mapping, errors), on a pool whose connections go
    through :class:`CheckedBackend`."""

    def __init__(self, backend: CheckedBackend) -> None:
        super().__init__(trust_env=False)
        # httpx2 takes no network backend of its own; its connection pool does.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(), network_backend=backend)


class _CheckedFactory(ClientFactory):
    def __init__(self, allow: HostAllowList, resolve: Resolver) -> None:
        self._allow = allow
        self._resolve = resolve

    def __call__(self, headers: dict[str, str] | None = None,
                 timeout: httpx2.Timeout | None = None,
                 auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        """A client on :class:`_CheckedTransport`, proxies from the environment ignored."""
        return httpx2.AsyncClient(
            headers=headers, timeout=timeout, auth=auth, trust_env=False,
            transport=_CheckedTransport(CheckedBackend(self._allow, self._resolve)))


def checked_client_factory(allow: HostAllowList, resolve: Resolver) -> ClientFactory:
    """The client factory of a gateway client's HTTP/SSE server."""
    return _CheckedFactory(allow, resolve)


@asynccontextmanager
async def open_http(spec: McpHttpServer, factory: ClientFactory) -> AsyncIterator[tuple[Any, Any]]:
    """The streamable-HTTP transport (the SDK's read and write streams) on a client of
    ``factory`` that carries the server's headers."""
    timeout = httpx2.Timeout(HTTP_TIMEOUT_SECS, read=HTTP_READ_TIMEOUT_SECS)
    async with factory(headers=dict(spec.headers), timeout=timeout) as http, \
            streamable_http_client(spec.url, http_client=http) as streams:
        yield streams
