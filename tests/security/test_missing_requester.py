"""No RPC treats a missing requester as the operator.

A real session service on a unix socket holds sessions of two tokens and of the
local user. Every RPC that takes a requester is called the way a careless or
hostile caller would — with the requester left empty — and must refuse
(INVALID_ARGUMENT) rather than answer with every row; only an explicit
``operator = true`` reads everything. A requester that names a principal, or
a session of one, gets that principal's rows only.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.protocol import MSG_REQUESTER_REQUIRED, MSG_SEND_REQUESTER
from services.session.api.server import start_session_server
from tests.session.conftest import make_cfg

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub

pytestmark = pytest.mark.timeout(120)

OWNERS = {"a1": "client:a", "b1": "client:b", "l1": ""}


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    short_dir = Path(tempfile.mkdtemp(prefix="acs-"))  # a unix socket path must stay short
    running = await start_session_server(make_cfg(short_dir), f"unix:{short_dir}/s.sock")
    channel = running.dial()
    stub: Stub = session_pb2_grpc.SessionServiceStub(channel)
    for sid, owner in OWNERS.items():
        await stub.CreateSession(pb.CreateSessionRequest(
            session_id=sid, agent_alias="alpha", workspace_dir=str(short_dir),
            owner_session_key=owner))
        await stub.AppendTurn(pb.AppendTurnRequest(session_id=sid, items=[
            pb.HistoryItem(role=pb.HistoryItem.ROLE_USER, text=f"secret of {sid}")]))
    yield stub
    await channel.close(None)
    await running.stop(grace=0.2)
    shutil.rmtree(short_dir, ignore_errors=True)


async def _refused(call: Any) -> tuple[grpc.StatusCode, str]:
    """How ``call`` (a unary call, or a stream read to its end) was refused."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    return err.value.code(), err.value.details() or ""


async def test_an_empty_requester_is_refused_never_the_operator(
        stub: Stub) -> None:
    required = (grpc.StatusCode.INVALID_ARGUMENT, MSG_REQUESTER_REQUIRED)
    for vis in ("", "self", "tree", "agent", "all"):
        assert await _refused(stub.ListSessions(pb.ListSessionsRequest(
            visibility=vis, see_all_principals=True))) == required, vis
        for sid in OWNERS:
            assert await _refused(stub.GetHistory(pb.GetHistoryRequest(
                session_id=sid, visibility=vis))) == required
            assert await _refused(stub.SessionStatus(pb.SessionStatusRequest(
                session_id=sid, visibility=vis))) == required
            assert await _refused(stub.CheckAccess(pb.CheckAccessRequest(
                session_id=sid, action=pb.ACTION_HISTORY, visibility=vis))) == required
            assert await _refused(stub.SendToSession(pb.SendToSessionRequest(
                session_id=sid, visibility=vis))) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                      MSG_SEND_REQUESTER)
    # Only the explicit operator reads every row.
    every = await stub.ListSessions(pb.ListSessionsRequest(operator=True))
    assert {r.session_id for r in every.sessions} == set(OWNERS)


async def test_a_named_requester_sees_its_own_principal_only(
        stub: Stub) -> None:
    for key, mine in (("client:a", "a1"), ("agent:alpha:acp:a1", "a1"), ("client:b", "b1"),
                      ("local", "l1"), ("agent:alpha:acp:l1", "l1"), ("client:nobody", None)):
        for vis in ("agent", "all"):
            listed = await stub.ListSessions(pb.ListSessionsRequest(
                requester_session_key=key, visibility=vis))
            assert {r.session_id for r in listed.sessions} == ({mine} if mine else set()), key
            for sid in set(OWNERS) - {mine}:
                assert await _refused(stub.GetHistory(pb.GetHistoryRequest(
                    requester_session_key=key, session_id=sid, visibility=vis))) == (
                    grpc.StatusCode.NOT_FOUND, f"Session not found: {sid}"), (key, sid)
