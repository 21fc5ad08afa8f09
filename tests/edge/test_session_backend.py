"""The edge's session backend against a real session service on a unix socket: failures
come back as ServiceError with the service's own words, rows as records, streams as async
iterators; and an edge component driven by a fake backend, with no gRPC at all."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import SESSION_NOT_FOUND
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session import SessionBackend
from services.edge.backends.session_types import (
    SESSION_ACTIVE,
    Claim,
    HistoryItem,
    Reader,
    RowUpdate,
    SessionRow,
    SessionStatus,
)
from services.edge.caller import LOCAL_OPERATOR, client_caller
from services.edge.dialect.visibility import visible_row
from services.edge.sessions.runtime import EdgeRuntime
from services.session.api.server import start_session_server
from tests.session.conftest import make_cfg


@pytest.fixture
async def backend() -> AsyncIterator[SessionBackend]:
    """A backend on its own channel to a session service listening on a unix socket."""
    root = Path(tempfile.mkdtemp(prefix="acsb-"))
    cfg = make_cfg(root)
    cfg.config_dir.mkdir(parents=True)
    running = await start_session_server(cfg, f"unix:{root}/s.sock")
    channel = running.dial()
    try:
        yield SessionBackend(channel)
    finally:
        await channel.close(None)
        await running.stop(grace=0.2)
        shutil.rmtree(root, ignore_errors=True)


async def _create(backend: SessionBackend, sid: str, workspace: str) -> None:
    await backend.stub.CreateSession(pb.CreateSessionRequest(
        session_id=sid, agent_alias="alpha", workspace_dir=workspace,
        gateway_instance_id="edge-1", host="h1"))


async def test_not_found_is_a_failure_with_the_service_detail(backend: SessionBackend) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raw:
        await backend.stub.GetSession(pb.GetSessionRequest(session_id="nope"))
    with pytest.raises(ServiceError) as got:
        await backend.get_session("nope")
    assert got.value.kind is Failure.NOT_FOUND
    assert got.value.code == "NOT_FOUND"
    assert got.value.detail == raw.value.details() and got.value.detail


async def test_a_refused_update_is_invalid_with_its_reason(
        backend: SessionBackend, tmp_path: Path) -> None:
    await _create(backend, "s-bad", str(tmp_path))
    with pytest.raises(ServiceError) as got:
        await backend.update_session(RowUpdate("s-bad", state=99))
    assert got.value.kind is Failure.INVALID
    assert got.value.detail == "state must be ACTIVE or INACTIVE"


async def test_rows_are_records_and_updates_set_only_their_fields(
        backend: SessionBackend, tmp_path: Path) -> None:
    await _create(backend, "s-row", str(tmp_path))
    await backend.update_session(RowUpdate("s-row", state=SESSION_ACTIVE, title="named",
                                           additional_directories=[]))
    row = await backend.get_session("s-row")
    assert isinstance(row, SessionRow) and isinstance(row.claim, Claim)
    assert (row.session_id, row.agent_alias, row.title, row.state) == \
        ("s-row", "alpha", "named", SESSION_ACTIVE)
    assert row.additional_directories == ()
    status = await backend.session_status("s-row", Reader(operator=True))
    assert status.session == row and status.message_count == 0


async def test_history_streams_as_pages_and_a_missing_session_fails_mid_stream(
        backend: SessionBackend, tmp_path: Path) -> None:
    await _create(backend, "s-hist", str(tmp_path))
    items = [HistoryItem(role=HistoryItem.ROLE_USER, text="hello"),
             HistoryItem(role=HistoryItem.ROLE_ASSISTANT, text="hi there")]
    await backend.append_turn("s-hist", items, token_delta=0, holder_instance_id="",
                              claim_generation=0)
    got = [item async for page in backend.stream_history("s-hist") for item in page]
    assert [(i.role, i.text) for i in got] == [(i.role, i.text) for i in items]
    async with aclosing(backend.stream_history("s-hist")) as pages:
        async for _ in pages:
            break  # a reader that stops early ends the call
    with pytest.raises(ServiceError) as missing:
        async for _ in backend.stream_history("nope"):
            pass
    assert missing.value.kind is Failure.NOT_FOUND


class _FakeSessions:
    """The one backend method the visibility check calls, answering from a dict."""

    def __init__(self, rows: dict[str, SessionRow]) -> None:
        self.rows = rows
        self.asked: list[tuple[str, Reader]] = []

    async def session_status(self, session_id: str, reader: Reader) -> SessionStatus:
        self.asked.append((session_id, reader))
        row = self.rows.get(session_id)
        if row is None or not (reader.operator or reader.requester_session_key
                               == row.ownership.owner_session_key):
            raise ServiceError(Failure.NOT_FOUND, "session not found")
        return SessionStatus(row, 0)


async def test_visibility_on_a_fake_backend() -> None:
    fake = _FakeSessions({"mine": SessionRow(session_id="mine", agent_alias="alpha")})
    runtime = cast(EdgeRuntime, type("Runtime", (), {"session_service": fake})())
    row = await visible_row(runtime, LOCAL_OPERATOR, "mine")
    assert row.agent_alias == "alpha"
    caller = client_caller("t1")
    with pytest.raises(JsonRpcError) as hidden:  # another principal's: exactly "not found"
        await visible_row(runtime, caller, "mine")
    assert hidden.value.code == SESSION_NOT_FOUND
    assert [who for _, who in fake.asked] == [
        Reader(operator=True), Reader(requester_session_key=caller.principal)]
    failing: Any = _FakeSessions({})
    failing.session_status = _raising(ServiceError(Failure.UNAVAILABLE, "down"))
    runtime = cast(EdgeRuntime, type("Runtime", (), {"session_service": failing})())
    with pytest.raises(JsonRpcError) as down:
        await visible_row(runtime, LOCAL_OPERATOR, "mine")
    assert "UNAVAILABLE" in down.value.message


def _raising(exc: BaseException) -> Any:
    async def call(*_args: object) -> None:
        raise exc
    return call
