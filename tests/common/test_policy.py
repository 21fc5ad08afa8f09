"""The policy contract (services/common/policy.py): the data and its two wire forms."""

from __future__ import annotations

import pytest

from acpgate_contracts.session.v1 import session_pb2
from services.common.policy import SecurityPolicy


def test_policy_json_round_trip_camel_case() -> None:
    """The `_meta.acpgate.policy` JSON form uses camelCase keys and round-trips."""
    p = SecurityPolicy(
        workspace_dir="/w",
        allowed_roots=("/a",),
        forbidden_paths=("/etc", "~/.ssh"),
        autonomy="full",
        auto_approve=("file_read",),
        always_ask=("shell",),
        workspace_only=False,
    )
    j = p.to_json()
    assert set(j) == {
        "workspaceDir", "allowedRoots", "forbiddenPaths", "autonomy", "autoApprove",
        "alwaysAsk", "workspaceOnly",
    }
    assert j["forbiddenPaths"] == ["/etc", "~/.ssh"]
    assert SecurityPolicy.from_json(j) == p


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"workspaceDir": ""},
        {"workspaceDir": "/w", "autonomy": "yolo"},
        {"workspaceDir": "/w", "allowedRoots": "/a"},
        {"workspaceDir": "/w", "workspaceOnly": "yes"},
    ],
)
def test_policy_from_json_rejects_malformed(bad: dict[str, object]) -> None:
    """A malformed policy is a clear ValueError, never a silent default."""
    with pytest.raises(ValueError):
        SecurityPolicy.from_json(bad)


def test_policy_from_proto_is_the_get_policy_response_field_for_field() -> None:
    """The edge reads GetPolicy's SecurityPolicy message into the same data, unchanged."""
    p = SecurityPolicy(
        workspace_dir="/w",
        allowed_roots=("/a", "/b"),
        forbidden_paths=("~/.ssh",),
        autonomy="readonly",
        auto_approve=("file_read", "glob"),
        always_ask=("shell",),
        workspace_only=True,
    )
    msg = session_pb2.SecurityPolicy(
        workspace_dir="/w", allowed_roots=["/a", "/b"], forbidden_paths=["~/.ssh"],
        autonomy="readonly", auto_approve=["file_read", "glob"], always_ask=["shell"],
        workspace_only=True)
    assert SecurityPolicy.from_proto(msg) == p
    full = SecurityPolicy.from_proto(session_pb2.SecurityPolicy(workspace_dir="/w",
                                                                autonomy="full"))
    assert full.workspace_only is False and full.allowed_roots == ()
    assert SecurityPolicy.from_json(full.to_json()) == full
