"""The configuration keys limited to a fixed set of values, and those sets.

``coerce`` refuses any other value for a key named in :data:`CHOICES`, naming
the allowed ones; the sets themselves are read wherever a value is interpreted
(the agent's modes, the log output).
"""

from __future__ import annotations

from services.common.client_mcp import (
    CLIENT_MCP_CHOICES,
)

AUTONOMY_LEVELS = ("readonly", "supervised", "full")
VISIBILITY_LEVELS = ("self", "tree", "agent", "all")
AGENT_KINDS = ("builtin", "acp")
PROVIDERS = ("demo", "openai", "anthropic")

#: ``[logging] level`` values ("" = the default: see ``LoggingSection``).
LOG_LEVELS = ("", "debug", "info", "warning", "error")
#: ``[logging] format`` values ("" = the default: text on a terminal, JSON otherwise).
LOG_FORMATS = ("", "json", "text")

#: ``[services] data_path``: the adapter's pipes handed to the edge where they
#: share a host (``auto``), or every byte over the lifecycle's Attach stream.
DATA_PATHS = ("auto", "grpc")

#: Keys whose value must be one of a fixed set.
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("autonomy", "level"): AUTONOMY_LEVELS,
    ("sessions", "visibility"): VISIBILITY_LEVELS,
    ("gateway", "client_mcp_servers"): CLIENT_MCP_CHOICES,
    ("agents", "kind"): AGENT_KINDS,
    ("agents", "autonomy"): ("", *AUTONOMY_LEVELS),
    ("agents", "provider"): ("", *PROVIDERS),
    ("logging", "level"): LOG_LEVELS,
    ("logging", "format"): LOG_FORMATS,
    ("services", "data_path"): DATA_PATHS,
}
