"""``ForkSession`` over real gRPC: who may fork, what the fork is, what it costs.

The requester is a principal or the operator; another principal's session, and
one that does not exist, get the very same NOT_FOUND. The fork belongs to the
parent's principal, runs the agent a restore of the parent would run, keeps the
parent's workspace (a ``cwd`` naming another is refused), is capped like the
parent, copies its history in the store and counts it against the owner's quota.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import StoreSection
from services.common.protocol import MSG_FORK_CWD, MSG_FORK_REQUESTER, MSG_SESSION_NOT_FOUND
from tests.session.conftest import make_cfg
from tests.session.test_grpc import _code, _pages

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub
    from tests.session.conftest import ServerFactory

OWNER = "client:tok1"
ITEMS = [pb.HistoryItem(role=pb.HistoryItem.ROLE_USER, text="first message"),
         pb.HistoryItem(role=pb.HistoryItem.ROLE_ASSISTANT, text="first answer")]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    (ws / "sub").mkdir(parents=True)
    return Path(os.path.realpath(ws))


async def _parent(stub: Stub, workspace: Path, sid: str = "p1", owner: str = OWNER,
                  alias: str = "alpha") -> pb.SessionRow:
    row = await stub.CreateSession(pb.CreateSessionRequest(
        session_id=sid, agent_alias=alias, workspace_dir=str(workspace),
        owner_session_key=owner, mcp_servers_json='[{"name": "docs"}]'))
    await stub.AppendTurn(pb.AppendTurnRequest(session_id=sid, items=ITEMS))
    return row


def _fork(stub: Stub, parent: str, sid: str = "f1", *, requester: str = OWNER,
          operator: bool = False, **kw: Any) -> Any:
    return stub.ForkSession(pb.ForkSessionRequest(
        requester_session_key=requester, operator=operator, parent_session_id=parent,
        session_id=sid, gateway_instance_id="gw-1", host="h1", **kw))


async def test_fork_is_the_parents_session_with_its_history(
        serve: ServerFactory, short_dir: Path, workspace: Path,
        store_section: StoreSection) -> None:
    _, stub = await serve(make_cfg(short_dir, store=store_section))
    await _parent(stub, workspace)
    got = await _fork(stub, "p1", cwd=str(workspace / "sub" / ".."))
    row = got.session
    assert (row.session_id, row.forked_from, row.agent_alias) == ("f1", "p1", "alpha")
    assert row.workspace_dir == str(workspace) and row.mcp_servers_json == '[{"name": "docs"}]'
    assert row.ownership.owner_session_key == OWNER
    assert (row.claim.instance_id, row.claim.host, row.claim.generation) == ("gw-1", "h1", 1)
    assert (got.parent.session_id, got.agent.alias, got.policy.workspace_dir) == \
        ("p1", "alpha", str(workspace))
    assert got.agent.launch.seal  # a sealed spec the lifecycle service will run
    pages = await _pages(stub.StreamHistory(pb.StreamHistoryRequest(session_id="f1")))
    assert [i.text for p in pages for i in p.items] == ["first message", "first answer"]
    listed = await stub.ListSessions(pb.ListSessionsRequest(requester_session_key=OWNER))
    assert {r.session_id: r.forked_from for r in listed.sessions} == {"p1": "", "f1": "p1"}


async def test_only_the_parents_principal_or_the_operator_forks(
        serve: ServerFactory, short_dir: Path, workspace: Path) -> None:
    """Another principal's session answers exactly like a missing one, and nothing is
    written; the operator forks any (the fork is the parent's principal's); a session key
    is no requester here."""
    _, stub = await serve(make_cfg(short_dir))
    await _parent(stub, workspace)
    hidden = await _code(_fork(stub, "p1", requester="client:tok2"))
    missing = await _code(_fork(stub, "nope", requester="client:tok2"))
    assert hidden == (grpc.StatusCode.NOT_FOUND, MSG_SESSION_NOT_FOUND.format(session_id="p1"))
    assert missing == (grpc.StatusCode.NOT_FOUND,
                       MSG_SESSION_NOT_FOUND.format(session_id="nope"))
    assert (await _code(_fork(stub, "p1", requester="local")))[0] == grpc.StatusCode.NOT_FOUND
    assert (await _code(stub.GetSession(pb.GetSessionRequest(session_id="f1"))))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert await _code(_fork(stub, "p1", requester="agent:alpha:acp:p1")) == \
        (grpc.StatusCode.INVALID_ARGUMENT, MSG_FORK_REQUESTER)
    assert (await _code(_fork(stub, "p1", requester="")))[0] == grpc.StatusCode.INVALID_ARGUMENT
    got = await _fork(stub, "p1", "f2", requester="", operator=True)
    assert got.session.ownership.owner_session_key == OWNER


async def test_cwd_must_be_the_parents_workspace(serve: ServerFactory, short_dir: Path,
                                                 workspace: Path) -> None:
    _, stub = await serve(make_cfg(short_dir))
    await _parent(stub, workspace)
    code, message = await _code(_fork(stub, "p1", cwd=str(workspace / "sub")))
    assert (code, message) == (grpc.StatusCode.INVALID_ARGUMENT, MSG_FORK_CWD.format(
        workspace=workspace, cwd=workspace / "sub"))
    code, _ = await _code(_fork(stub, "p1", cwd=str(workspace / "missing")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    # Given extra roots replace the parent's; given MCP servers too.
    got = await _fork(stub, "p1", additional_directories=pb.StringList(
        values=[str(workspace / "sub")]), mcp_servers_json="[]")
    assert list(got.session.additional_directories) == [str(workspace / "sub")]
    assert str(workspace / "sub") in got.policy.allowed_roots
    assert got.session.mcp_servers_json == "[]"


async def test_fork_runs_the_restore_agent_and_the_parents_cap(
        serve: ServerFactory, short_dir: Path, workspace: Path) -> None:
    """A parent whose agent is disabled now is forked onto the restore fallback; the fork
    of a spawned session is capped by the spawner, as the session itself is."""
    cfg = make_cfg(short_dir)
    agents = {alias: dataclasses.replace(a, autonomy="readonly" if alias == "alpha" else "full")
              for alias, a in cfg.agents.items()}
    _, stub = await serve(dataclasses.replace(cfg, agents=agents))
    await _parent(stub, workspace, "old", alias="off")
    assert (await _fork(stub, "old", "f-old")).agent.alias == "alpha"
    boss = await _parent(stub, workspace, "boss")
    kid = await stub.SpawnSession(pb.SpawnSessionRequest(
        requester_session_key=boss.ownership.session_key, session_id="kid", agent_alias="beta"))
    assert kid.policy.autonomy == "readonly"
    got = await _fork(stub, "kid", "f-kid")
    assert (got.agent.alias, got.policy.autonomy) == ("beta", "readonly")
    assert got.session.ownership.parent_session_key == boss.ownership.session_key


async def test_fork_over_the_tokens_quota_writes_nothing(serve: ServerFactory, short_dir: Path,
                                                         workspace: Path) -> None:
    cfg = make_cfg(short_dir, store=StoreSection(max_token_bytes=60))
    _, stub = await serve(cfg)
    await _parent(stub, workspace)
    code, message = await _code(_fork(stub, "p1"))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_token_bytes" in message
    assert (await _code(stub.GetSession(pb.GetSessionRequest(session_id="f1"))))[0] == \
        grpc.StatusCode.NOT_FOUND


async def test_fork_needs_a_persistent_store(serve: ServerFactory, short_dir: Path) -> None:
    cfg = make_cfg(short_dir)
    cfg.data_dir.mkdir(parents=True)
    (cfg.data_dir / "sessions").write_text("oops")
    _, stub = await serve(cfg)
    await stub.CreateSession(pb.CreateSessionRequest(session_id="m", agent_alias="alpha",
                                                     workspace_dir="/w"))
    code, _ = await _code(_fork(stub, "m", requester="", operator=True))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
