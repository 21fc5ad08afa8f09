"""What a v2 client sends, read as v1 — and what acpgate asks a v2 client (pure).

- MCP server entries: v2 requires ``type`` on each (``stdio``, ``http``, or a future
  one); acpgate's v1 reading takes stdio entries without it. An entry without a
  ``type`` is refused (:class:`BadV2Params`).
- ``session/new`` / ``session/resume``: ``mcpServers`` is optional in v2 (omitted = ``[]``).
- ``session/request_permission``: v1's bare ``toolCall`` becomes v2's required ``title``
  and a ``tool_call`` ``subject`` (a v2 agent's own ``title``/``description``, kept
  through v1, where it gave them).
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.agent_forms import permission_words
from services.common.acp.v2.names import DEFAULT_PERMISSION_TITLE
from services.common.acp.v2.updates import tool_call_v2

__all__ = ["BadV2Params", "mcp_servers_v1", "permission_request_v2", "setup_params_v1"]

_STDIO = "stdio"


class BadV2Params(ValueError):
    """Params a v2 client sent that v2 does not allow."""


def mcp_servers_v1(servers: Any) -> list[Any]:
    """v2 MCP entries as acpgate reads v1 ones (module doc); None/absent → []."""
    if servers is None:
        return []
    if not isinstance(servers, list):
        raise BadV2Params("mcpServers must be an array")
    out: list[Any] = []
    for index, entry in enumerate(servers):
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise BadV2Params(f"mcpServers[{index}]: a v2 MCP server entry needs a type")
        if entry["type"] == _STDIO:
            entry = {k: v for k, v in entry.items() if k != "type"}
        out.append(entry)
    return out


def setup_params_v1(params: dict[str, Any]) -> dict[str, Any]:
    """A v2 ``session/new`` / ``session/resume``'s params as v1's (MCP entries read,
    ``replayFrom`` left to the caller)."""
    out = {k: v for k, v in params.items() if k != "replayFrom"}
    out["mcpServers"] = mcp_servers_v1(params.get("mcpServers"))
    return out


def permission_request_v2(params: dict[str, Any]) -> dict[str, Any]:
    """A v1 ``session/request_permission``'s params as v2's."""
    call = params.get("toolCall")
    words, meta = permission_words(params)  # a v2 agent's own title and description
    out = {k: v for k, v in params.items() if k not in ("toolCall", "_meta")}
    if meta is not None:
        out["_meta"] = meta
    title = words.get("title") or (call.get("title") if isinstance(call, dict) else None)
    out["title"] = title if isinstance(title, str) and title else DEFAULT_PERMISSION_TITLE
    if "description" in words:
        out["description"] = words["description"]
    if isinstance(call, dict) and isinstance(call.get("toolCallId"), str):
        out["subject"] = {"type": "tool_call", "toolCall": tool_call_v2(call)}
    return out
