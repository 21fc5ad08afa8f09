"""The edge's pure parts of agent-to-agent sessions: how a relayed request is
labelled, how session keys and rows are shown."""

from __future__ import annotations

import time

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.edge.dialect.a2a.views import (
    MAX_TEXT_CHARS,
    history_view,
    lineage,
    session_id_of_key,
    state_of,
)
from services.edge.sessions.hosted_port import labelled

PERMISSION = {
    "sessionId": "child-edge-id",
    "options": [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"}],
    "toolCall": {"toolCallId": "approval-1", "title": "Approve shell?", "kind": "execute"},
}


def test_a_relayed_request_is_labelled_once_under_the_hosts_id() -> None:
    first = labelled(PERMISSION, "parent-id", "child-edge-id", "beta")
    assert first["sessionId"] == "parent-id"
    assert first["toolCall"]["title"] == "[beta · session child-edge-id] Approve shell?"
    assert first["_meta"] == {"acpgate": {"childSessionId": "child-edge-id", "agent": "beta"}}
    assert PERMISSION["toolCall"]["title"] == "Approve shell?", "the original is not changed"
    # One hop further up (a grandchild's request through its parent's host): only the id.
    second = labelled(first, "grandparent-id", "parent-id", "alpha")
    assert second["sessionId"] == "grandparent-id"
    assert second["toolCall"]["title"] == first["toolCall"]["title"]
    assert second["_meta"] == first["_meta"]


def test_elicitation_is_labelled_in_its_message_and_other_meta_is_kept() -> None:
    ask = {"sessionId": "c", "mode": "form", "message": "Pick one",
           "_meta": {"other": 1, "acpgate": {"x": 2}}}
    out = labelled(ask, "p", "c", "sdk")
    assert out["message"] == "[sdk · session c] Pick one"
    assert out["_meta"] == {"other": 1, "acpgate": {"x": 2, "childSessionId": "c",
                                                      "agent": "sdk"}}


def test_session_keys_and_lineage() -> None:
    assert session_id_of_key("agent:alpha:acp:1234") == "1234"
    assert session_id_of_key("client:tok") == ""
    assert session_id_of_key("") == ""
    top = pb.SessionRow(session_id="p", agent_alias="alpha", ownership=pb.Ownership(
        session_key="agent:alpha:acp:p", owner_session_key="client:tok"))
    assert lineage(top) == {"agent": "alpha"}
    kid = pb.SessionRow(session_id="c", agent_alias="sdk", ownership=pb.Ownership(
        session_key="agent:sdk:acp:c", spawned_by="agent:alpha:acp:p",
        parent_session_key="agent:alpha:acp:p", owner_session_key="client:tok"))
    assert lineage(kid) == {"agent": "sdk", "parentSessionId": "p",
                            "spawnedBy": "agent:alpha:acp:p"}


def test_state_of_a_row_nobody_serves_here() -> None:
    now = int(time.time() * 1000)
    closed = pb.SessionRow(state=pb.SESSION_STATE_INACTIVE)
    assert state_of(closed, None) == "closed"
    elsewhere = pb.SessionRow(state=pb.SESSION_STATE_ACTIVE,
                              claim=pb.Claim(instance_id="gw-2", until=now + 60_000))
    assert state_of(elsewhere, None) == "active"
    stale = pb.SessionRow(state=pb.SESSION_STATE_ACTIVE,
                          claim=pb.Claim(instance_id="gw-2", until=now - 60_000))
    assert state_of(stale, None) == "closed", "an expired claim serves nothing"


def test_history_view_cuts_long_texts() -> None:
    R = pb.HistoryItem
    items = [R(role=R.ROLE_USER, text="x" * (MAX_TEXT_CHARS + 10)),
             R(role=R.ROLE_TOOL_RESULT, tool_call_id="t", output="short", status="completed")]
    view = history_view(items)
    assert view[0]["text"] == "x" * MAX_TEXT_CHARS + "… [10 more characters]"
    assert view[1] == {"role": "tool_result", "toolCallId": "t", "output": "short",
                       "status": "completed"}
