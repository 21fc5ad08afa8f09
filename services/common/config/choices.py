"""The fixed sets of values some configuration keys are limited to.

The schema names each key's set (``setting(choices=…)``) and ``coerce`` refuses any
other value, naming the allowed ones; the sets themselves are read wherever a value
is interpreted (the agent's modes, the log output).
"""

from __future__ import annotations

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
