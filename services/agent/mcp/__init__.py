"""MCP servers as tools of the built-in agent (the official ``mcp`` SDK as the client).

| module | job |
|---|---|
| ``servers.py`` | a session's servers: the operator's and the client's list, started together |
| ``launch.py`` | launch settings, states and failures (no SDK import: see ``servers.py``) |
| ``connection.py`` | one server: start, list, call, restart when lost, stop |
| ``stdio.py`` | the stdio transport: the server stays in the lease's process group |
| ``tool.py`` | one remote tool as an agent tool (``<server>__<tool>``) |
| ``naming.py`` | exposed tool names in the alphabet model APIs accept |
| ``results.py`` | ``CallToolResult`` → model text (SPEC §4 blob rule) and ACP content |
"""

from services.agent.mcp.launch import Launch
from services.agent.mcp.servers import SessionMcp

__all__ = ["Launch", "SessionMcp"]
