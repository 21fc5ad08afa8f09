"""The rules every store backend applies to what it is asked to write.

Each ``check_*`` refuses bad input with :class:`~.records.InvalidItem`, naming
what is wrong, before a backend touches its database, so SQLite and PostgreSQL
refuse exactly the same things (:func:`validate_item` checks one turn item as
it is written).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from services.common.protocol import (
    HISTORY_ROLE_TOOL_CALL,
    HISTORY_ROLE_TOOL_RESULT,
    HISTORY_ROLE_USER,
    HISTORY_ROLES,
)
from services.common.public_url import public_url_problem
from services.session.store.records import (
    STATES,
    TOOL_STATUSES,
    TURN_STATUSES,
    Claim,
    HistoryEntry,
    InvalidItem,
    Quota,
    QuotaExceeded,
    SessionActiveElsewhere,
    TurnUsage,
)

__all__ = [
    "check_capabilities",
    "check_claim",
    "check_config",
    "check_fence",
    "check_mcp_servers",
    "check_new_session",
    "check_owner_quota",
    "check_plan",
    "check_session_quota",
    "check_turn",
    "check_update",
    "validate_item",
]

#: The largest ACP protocol version number (the schema's ``ProtocolVersion`` is a uint16).
MAX_PROTOCOL_VERSION: Final = 0xFFFF


def _check_json_field(value: str | None, kind: type, name: str, kind_name: str) -> None:
    """Refuse a field (of a row, or ``item N: ...`` of a turn item) that is not JSON of
    ``kind`` (None and "" mean none)."""
    if value:
        try:
            parsed = json.loads(value)
        except ValueError:
            raise InvalidItem(f"{name} is not valid JSON") from None
        if not isinstance(parsed, kind):
            raise InvalidItem(f"{name} must be a JSON {kind_name}")


def validate_item(item: HistoryEntry, index: int) -> None:
    """Refuse a malformed turn item with a message naming it (raises InvalidItem)."""
    if item.role not in HISTORY_ROLES:
        raise InvalidItem(f"item {index}: unknown role {item.role!r}")
    if item.role in (HISTORY_ROLE_TOOL_CALL, HISTORY_ROLE_TOOL_RESULT) and not item.tool_call_id:
        raise InvalidItem(f"item {index}: {item.role} needs a tool_call_id")
    if item.role == HISTORY_ROLE_TOOL_CALL and not item.tool_name:
        raise InvalidItem(f"item {index}: tool_call needs a tool_name")
    allowed = TURN_STATUSES if item.role == HISTORY_ROLE_USER else TOOL_STATUSES
    if item.status not in allowed:
        raise InvalidItem(f"item {index}: unknown status {item.status!r}")
    _check_json_field(item.arguments_json, dict, f"item {index}: arguments_json", "dict")
    _check_json_field(item.content_json, list, f"item {index}: content_json", "list")


def check_plan(plan_json: str | None) -> None:
    """Refuse a plan that is not JSON (None and "" mean no plan; raises InvalidItem)."""
    _check_json_field(plan_json, object, "plan_json", "value")


def check_mcp_servers(mcp_servers_json: str | None) -> None:
    """Refuse an MCP server list that is not a JSON array (None and "" mean none)."""
    _check_json_field(mcp_servers_json, list, "mcp_servers_json", "array")


def check_claim(instance_id: str, host: str, ttl_ms: int, public_url: str = "") -> None:
    """Refuse a claim without an instance id, with a lease time that is not positive, with
    a NUL in the instance id or host name, or with a public URL clients could not be sent
    (:func:`~services.common.public_url.public_url_problem`: never one with userinfo or a
    query, whoever asks)."""
    if not instance_id:
        raise InvalidItem("gateway_instance_id is required")
    if ttl_ms <= 0:
        raise InvalidItem("the claim's lease time must be positive")
    _check_no_nul((instance_id, host))
    if (problem := public_url_problem(public_url)) is not None:
        raise InvalidItem(f"public_url: {problem}")


def _check_no_nul(values: Sequence[str | None]) -> None:
    # Identifiers are compared and indexed; a NUL in one is never meaningful, and
    # PostgreSQL text cannot hold it, so every backend refuses it alike.
    if any(v and "\x00" in v for v in values):
        raise InvalidItem("identifiers must not contain NUL characters")


def check_new_session(
    session_id: str, agent_alias: str, workspace_dir: str, state: str, *links: str,
    mcp_servers_json: str = "", additional_directories: Sequence[str] = (),
) -> None:
    """Refuse a new row without an id, alias or workspace, in an unknown state, with a NUL
    in any of those, in its ownership ``links`` or in an additional directory, or with an
    MCP server list that is not a JSON array."""
    if not session_id or not agent_alias or not workspace_dir:
        raise InvalidItem("session_id, agent_alias and workspace_dir are required")
    if state not in STATES:
        raise InvalidItem(f"unknown state {state!r}")
    _check_no_nul((session_id, agent_alias, workspace_dir, *links, *additional_directories))
    check_mcp_servers(mcp_servers_json)


def check_config(config_json: str | None) -> None:
    """Refuse config values that are not a JSON object (None and "" mean none)."""
    _check_json_field(config_json, dict, "config_json", "object")


def check_update(
    state: str | None, agent_alias: str | None, plan_json: str | None,
    mcp_servers_json: str | None = None, lease_id: str | None = None, *,
    mode_id: str | None = None, config_json: str | None = None,
    additional_directories: Sequence[str] | None = None, protocol_version: int | None = None,
) -> None:
    """Refuse an update to an unknown state, an empty alias, a plan that is not JSON, an MCP
    server list that is not a JSON array, config values that are not a JSON object, an
    alias, lease id, mode id or directory with a NUL in it, or a protocol version that is no
    ACP version number (a uint16)."""
    if state is not None and state not in STATES:
        raise InvalidItem(f"unknown state {state!r}")
    if agent_alias is not None and not agent_alias:
        raise InvalidItem("agent_alias must not be empty")
    _check_no_nul((agent_alias, lease_id, mode_id, *(additional_directories or ())))
    if protocol_version is not None and not 0 <= protocol_version <= MAX_PROTOCOL_VERSION:
        raise InvalidItem(f"protocol_version out of range: {protocol_version}")
    check_plan(plan_json)
    check_mcp_servers(mcp_servers_json)
    check_config(config_json)


def check_capabilities(alias: str, capabilities_json: str) -> None:
    """Refuse recorded adapter capabilities without an alias, with a NUL in the alias, or
    that are not a JSON object ("" included: a record always says something)."""
    if not alias:
        raise InvalidItem("alias must not be empty")
    _check_no_nul((alias,))
    _check_json_field(capabilities_json or "null", dict, "capabilities_json", "object")


def check_turn(items: Sequence[HistoryEntry], token_delta: int, plan_json: str | None,
               usage: TurnUsage | None = None) -> None:
    """Refuse an empty turn, a negative token delta or usage, or a plan that is not JSON (the
    items themselves are checked one by one with :func:`validate_item` as they are written)."""
    if not items:
        raise InvalidItem("a turn needs at least one item")
    if token_delta < 0:
        raise InvalidItem("token_delta must not be negative")
    if usage is not None and min(usage.input_tokens, usage.output_tokens, usage.thought_tokens,
                                 usage.cached_read_tokens, usage.cached_write_tokens) < 0:
        raise InvalidItem("usage counts must not be negative")
    check_plan(plan_json)


def check_fence(session_id: str, claim: Claim, holder: str | None, generation: int) -> None:
    """Refuse (SessionActiveElsewhere) a holder's write to a row whose claim is not its own:
    with ``generation``, the claim must be ``holder``'s at exactly that generation (another
    host took it over since, however briefly: fenced); without one, ``holder``'s or nobody's.
    No ``holder``: a trusted write, not fenced."""
    if holder is None:
        return
    if generation:
        held = claim.instance_id == holder and claim.generation == generation
    else:
        held = claim.instance_id in ("", holder)
    if not held:
        raise SessionActiveElsewhere(session_id, claim)


def check_session_quota(stored: int, adding: int, quota: Quota | None) -> None:
    """Refuse (QuotaExceeded) a turn of ``adding`` bytes that would take a session holding
    ``stored`` bytes over ``quota.session_bytes`` (0: unlimited)."""
    if quota is not None and quota.session_bytes and stored + adding > quota.session_bytes:
        raise QuotaExceeded("session", stored + adding, quota.session_bytes)


def check_owner_quota(owner: str, total: int, quota: Quota | None) -> None:
    """Refuse (QuotaExceeded) a turn that took ``owner``'s total to ``total`` bytes, over
    ``quota.owner_bytes`` (0: unlimited). A row without an owner (migrated from the zeroclaw
    layout and never bound) has no principal to charge."""
    if quota is not None and quota.owner_bytes and owner and total > quota.owner_bytes:
        raise QuotaExceeded("owner", total, quota.owner_bytes)
