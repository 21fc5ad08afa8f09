"""Which client-supplied MCP servers may run, and how.

A client's ``mcpServers`` are commands and URLs that acpgate's processes start
and connect to. Who passed them decides what they may be:

- the local user of ``acpgate acp`` (stdio) — like an editor that launches its
  MCP servers itself: every kind, run as today (unconfined, no approval);
- a gateway (remote) client — what ``[gateway] client_mcp_servers`` allows:
  ``none`` (the default), ``http`` (HTTP/SSE servers whose addresses are
  global or listed in ``client_mcp_allow_hosts``), ``all`` (also stdio servers,
  which the built-in agent then runs confined, with a filtered environment, and
  in ``supervised`` only after the client approved them).

The edge decides per connection (:meth:`ClientMcpRules.for_connection`) and
tells the built-in agent in ``_meta.acpgate.clientMcp`` (:meth:`to_meta`); the
agent never takes it from the client. Operator-configured ``[agents.<alias>]
mcp_servers`` are not the client's and are never subject to these rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.common.client_mcp import (
    CLIENT_MCP_ALL,
    CLIENT_MCP_CHOICES,
    CLIENT_MCP_NONE,
    MCP_WHY_KIND,
)
from services.common.mcp_servers import McpServerSpec, McpStdioServer
from services.common.net_targets import HostAllowList

__all__ = ["ClientMcpRules"]

_REMOTE = "remote"
_SERVERS = "servers"
_ALLOW_HOSTS = "allowHosts"


@dataclass(frozen=True)
class ClientMcpRules:
    """How the ``mcpServers`` of one connection's client may run.

    ``remote`` is False for the local stdio user (then nothing else applies);
    ``servers`` is ``[gateway] client_mcp_servers`` and ``allow_hosts`` its
    ``client_mcp_allow_hosts`` (already validated by the config loader).
    """

    remote: bool = False
    servers: str = CLIENT_MCP_ALL
    allow_hosts: tuple[str, ...] = ()

    @classmethod
    def for_connection(cls, servers: str, allow_hosts: tuple[str, ...], *,
                       remote: bool) -> ClientMcpRules:
        """The rules of a connection: the gateway's settings for a remote one, none for the
        local user."""
        if not remote:
            return cls()
        return cls(remote=True, servers=servers, allow_hosts=tuple(allow_hosts))

    @property
    def allows_http(self) -> bool:
        """HTTP/SSE servers may be passed at all (what ``initialize`` may advertise)."""
        return not self.remote or self.servers != CLIENT_MCP_NONE

    def allow_list(self) -> HostAllowList:
        """``allow_hosts`` parsed (they were checked when the config was loaded)."""
        try:
            return HostAllowList.parse(self.allow_hosts)
        except ValueError:  # not from a checked config: allow nothing extra
            return HostAllowList()

    def kind_refusal(self, spec: McpServerSpec) -> str | None:
        """Why the client may not pass a server of ``spec``'s transport; None when it may."""
        if not self.remote:
            return None
        if isinstance(spec, McpStdioServer):
            allowed = self.servers == CLIENT_MCP_ALL
        else:
            allowed = self.servers != CLIENT_MCP_NONE
        if allowed:
            return None
        return MCP_WHY_KIND.format(kind=spec.transport, setting=self.servers)

    def to_meta(self) -> dict[str, Any]:
        """The ``_meta.acpgate.clientMcp`` form the edge sends the built-in agent."""
        return {_REMOTE: self.remote, _SERVERS: self.servers,
                _ALLOW_HOSTS: list(self.allow_hosts)}

    @classmethod
    def from_meta(cls, value: Any) -> ClientMcpRules:
        """Parse :meth:`to_meta`; anything missing or malformed reads as the strictest rules
        (a remote client that may pass nothing): behind the edge, nothing else is safe."""
        strict = cls(remote=True, servers=CLIENT_MCP_NONE)
        if not isinstance(value, Mapping):
            return strict
        remote, servers = value.get(_REMOTE), value.get(_SERVERS)
        hosts = value.get(_ALLOW_HOSTS, [])
        if not isinstance(remote, bool) or servers not in CLIENT_MCP_CHOICES \
                or not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            return strict
        if not remote:
            return cls()
        return cls(remote=True, servers=str(servers), allow_hosts=tuple(hosts))
