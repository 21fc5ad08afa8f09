"""Agent-to-agent sessions in the session service (SPEC §12–§14), over real gRPC.

SpawnSession decides a child's agent, workspace, policy and ownership; SendToSession
is the "send" check; GetPolicy caps a stored child's autonomy on every restore;
GetHistory's ``limit`` and ListSessions' ``query`` serve the agent's session tools.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import A2aSection, Config, StoreSection
from services.common.protocol import (
    MSG_AGENT_DISABLED,
    MSG_SEND_ABOVE_AUTONOMY,
    MSG_SEND_REQUESTER,
    MSG_SPAWN_ABOVE_AUTONOMY,
    MSG_SPAWN_AGENT_REQUIRED,
    MSG_SPAWN_CWD_OUTSIDE,
    MSG_SPAWN_UNKNOWN_REQUESTER,
    MSG_UNKNOWN_AGENT,
)
from tests.session.conftest import make_cfg
from tests.session.test_grpc import _code

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub
    from tests.session.conftest import ServerFactory

OWNER = "client:tok1"


def _cfg(root: Path, store: StoreSection, **levels: str) -> Config:
    cfg = make_cfg(root, store=store)
    agents = {alias: dataclasses.replace(a, autonomy=levels.get(alias, ""))
              for alias, a in cfg.agents.items()}
    return dataclasses.replace(cfg, agents=agents)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project directory (outside acpgate's own state) with a subdirectory."""
    ws = tmp_path / "project"
    (ws / "sub").mkdir(parents=True)
    return Path(os.path.realpath(ws))


async def _parent(stub: Stub, workspace: Path, sid: str = "p1", alias: str = "alpha",
                  owner: str = OWNER) -> pb.SessionRow:
    return await stub.CreateSession(pb.CreateSessionRequest(
        session_id=sid, agent_alias=alias, workspace_dir=str(workspace),
        owner_session_key=owner))


async def _spawn(stub: Stub, parent: pb.SessionRow, sid: str, alias: str = "beta",
                 **kw: str) -> pb.SpawnSessionResponse:
    return await stub.SpawnSession(pb.SpawnSessionRequest(
        requester_session_key=parent.ownership.session_key, session_id=sid,
        agent_alias=alias, **kw))


async def test_spawn_records_ownership_and_label(serve: ServerFactory, short_dir: Path,
                                                 workspace: Path,
                                                 store_section: StoreSection) -> None:
    """spawnedBy = parentSessionKey = the requester's key, ownerSessionKey = the requester's
    owner (through grandchildren too); the child works in the parent's workspace, is
    claimed by the spawning instance and titled by its label."""
    _, stub = await serve(_cfg(short_dir, store_section))
    parent = await _parent(stub, workspace)
    got = await _spawn(stub, parent, "c1", label="  review the diff ",
                       gateway_instance_id="gw-1", host="h1")
    child = got.session
    assert child.ownership.session_key == "agent:beta:acp:c1"
    assert child.ownership.spawned_by == parent.ownership.session_key == "agent:alpha:acp:p1"
    assert child.ownership.parent_session_key == parent.ownership.session_key
    assert child.ownership.owner_session_key == OWNER
    assert child.ownership.agent_id == "beta" and child.agent_alias == "beta"
    assert child.workspace_dir == str(workspace)
    assert child.title == "review the diff"
    assert (child.claim.instance_id, child.claim.host) == ("gw-1", "h1")
    assert got.agent.alias == "beta" and got.agent.kind == "builtin"
    assert got.policy.workspace_dir == str(workspace)

    grandchild = (await _spawn(stub, child, "g1", alias="alpha")).session
    assert grandchild.ownership.spawned_by == "agent:beta:acp:c1"
    assert grandchild.ownership.owner_session_key == OWNER
    # The owner sees the whole tree; the first child sees its own child.
    tree = await stub.ListSessions(pb.ListSessionsRequest(requester_session_key=OWNER,
                                                          visibility="tree"))
    assert {r.session_id for r in tree.sessions} == {"p1", "c1", "g1"}
    kids = await stub.ListSessions(pb.ListSessionsRequest(
        requester_session_key=child.ownership.session_key, visibility="tree"))
    assert {r.session_id for r in kids.sessions} == {"c1", "g1"}


async def test_spawn_of_a_local_session_is_owned_by_it(stub: Stub, workspace: Path) -> None:
    """A session with no owner of its own (the local operator's) owns its children."""
    parent = await _parent(stub, workspace, owner="")
    assert parent.ownership.owner_session_key == parent.ownership.session_key
    child = (await _spawn(stub, parent, "c1")).session
    assert child.ownership.owner_session_key == parent.ownership.session_key


