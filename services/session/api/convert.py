"""Store records ↔ ``session_pb2`` messages: every conversion the servicer makes.

The records (:mod:`services.session.store.records`) and the messages share
field names by design; the enums (state, role, visibility action) are mapped
here, the history role names through the one map in
:mod:`services.common.history_roles`.
"""

from __future__ import annotations

from typing import Final

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.history_roles import PB_ROLE_BY_NAME, ROLE_NAME_BY_PB
from services.common.policy import SecurityPolicy
from services.session.decisions.aliases import AgentLaunch
from services.session.decisions.launch import seal_launch
from services.session.store import (
    AppendResult,
    HistoryEntry,
    SessionRecord,
    StoreStatusInfo,
    TurnUsage,
)
from services.session.store.records import item_values

__all__ = [
    "action_from_pb",
    "append_result_to_pb",
    "entry_to_pb",
    "launch_to_pb",
    "pb_to_entry",
    "policy_to_pb",
    "row_to_pb",
    "state_from_pb",
    "status_to_pb",
    "usage_from_pb",
]

_STATE_NAME_BY_PB: Final[dict[pb.SessionState.ValueType, str]] = {
    pb.SESSION_STATE_ACTIVE: "active",
    pb.SESSION_STATE_INACTIVE: "inactive",
}
_PB_STATE_BY_NAME: Final = {name: value for value, name in _STATE_NAME_BY_PB.items()}
_ACTION_NAME_BY_PB: Final[dict[pb.Action.ValueType, str]] = {
    pb.ACTION_LIST: "list",
    pb.ACTION_HISTORY: "history",
    pb.ACTION_SEND: "send",
    pb.ACTION_STATUS: "status",
}


def state_from_pb(state: pb.SessionState.ValueType) -> str | None:
    """The store's name of a ``SessionState`` (None for UNSPECIFIED or an unknown value)."""
    return _STATE_NAME_BY_PB.get(state)


def action_from_pb(action: pb.Action.ValueType) -> str | None:
    """The visibility action a ``CheckAccessRequest.Action`` names (None if none)."""
    return _ACTION_NAME_BY_PB.get(action)


def row_to_pb(rec: SessionRecord) -> pb.SessionRow:
    """A store record as the proto ``SessionRow``."""
    o = rec.ownership
    return pb.SessionRow(
        session_id=rec.session_id,
        agent_alias=rec.agent_alias,
        workspace_dir=rec.workspace_dir,
        created_at=rec.created_at,
        last_activity=rec.last_activity,
        token_count=rec.token_count,
        plan_json=rec.plan_json,
        state=_PB_STATE_BY_NAME.get(rec.state, pb.SESSION_STATE_UNSPECIFIED),
        lease_id=rec.lease_id,
        adapter_session_id=rec.adapter_session_id,
        title=rec.title,
        mcp_servers_json=rec.mcp_servers_json,
        ownership=pb.Ownership(
            session_key=o.session_key,
            spawned_by=o.spawned_by,
            parent_session_key=o.parent_session_key,
            owner_session_key=o.owner_session_key,
            agent_id=o.agent_id,
            backend=o.backend,
            gateway_instance_id=o.gateway_instance_id,
            created_at=o.created_at,
        ),
        claim=pb.Claim(
            instance_id=rec.claim.instance_id, host=rec.claim.host, until=rec.claim.until,
            generation=rec.claim.generation, public_url=rec.claim.public_url,
        ),
        additional_directories=list(rec.additional_directories),
        mode_id=rec.mode_id,
        config_json=rec.config_json,
        input_tokens=rec.input_tokens,
        output_tokens=rec.output_tokens,
        stored_bytes=rec.stored_bytes,
        forked_from=rec.forked_from,
        subagent=rec.subagent,
        protocol_version=rec.protocol_version,
    )


def usage_from_pb(u: pb.TurnUsage) -> TurnUsage:
    """A turn's ``TurnUsage`` message as the store's record."""
    return TurnUsage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        thought_tokens=u.thought_tokens,
        cached_read_tokens=u.cached_read_tokens,
        cached_write_tokens=u.cached_write_tokens,
    )


def entry_to_pb(e: HistoryEntry) -> pb.HistoryItem:
    """A stored history entry as the proto ``HistoryItem``."""
    # Spelled out: this runs once per streamed item, and keywords are twice as fast as
    # building them from ITEM_FIELDS.
    return pb.HistoryItem(
        seq=e.seq,
        turn=e.turn,
        role=PB_ROLE_BY_NAME.get(e.role, pb.HistoryItem.ROLE_UNSPECIFIED),
        text=e.text,
        tool_call_id=e.tool_call_id,
        tool_name=e.tool_name,
        tool_kind=e.tool_kind,
        title=e.title,
        arguments_json=e.arguments_json,
        output=e.output,
        status=e.status,
        content_json=e.content_json,
        created_at=e.created_at,
    )


def pb_to_entry(item: pb.HistoryItem) -> HistoryEntry:
    """A proto ``HistoryItem`` as a store entry to append: the store assigns seq, turn and
    created_at; an unspecified role stays invalid (``""``) for the store to refuse."""
    # HistoryEntry's fields after ``role`` are ITEM_FIELDS, in that order.
    return HistoryEntry(ROLE_NAME_BY_PB.get(item.role, ""), *item_values(item))


def status_to_pb(s: StoreStatusInfo, claim_ttl_ms: int) -> pb.StoreStatus:
    """The store's status, and how long a claim lasts, as the proto ``StoreStatus``."""
    return pb.StoreStatus(
        persistent=s.persistent,
        db_path=s.db_path,
        fallback_reason=s.fallback_reason,
        schema_version=s.schema_version,
        backend=s.backend,
        claim_ttl_ms=claim_ttl_ms,
    )


def append_result_to_pb(r: AppendResult) -> pb.AppendTurnResponse:
    """Where a turn landed, as the proto ``AppendTurnResponse``."""
    return pb.AppendTurnResponse(turn=r.turn, first_seq=r.first_seq, last_seq=r.last_seq)


def launch_to_pb(launch: AgentLaunch, seal_key: bytes) -> pb.ResolvedAgent:
    """A launch spec as the proto ``ResolvedAgent``, its spec sealed with ``seal_key``."""
    return pb.ResolvedAgent(
        alias=launch.alias,
        kind=launch.kind,
        command=launch.command,
        args=list(launch.args),
        env=dict(launch.env),
        agent_workspace=launch.agent_workspace,
        autonomy=launch.autonomy,
        default_model=launch.default_model,
        warm=launch.warm,
        watch_paths=list(launch.watch_paths),
        launch=seal_launch(launch, seal_key),
        pass_env=list(launch.pass_env),
        protocol=launch.protocol,
    )


def policy_to_pb(p: SecurityPolicy) -> pb.SecurityPolicy:
    """The policy dataclass as the proto ``SecurityPolicy``."""
    return pb.SecurityPolicy(
        workspace_dir=p.workspace_dir,
        allowed_roots=list(p.allowed_roots),
        forbidden_paths=list(p.forbidden_paths),
        autonomy=p.autonomy,
        auto_approve=list(p.auto_approve),
        always_ask=list(p.always_ask),
        workspace_only=p.workspace_only,
    )
