"""Store records ↔ session_pb2 messages (services/session/api/convert.py), and the one role map."""

from __future__ import annotations

import ast
from pathlib import Path

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.history_roles import PB_ROLE_BY_NAME, ROLE_NAME_BY_PB
from services.common.policy import SecurityPolicy
from services.common.protocol import HISTORY_ROLES
from services.session.api.convert import (
    action_from_pb,
    entry_to_pb,
    pb_to_entry,
    policy_to_pb,
    row_to_pb,
    state_from_pb,
)
from services.session.store import HistoryEntry, Ownership, SessionRecord

REPO = Path(__file__).resolve().parents[2]


def test_role_map_covers_every_enum_value_and_name() -> None:
    """Every HistoryItem.Role but UNSPECIFIED has exactly one name, and every name a value."""
    values = {v.number for v in pb.HistoryItem.Role.DESCRIPTOR.values}
    assert set(ROLE_NAME_BY_PB) == values - {pb.HistoryItem.ROLE_UNSPECIFIED}
    assert tuple(sorted(ROLE_NAME_BY_PB.values(), key=HISTORY_ROLES.index)) == HISTORY_ROLES
    assert all(ROLE_NAME_BY_PB[PB_ROLE_BY_NAME[name]] == name for name in HISTORY_ROLES)


def test_entry_round_trip_keeps_every_field() -> None:
    entry = HistoryEntry(
        role="tool_result", text="t", tool_call_id="c1", tool_name="shell", tool_kind="execute",
        title="ls", arguments_json='{"a": 1}', output="out", status="failed",
        content_json="[]", seq=7, turn=3, created_at=1234,
    )
    item = entry_to_pb(entry)
    assert item.role == pb.HistoryItem.ROLE_TOOL_RESULT
    assert (item.seq, item.turn, item.created_at) == (7, 3, 1234)
    assert (item.text, item.tool_call_id, item.tool_name, item.tool_kind, item.title,
            item.arguments_json, item.output, item.status, item.content_json) == (
        "t", "c1", "shell", "execute", "ls", '{"a": 1}', "out", "failed", "[]")
    # Back to an entry to append: the store assigns seq, turn and created_at itself.
    again = pb_to_entry(item)
    assert again == HistoryEntry(**{**entry.__dict__, "seq": 0, "turn": 0, "created_at": 0})


def test_unspecified_role_stays_invalid() -> None:
    """An item without a role becomes role "" (refused by the store), never a guess."""
    assert pb_to_entry(pb.HistoryItem(text="x")).role == ""
    assert entry_to_pb(HistoryEntry(role="banana")).role == pb.HistoryItem.ROLE_UNSPECIFIED


def test_row_to_pb_copies_row_and_ownership() -> None:
    own = Ownership(session_key="k", spawned_by="p", parent_session_key="pk",
                    owner_session_key="o", agent_id="a", backend="acpx",
                    gateway_instance_id="gw", created_at=5)
    rec = SessionRecord(session_id="s", agent_alias="a", workspace_dir="/w", created_at=5,
                        last_activity=9, token_count=3, plan_json="[]", state="active",
                        lease_id="l", adapter_session_id="as", title="T", ownership=own,
                        message_count=4, mcp_servers_json='[{"name": "m"}]')
    row = row_to_pb(rec)
    assert (row.session_id, row.agent_alias, row.workspace_dir, row.created_at,
            row.last_activity, row.token_count, row.plan_json, row.lease_id,
            row.adapter_session_id, row.title, row.mcp_servers_json) == (
        "s", "a", "/w", 5, 9, 3, "[]", "l", "as", "T", '[{"name": "m"}]')
    assert row.state == pb.SESSION_STATE_ACTIVE
    o = row.ownership
    assert (o.session_key, o.spawned_by, o.parent_session_key, o.owner_session_key,
            o.agent_id, o.backend, o.gateway_instance_id, o.created_at) == (
        "k", "p", "pk", "o", "a", "acpx", "gw", 5)
    odd = SessionRecord(session_id="s", agent_alias="a", workspace_dir="/w", created_at=0,
                        last_activity=0, state="weird")
    assert row_to_pb(odd).state == pb.SESSION_STATE_UNSPECIFIED


def test_enum_names() -> None:
    assert state_from_pb(pb.SESSION_STATE_INACTIVE) == "inactive"
    assert state_from_pb(pb.SESSION_STATE_UNSPECIFIED) is None
    assert action_from_pb(pb.ACTION_SEND) == "send"
    assert action_from_pb(pb.ACTION_UNSPECIFIED) is None


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_servicer_sees_the_store_only_through_its_interface() -> None:
    """The RPC code imports the store package, its interface and records, never a backend
    (SQLite and PostgreSQL both sit behind the same SessionStore)."""
    api = REPO / "services" / "session" / "api"
    allowed = {"services.session.store", "services.session.store.interface",
               "services.session.store.records"}
    files = [api / "servicer.py", api / "convert.py", *sorted((api / "rpcs").glob("*.py"))]
    assert len(files) > 3
    for path in files:
        for name in _imports(path):
            backend = name.startswith("services.session.store") and name not in allowed
            assert not backend and name not in ("aiosqlite", "sqlite3"), (path.name, name)


def test_policy_to_pb_is_the_inverse_of_from_proto() -> None:
    """GetPolicy's message reads back (services.common.policy.from_proto) as the same policy."""
    policy = SecurityPolicy(workspace_dir="/w", allowed_roots=("/a", "/b"),
                            forbidden_paths=("/etc",), autonomy="readonly",
                            auto_approve=("file_read",), always_ask=("shell",),
                            workspace_only=False)
    assert SecurityPolicy.from_proto(policy_to_pb(policy)) == policy
