"""Every plain HTTP request on the gateway's port: ``/healthz``, ``/metrics``, ``/acp``, and
the web console's static files (``/``, ``/console/…``: :mod:`services.edge.transport.console`).

``/acp`` (with the configured prefix) is Streamable HTTP: the ``Origin`` is
checked first (browsers only as ``[gateway] allowed_origins`` allows; their
preflight answered), then the token — bearer header or ``?token=``, exactly as
for a WebSocket: 401 without a valid one — and the request goes to the
:class:`~.streamable.endpoint.StreamableEndpoint`. The two plain endpoints
answer without a token, as they always did, and so does the console (its files hold
only code; what it shows it asks over ``/acp`` with the token). Any other path is
404; another method on ``/acp`` 405.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from services.common.remote_transport import CONTENT_TYPE_JSON
from services.edge.caller import Caller
from services.edge.transport.console import ConsoleFiles
from services.edge.transport.exchange import HttpRequest, HttpResponse, respond
from services.edge.transport.http import PROMETHEUS_CONTENT_TYPE
from services.edge.transport.origin import OriginPolicy
from services.edge.transport.streamable.endpoint import StreamableEndpoint

__all__ = ["UNAUTHORIZED_BODY", "GatewayRoutes"]

UNAUTHORIZED_BODY = ("Unauthorized: send a gateway token as 'Authorization: Bearer <token>', "
                     "a 'bearer.<token>' subprotocol entry, or '?token=<token>'.\n")
_METHODS = ("GET", "POST", "DELETE")


@dataclass(frozen=True)
class GatewayRoutes:
    """The HTTP app of the gateway (called by the HTTP/1.1 and HTTP/2 connections)."""

    acp_path: str
    health_paths: frozenset[str]
    metrics_paths: frozenset[str]
    #: (status, JSON body) of ``/healthz``.
    health: Callable[[], Awaitable[tuple[int, str]]]
    #: The Prometheus text of ``/metrics``.
    metrics: Callable[[], Awaitable[str]]
    #: Who a request acts as, or None (then 401); counts and logs the refusal itself.
    authenticate: Callable[[HttpRequest], Awaitable[Caller | None]]
    origins: OriginPolicy
    endpoint: StreamableEndpoint
    #: The console's page and files (under the same prefix as ``/acp``).
    console: ConsoleFiles = field(default_factory=ConsoleFiles)

    def __post_init__(self) -> None:
        prefix = self.acp_path.removesuffix("/acp")
        if prefix:  # the console lives beside /acp, under the same prefix
            object.__setattr__(self, "console", ConsoleFiles(prefix))

    async def __call__(self, request: HttpRequest, response: HttpResponse) -> None:
        """Answer ``request``."""
        path = request.path
        if path in self.health_paths:
            status, body = await self.health()
            await respond(response, status, body, CONTENT_TYPE_JSON)
        elif path in self.metrics_paths:
            await respond(response, 200, await self.metrics(), PROMETHEUS_CONTENT_TYPE)
        elif path != self.acp_path:
            await self.console.serve(request, response)
        else:
            await self._acp(request, response)

    async def _acp(self, request: HttpRequest, response: HttpResponse) -> None:
        origin = request.headers.get("origin")
        if not self.origins.admits(origin):  # the console's own page uses the WebSocket
            await respond(response, 403, "Origin not allowed: a browser page may use this "
                                         "gateway only when [gateway] allowed_origins lists "
                                         "its origin\n")
            return
        cors = self.origins.cors(origin)
        if request.method == "OPTIONS":
            await respond(response, 204, headers=self.origins.preflight(origin))
            return
        if request.method not in _METHODS:
            await respond(response, 405, "Method Not Allowed\n",
                          headers=[*cors, ("allow", "GET, POST, DELETE, OPTIONS")])
            return
        if "websocket" in request.headers.tokens("upgrade") or request.method == "CONNECT":
            await respond(response, 400, "WebSocket upgrades are served over HTTP/1.1 "
                                         "(GET with Upgrade: websocket)\n", headers=cors)
            return
        caller = await self.authenticate(request)
        if caller is None:
            await respond(response, 401, UNAUTHORIZED_BODY,
                          headers=[*cors, ("www-authenticate", 'Bearer realm="acpgate"')])
            return
        await self.endpoint.handle(request, response, caller, cors)
