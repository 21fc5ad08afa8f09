"""ResolveNewSession: session/new's ResolveAgent, ResolveWorkspace and GetPolicy in one round
trip, over a real server (SPEC §3, §12). Each answer is the one its own RPC gives,
and the first refusal is the refusal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.protocol import MSG_CWD_REFUSED
from tests.session.test_grpc import _code

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub


async def test_the_three_answers_are_those_of_the_three_rpcs(stub: Stub, short_dir: Path) -> None:
    proj = short_dir / "proj"
    (proj / "extra").mkdir(parents=True)
    ask = pb.ResolveAgentRequest(connection_default="alpha")
    got = await stub.ResolveNewSession(pb.ResolveNewSessionRequest(
        agent=ask, cwd="proj", base_dir=str(short_dir), additional_directories=["proj/extra"]))
    agent = await stub.ResolveAgent(ask)
    ws = await stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(
        alias=agent.alias, cwd="proj", base_dir=str(short_dir),
        additional_directories=["proj/extra"]))
    policy = await stub.GetPolicy(pb.GetPolicyRequest(
        alias=agent.alias, workspace_dir=ws.workspace_dir,
        additional_directories=ws.additional_directories))
    assert (got.agent, got.workspace, got.policy) == (agent, ws, policy)
    assert got.workspace.workspace_dir == str(proj.resolve())
    assert str((proj / "extra").resolve()) in got.policy.allowed_roots


async def test_the_first_refusal_is_the_answer(stub: Stub, short_dir: Path) -> None:
    unknown = pb.ResolveNewSessionRequest(agent=pb.ResolveAgentRequest(explicit_alias="nope"),
                                          cwd="/no/such/dir")
    assert await _code(stub.ResolveNewSession(unknown)) == await _code(
        stub.ResolveAgent(unknown.agent))
    missing = pb.ResolveNewSessionRequest(agent=pb.ResolveAgentRequest(explicit_alias="alpha"),
                                          cwd="/no/such/dir")
    assert await _code(stub.ResolveNewSession(missing)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "cwd is not a usable directory (/no/such/dir): No such file or directory")
    (short_dir / "data").mkdir(exist_ok=True)
    state = pb.ResolveNewSessionRequest(agent=pb.ResolveAgentRequest(explicit_alias="alpha"),
                                        cwd=str(short_dir / "data"))
    code, details = await _code(stub.ResolveNewSession(state))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == MSG_CWD_REFUSED.format(relation="is", what="acpgate's own state")


def _create(sid: str, **fields: str) -> pb.CreateSessionRequest:
    """A ``create`` naming nothing of the decision (what it says of one is not read)."""
    return pb.CreateSessionRequest(session_id=sid, gateway_instance_id="gw-a", host="a",
                                   owner_session_key="owner:1", mcp_servers_json="[]", **fields)


async def test_with_create_the_row_is_written_for_what_was_decided(
        stub: Stub, short_dir: Path) -> None:
    proj = short_dir / "proj"
    (proj / "extra").mkdir(parents=True)
    got = await stub.ResolveNewSession(pb.ResolveNewSessionRequest(
        agent=pb.ResolveAgentRequest(connection_default="alpha"), cwd="proj",
        base_dir=str(short_dir), additional_directories=["proj/extra"],
        create=_create("s-new", agent_alias="ignored", workspace_dir="/ignored")))
    row = got.row
    assert (row.session_id, row.agent_alias, row.workspace_dir) == (
        "s-new", got.agent.alias, got.workspace.workspace_dir)
    assert list(row.additional_directories) == list(got.workspace.additional_directories)
    assert (row.claim.instance_id, row.claim.host) == ("gw-a", "a")  # claimed in the insert
    assert row.ownership.owner_session_key == "owner:1"
    assert row == await stub.GetSession(pb.GetSessionRequest(session_id="s-new"))
    # Without create nothing is written (and the answer has no row).
    plain = await stub.ResolveNewSession(pb.ResolveNewSessionRequest(
        agent=pb.ResolveAgentRequest(connection_default="alpha"), cwd=str(proj)))
    assert not plain.HasField("row")


async def test_a_refused_decision_writes_no_row_and_a_taken_id_is_refused(
        stub: Stub, short_dir: Path) -> None:
    refused = pb.ResolveNewSessionRequest(agent=pb.ResolveAgentRequest(explicit_alias="alpha"),
                                          cwd="/no/such/dir", create=_create("s-refused"))
    assert (await _code(stub.ResolveNewSession(refused)))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert (await _code(stub.GetSession(pb.GetSessionRequest(session_id="s-refused"))))[0] == \
        grpc.StatusCode.NOT_FOUND
    (short_dir / "p").mkdir()
    once = pb.ResolveNewSessionRequest(agent=pb.ResolveAgentRequest(explicit_alias="alpha"),
                                       cwd=str(short_dir / "p"), create=_create("s-once"))
    await stub.ResolveNewSession(once)
    assert await _code(stub.ResolveNewSession(once)) == await _code(stub.CreateSession(
        pb.CreateSessionRequest(session_id="s-once", agent_alias="alpha",
                                workspace_dir=str(short_dir / "p"))))
