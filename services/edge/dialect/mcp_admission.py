"""Which of a client's ``mcpServers`` a session may start: the edge's check.

``session/new``, ``session/load`` and ``session/resume`` pass their list — the
one the request carries, or the session's stored one a restore would send
again — through :func:`admitted_servers` before anything is created. For the
local stdio user the list passes as given. For a gateway client every entry
must have the ACP shape, be of a kind ``[gateway] client_mcp_servers`` allows,
and (HTTP/SSE) point at addresses it may reach
(:mod:`services.common.net_targets`); the first entry that fails refuses the
whole request with -32602 naming the server and why, and the admitted entries
go on in their checked ACP form, so an adapter never sees a field nobody checked.

For the built-in agent this is the first of two checks (it checks HTTP targets
again on the address it connects to); an external adapter (``kind = "acp"``)
connects and launches by itself, so for it this check is all acpgate does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from services.common.client_mcp import (
    MSG_MCP_MALFORMED,
    MSG_MCP_REFUSED,
    MSG_MCP_STORED,
)
from services.common.jsonrpc import JsonRpcError
from services.common.mcp_policy import ClientMcpRules
from services.common.mcp_servers import McpHttpServer, McpServerError, parse_server, to_json
from services.common.net_targets import (
    Resolver,
    TargetRefused,
    checked_addresses,
    system_resolver,
    url_target,
)
from services.common.protocol import (
    INVALID_PARAMS,
)

if TYPE_CHECKING:
    from services.edge.sessions.hub import EdgeHub
    from services.edge.sessions.session import EdgeSession

__all__ = ["admitted_servers", "client_mcp_rules"]


class _Home(Protocol):
    """What the rules depend on: the edge's config and whether the client is remote."""

    @property
    def remote(self) -> bool:
        """A gateway (remote) client, not the local stdio user."""

    @property
    def runtime(self) -> EdgeHub[EdgeSession]:
        """The edge's hub (its ``cfg``)."""


def client_mcp_rules(home: _Home) -> ClientMcpRules:
    """The rules for the ``mcpServers`` of ``home``'s client."""
    cfg = home.runtime.cfg
    return ClientMcpRules.for_connection(cfg.gateway.client_mcp_servers,
                                         cfg.gateway.client_mcp_allow_hosts, remote=home.remote)


def _refused(message: str, stored: bool) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS,
                        MSG_MCP_STORED.format(refusal=message) if stored else message)


async def admitted_servers(rules: ClientMcpRules, servers: list[Any], *, stored: bool = False,
                           resolve: Resolver = system_resolver) -> list[Any]:
    """The list to pass to the adapter (and store); -32602 for the first refused entry.

    ``stored``: the list is the session's stored one (the refusal says how to
    restore without it).
    """
    if not rules.remote:
        return servers
    allow = rules.allow_list()
    out: list[Any] = []
    for i, entry in enumerate(servers):
        try:
            spec = parse_server(entry, f"mcpServers[{i}]")
        except McpServerError as exc:
            raise _refused(MSG_MCP_MALFORMED.format(why=exc), stored) from None
        why = rules.kind_refusal(spec)
        if why is None and isinstance(spec, McpHttpServer):
            host, port = url_target(spec.url)
            try:
                await checked_addresses(host, port, allow, resolve)
            except TargetRefused as exc:
                why = str(exc)
        if why is not None:
            raise _refused(MSG_MCP_REFUSED.format(name=spec.name, why=why), stored)
        out.append(to_json(spec))
    return out
