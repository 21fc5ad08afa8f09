"""Protocol constants of the client-supplied MCP servers policy: the ``[gateway]
client_mcp_servers`` values and the refusals' messages (-32602 on session/new, load, resume).
"""

from __future__ import annotations

from typing import Final

#: ``[gateway] client_mcp_servers``: which ``mcpServers`` a gateway (remote) client may pass.
CLIENT_MCP_NONE: Final = "none"
CLIENT_MCP_HTTP: Final = "http"
CLIENT_MCP_ALL: Final = "all"
CLIENT_MCP_CHOICES: Final = (CLIENT_MCP_NONE, CLIENT_MCP_HTTP, CLIENT_MCP_ALL)
#: A refused ``mcpServers`` entry (-32602 on session/new, load, resume): its name and why.
MSG_MCP_REFUSED: Final = 'MCP server "{name}": {why}'
#: An entry that does not have the ACP shape (a gateway client's: it cannot be checked).
MSG_MCP_MALFORMED: Final = "MCP server refused: {why}"
MCP_WHY_KIND: Final = (
    '{kind} servers from gateway clients are not allowed ([gateway] client_mcp_servers = '
    '"{setting}")'
)
#: ``target``: the URL's host, with the address it resolved to when it is a name.
MCP_WHY_ADDRESS: Final = (
    "{target} is a {what} address, which gateway clients may not reach (an operator may "
    "allow it with [gateway] client_mcp_allow_hosts)"
)
MCP_WHY_UNRESOLVED: Final = "{host} cannot be resolved ({reason}), so its address cannot be checked"
#: Added when the refused entry is one of the session's stored servers (load/resume).
MSG_MCP_STORED: Final = (
    "{refusal} — it is one of the session's stored MCP servers; pass `mcpServers` "
    "(e.g. []) to restore the session without them"
)