async def test_spawn_cwd_stays_inside_the_parent_workspace(stub: Stub, workspace: Path,
                                                           tmp_path: Path) -> None:
    """The child's cwd resolves against the parent's workspace and may not leave it."""
    parent = await _parent(stub, workspace)
    sub = await _spawn(stub, parent, "c1", cwd="sub")
    assert sub.session.workspace_dir == str(workspace / "sub")
    assert sub.policy.workspace_dir == str(workspace / "sub")
    absolute = await _spawn(stub, parent, "c2", cwd=str(workspace / "sub"))
    assert absolute.session.workspace_dir == str(workspace / "sub")
    (tmp_path / "elsewhere").mkdir()
    (workspace / "escape").symlink_to(tmp_path / "elsewhere")
    for cwd in ("..", str(tmp_path / "elsewhere"), "escape", "sub/../.."):
        assert await _code(_spawn(stub, parent, "c3", cwd=cwd)) == (
            grpc.StatusCode.INVALID_ARGUMENT, MSG_SPAWN_CWD_OUTSIDE.format(cwd=cwd)), cwd
    code, detail = await _code(_spawn(stub, parent, "c3", cwd="missing"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "cwd is not a usable directory" in detail
    code, _ = await _code(stub.GetSession(pb.GetSessionRequest(session_id="c3")))
    assert code == grpc.StatusCode.NOT_FOUND, "a refused spawn writes no row"


async def test_spawn_refusals(stub: Stub, workspace: Path) -> None:
    """Unknown, disabled or missing agents and unknown requesters are refused, nothing written."""
    parent = await _parent(stub, workspace)
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    assert await _code(_spawn(stub, parent, "x", alias="nope")) == (
        invalid, MSG_UNKNOWN_AGENT.format(alias="nope"))
    assert await _code(_spawn(stub, parent, "x", alias="off")) == (
        invalid, MSG_AGENT_DISABLED.format(alias="off"))
    assert await _code(_spawn(stub, parent, "x", alias=" ")) == (invalid, MSG_SPAWN_AGENT_REQUIRED)
    for key in ("", "agent:alpha:acp:ghost", OWNER):
        assert await _code(stub.SpawnSession(pb.SpawnSessionRequest(
            requester_session_key=key, session_id="x", agent_alias="beta"))) == (
            invalid, MSG_SPAWN_UNKNOWN_REQUESTER)
    await _spawn(stub, parent, "dup")
    code, _ = await _code(_spawn(stub, parent, "dup"))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    code, _ = await _code(stub.GetSession(pb.GetSessionRequest(session_id="x")))
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("parent_level", "child_level", "expected"),
    [
        ("supervised", "full", "supervised"),
        ("readonly", "full", "readonly"),
        ("readonly", "supervised", "readonly"),
        ("full", "readonly", "readonly"),
        ("full", "full", "full"),
        ("full", "supervised", "supervised"),
    ],
)
async def test_a_child_never_has_more_autonomy_than_its_parent(
        serve: ServerFactory, short_dir: Path, workspace: Path, parent_level: str,
        child_level: str, expected: str) -> None:
    """min(parent, child alias config) at the spawn, and again for every later restore
    (GetPolicy with the session id), through the whole chain of ancestors."""
    _, stub = await serve(_cfg(short_dir, StoreSection(), alpha=parent_level, beta=child_level))
    parent = await _parent(stub, workspace)
    got = await _spawn(stub, parent, "c1")
    assert got.policy.autonomy == got.agent.autonomy == expected
    assert got.policy.workspace_only is (expected != "full")
    restored = await stub.GetPolicy(pb.GetPolicyRequest(
        alias="beta", workspace_dir=str(workspace), session_id="c1"))
    assert restored.autonomy == expected
    # A grandchild of the child on the parent's agent: still capped by the whole chain.
    grand = await _spawn(stub, got.session, "g1", alias="alpha")
    assert grand.policy.autonomy == expected
    again = await stub.GetPolicy(pb.GetPolicyRequest(
        alias="alpha", workspace_dir=str(workspace), session_id="g1"))
    assert again.autonomy == grand.policy.autonomy
    # A top-level session keeps its own agent's level.
    top = await stub.GetPolicy(pb.GetPolicyRequest(
        alias="alpha", workspace_dir=str(workspace), session_id="p1"))
    assert top.autonomy == parent_level


async def test_a_parent_made_more_careful_by_set_mode_caps_its_children(
        serve: ServerFactory, short_dir: Path, workspace: Path) -> None:
    """A built-in parent configured `full` that a client put in mode `supervised`
    (session/set_mode, stored as the row's mode) spawns `full` agents as supervised,
    and its stored children are capped by that mode on restore; an external agent's mode
    ids are its own, not autonomy levels, so they cap nothing."""
    _, stub = await serve(_cfg(short_dir, StoreSection(), alpha="full", beta="full",
                               ext="full"))
    parent = await _parent(stub, workspace)
    assert (await _spawn(stub, parent, "c0")).policy.autonomy == "full"
    await stub.UpdateSession(pb.UpdateSessionRequest(session_id="p1", mode_id="supervised"))
    child = await _spawn(stub, parent, "c1")
    assert child.policy.autonomy == child.agent.autonomy == "supervised"
    for sid in ("c0", "c1"):  # the earlier child too, when it is brought up again
        restored = await stub.GetPolicy(pb.GetPolicyRequest(
            alias="beta", workspace_dir=str(workspace), session_id=sid))
        assert restored.autonomy == "supervised", sid
    # The parent's own ceiling is its configuration: its mode may go up again.
    own = await stub.GetPolicy(pb.GetPolicyRequest(
        alias="alpha", workspace_dir=str(workspace), session_id="p1"))
    assert own.autonomy == "full"
    external = await _parent(stub, workspace, sid="x1", alias="ext")
    await stub.UpdateSession(pb.UpdateSessionRequest(session_id="x1", mode_id="readonly"))
    assert (await _spawn(stub, external, "c2")).policy.autonomy == "full"


async def test_a_childs_client_methods_are_decided_under_the_capped_autonomy(
        serve: ServerFactory, short_dir: Path, workspace: Path) -> None:
    """CheckOperation (an external child's fs/terminal requests) applies the same cap: a
    child on a `full` alias under a `readonly` parent may read, never write or execute."""
    _, stub = await serve(_cfg(short_dir, StoreSection(), alpha="readonly", beta="full"))
    parent = await _parent(stub, workspace)
    await _spawn(stub, parent, "c1")
    await stub.CreateSession(pb.CreateSessionRequest(  # beta on its own: full
        session_id="solo", agent_alias="beta", workspace_dir=str(workspace)))
    target = str(workspace / "new.txt")

    async def check(sid: str, op: int, path: str = target) -> bool:
        got = await stub.CheckOperation(pb.CheckOperationRequest(
            session_id=sid, operation=op, path=path))
        return got.allowed

    assert await check("c1", pb.OPERATION_READ, str(workspace))
    assert not await check("c1", pb.OPERATION_WRITE)
    assert not await check("c1", pb.OPERATION_EXECUTE, "")
    assert await check("solo", pb.OPERATION_WRITE)
    assert await check("solo", pb.OPERATION_EXECUTE, "")


async def test_send_to_session_checks_like_a_missing_row(serve: ServerFactory, short_dir: Path,
                                                         workspace: Path) -> None:
    """The send check: a hidden row and a missing one answer alike; a visible one is touched."""
    _, stub = await serve(_cfg(short_dir, StoreSection()))
    parent = await _parent(stub, workspace)
    child = (await _spawn(stub, parent, "c1")).session
    stranger = await _parent(stub, workspace, sid="s1", alias="beta", owner="client:other")
    key = parent.ownership.session_key
    sent = await stub.SendToSession(pb.SendToSessionRequest(requester_session_key=key,
                                                            session_id="c1"))
    assert sent.session.last_activity >= child.last_activity
    hidden = await _code(stub.SendToSession(pb.SendToSessionRequest(
        requester_session_key=key, session_id=stranger.session_id)))
    missing = await _code(stub.SendToSession(pb.SendToSessionRequest(
        requester_session_key=key, session_id="nope")))
    assert hidden == (grpc.StatusCode.NOT_FOUND, "Session not found: s1")
    assert missing == (grpc.StatusCode.NOT_FOUND, "Session not found: nope")
    for sid in ("s1", "nope"):
        check = await stub.CheckAccess(pb.CheckAccessRequest(
            requester_session_key=key, session_id=sid, action=pb.ACTION_SEND))
        assert (check.allowed, check.reason) == (False, f"Session not found: {sid}")
    # Under `all` with a2a off the other agent's unowned session stays hidden; the owned
    # cross-agent child is visible (SPEC §14's invariant).
    assert (await stub.SendToSession(pb.SendToSessionRequest(
        requester_session_key=key, session_id="c1", visibility="all"))).session.session_id == "c1"
    assert (await _code(stub.SendToSession(pb.SendToSessionRequest(
        requester_session_key=key, session_id="s1", visibility="all"))))[0] == \
        grpc.StatusCode.NOT_FOUND


async def test_history_limit_and_list_query(stub: Stub, workspace: Path) -> None:
    """GetHistory ``limit`` keeps the newest items in order; ListSessions ``query`` matches
    alias, title or id, case-insensitively."""
    parent = await _parent(stub, workspace)
    child = (await _spawn(stub, parent, "c1", label="Refactor the PARSER")).session
    R = pb.HistoryItem
    for n in range(3):
        await stub.AppendTurn(pb.AppendTurnRequest(session_id="c1", items=[
            R(role=R.ROLE_USER, text=f"q{n}"), R(role=R.ROLE_ASSISTANT, text=f"a{n}")]))
    key = parent.ownership.session_key
    pages = stub.GetHistory(pb.GetHistoryRequest(requester_session_key=key, session_id="c1",
                                                 limit=3))
    assert [i.text async for p in pages for i in p.items] == ["a1", "q2", "a2"]
    whole = stub.GetHistory(pb.GetHistoryRequest(requester_session_key=key, session_id="c1"))
    assert len([i async for p in whole for i in p.items]) == 6
    for query, expected in (("parser", {"c1"}), ("BETA", {"c1"}), ("p1", {"p1"}),
                            ("", {"p1", "c1"}), ("zzz", set())):
        listed = await stub.ListSessions(pb.ListSessionsRequest(requester_session_key=key,
                                                                query=query))
        assert {r.session_id for r in listed.sessions} == expected, query
    assert child.title == "Refactor the PARSER"


async def test_a_sent_turn_is_capped_at_the_senders_autonomy(
        serve: ServerFactory, short_dir: Path, workspace: Path) -> None:
    """SendToSession answers the sender's acting autonomy as the turn's
    cap (lowered by the sender's own turn cap); an external target above it is refused —
    acpgate cannot cap its turn — and so is spawning an external alias above it."""
    cfg = _cfg(short_dir, StoreSection(), alpha="readonly", beta="full", ext="full")
    _, stub = await serve(dataclasses.replace(cfg, a2a=A2aSection(enabled=True)))
    low = await _parent(stub, workspace, sid="low")                    # alpha: readonly
    high = await _parent(stub, workspace, sid="high", alias="beta")    # beta: full
    await _parent(stub, workspace, sid="t", alias="beta")              # a full built-in target
    await _parent(stub, workspace, sid="x", alias="ext")               # a full external target

    async def send(sender: pb.SessionRow, sid: str, turn_cap: str = "") -> str:
        got = await stub.SendToSession(pb.SendToSessionRequest(
            requester_session_key=sender.ownership.session_key, session_id=sid,
            visibility="all", requester_turn_cap=turn_cap))
        return got.autonomy_cap

    assert await send(low, "t") == "readonly"
    assert await send(high, "t") == "full"
    assert await send(high, "t", turn_cap="supervised") == "supervised"
    assert await send(high, "x") == "full"
    denied = grpc.StatusCode.PERMISSION_DENIED
    for sender, cap in ((low, ""), (high, "readonly")):
        assert await _code(send(sender, "x", cap)) == (denied, MSG_SEND_ABOVE_AUTONOMY.format(
            session_id="x", agent="ext", target="full",
            sender="readonly")), sender.session_id
    # Spawning: a built-in child is capped by the policy; an external one above is refused.
    assert await _code(_spawn(stub, low, "k1", alias="ext")) == (
        denied, MSG_SPAWN_ABOVE_AUTONOMY.format(agent="ext", target="full", sender="readonly"))
    assert (await _spawn(stub, high, "k2", alias="ext")).session.session_id == "k2"
    capped = await _spawn(stub, high, "k3", requester_turn_cap="readonly")
    assert capped.policy.autonomy == capped.agent.autonomy == "readonly"
    code, _ = await _code(stub.GetSession(pb.GetSessionRequest(session_id="k1")))
    assert code == grpc.StatusCode.NOT_FOUND, "a refused spawn writes no row"


async def test_only_a_stored_session_sends(stub: Stub, workspace: Path) -> None:
    """SendToSession acts for a session, never for a principal or an empty
    requester (which is not the operator)."""
    await _parent(stub, workspace)
    for key in ("", OWNER, "local", "agent:alpha:acp:ghost"):
        assert await _code(stub.SendToSession(pb.SendToSessionRequest(
            requester_session_key=key, session_id="p1"))) == (
            grpc.StatusCode.INVALID_ARGUMENT, MSG_SEND_REQUESTER), key
