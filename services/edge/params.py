"""Reading the client's request params the way SPEC §1 allows (aliases, bounds).

Params are deliberately open-ended JSON on the ACP wire; these helpers pick
the fields the dialect needs and treat a value of the wrong type as absent.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    CWD_PLACEHOLDER,
    INVALID_PARAMS,
    META_ACPGATE,
    MSG_BAD_ADDITIONAL_DIRS,
    MSG_CWD_NOT_ABSOLUTE,
    MSG_MISSING_SESSION_ID,
)
from services.edge.errors import not_found

#: Session ids are UUIDs; anything much longer cannot name a session, and
#: must not reach the services (a huge id in a gRPC status overflows its header).
MAX_SESSION_ID_CHARS = 128


def first_str(params: dict[str, Any], *keys: str) -> str | None:
    """The first present key's value (SPEC §1 aliases); non-strings count as absent."""
    for key in keys:
        value = params.get(key)
        if isinstance(value, str):
            return value
    return None


def session_id(params: dict[str, Any]) -> str:
    """``sessionId`` (or ``session_id``): -32602 when missing, -32000 when it cannot be one."""
    sid = first_str(params, "sessionId", "session_id")
    if not sid:
        raise JsonRpcError(INVALID_PARAMS, MSG_MISSING_SESSION_ID)
    if len(sid) > MAX_SESSION_ID_CHARS:
        raise not_found(sid)
    return sid


def additional_directories(params: dict[str, Any]) -> list[str] | None:
    """ACP ``additionalDirectories`` as sent (None when absent); -32602 when it is not an
    array of non-empty strings."""
    value = params.get("additionalDirectories")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise JsonRpcError(INVALID_PARAMS, MSG_BAD_ADDITIONAL_DIRS)
    return list(value)


def mcp_servers(params: dict[str, Any]) -> list[Any]:
    """The client's ``mcpServers`` list, passed on to the adapter as given ([] if malformed)."""
    servers = params.get("mcpServers")
    return servers if isinstance(servers, list) else []


def restore_mcp_servers(params: dict[str, Any], stored_json: str) -> tuple[list[Any], bool]:
    """The MCP servers a load/resume starts, and whether the client passed them.

    A list the client passes (``[]`` too) is used and becomes the stored one; a
    request without one (absent, null, not a list) gets the session's stored list.
    """
    servers = params.get("mcpServers")
    if isinstance(servers, list):
        return servers, True
    try:
        stored = orjson.loads(stored_json) if stored_json else []
    except orjson.JSONDecodeError:
        stored = []
    return (stored if isinstance(stored, list) else []), False


def encode_mcp_servers(servers: list[Any]) -> str:
    """The stored form of an ``mcpServers`` list (a JSON array)."""
    return orjson.dumps(servers).decode()


def without_acpgate_meta(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without ``_meta.acpgate`` (a shallow copy when there was one): acpgate's
    own namespace is the edge's to write toward an agent, never a client's."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_ACPGATE not in meta:
        return params
    rest = {k: v for k, v in meta.items() if k != META_ACPGATE}
    out = {k: v for k, v in params.items() if k != "_meta"}
    if rest:
        out["_meta"] = rest
    return out


def passed_params(params: dict[str, Any], own: frozenset[str]) -> dict[str, Any]:
    """The params of a client request that acpgate does not read itself (every key but
    ``own``), for an external agent as they came — less ``_meta.acpgate``."""
    return without_acpgate_meta({k: v for k, v in params.items() if k not in own})


def client_cwd(params: dict[str, Any], *, remote: bool) -> str:
    """The ``cwd`` param (SPEC §1 aliases; "" = omitted). A gateway client's must be an
    absolute path (ACP's rule; acpgate's working directory means nothing to it): a relative
    one is -32602, checked before anything is taken; its ``"."`` is SPEC §3's placeholder,
    the agent workspace, as an omitted cwd. The local user's is resolved against
    ``acpgate acp``'s working directory (SPEC §3)."""
    cwd = first_str(params, "cwd", "workspaceDir", "workspace_dir") or ""
    if not remote or not cwd or os.path.isabs(cwd):
        return cwd
    if cwd == CWD_PLACEHOLDER:
        return ""
    raise JsonRpcError(INVALID_PARAMS, MSG_CWD_NOT_ABSOLUTE.format(cwd=cwd[:200]))
