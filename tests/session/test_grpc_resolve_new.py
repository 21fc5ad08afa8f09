"""ResolveNewSession: session/new's ResolveAgent, ResolveWorkspace and GetPolicy in one round
trip, over a real server (SPEC §3, §12; issue 15). Each answer is the one its own RPC gives,
and the first refusal is the refusal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from acpgate.session.v1 import session_pb2 as pb
from services.common.protocol import MSG_CWD_REFUSED
from tests.session.test_grpc import _code

if TYPE_CHECKING:
    from acpgate.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub


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
