"""The session service's answers for external adapters: CheckOperation and the
capabilities recorded per alias (SPEC §12 path rules; ARCHITECTURE rule 3)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import AutonomySection
from services.session.store import InvalidItem
from tests.session.conftest import make_cfg

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub
    from tests.session.conftest import Backend, ServerFactory


async def _row(stub: Stub, sid: str, alias: str, ws: Path) -> None:
    await stub.CreateSession(pb.CreateSessionRequest(session_id=sid, agent_alias=alias,
                                                     workspace_dir=str(ws)))


async def _check(stub: Stub, sid: str, op: int, path: str) -> pb.CheckOperationResponse:
    return await stub.CheckOperation(pb.CheckOperationRequest(  # type: ignore[no-any-return]
        session_id=sid, operation=op, path=path))


async def test_check_operation_applies_the_session_policy(stub: Stub, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("x")
    (ws / "out").symlink_to("/etc")
    await _row(stub, "s1", "ext", ws)
    real_ws = ws.resolve()
    ok = await _check(stub, "s1", pb.OPERATION_READ, str(ws / "a.txt"))
    assert ok.allowed and ok.resolved_path == str(real_ws / "a.txt")
    rel = await _check(stub, "s1", pb.OPERATION_WRITE, "new/b.txt")  # relative to the workspace
    assert rel.allowed and rel.resolved_path == str(real_ws / "new" / "b.txt")
    for op, path, reason in [
        (pb.OPERATION_READ, "/etc/hostname", "outside the session workspace"),
        (pb.OPERATION_READ, str(ws / "out" / "passwd"), "through a symlink"),
        (pb.OPERATION_WRITE, f"{ws}/../x", "'..'"),
        (pb.OPERATION_READ, "~/.ssh/id_rsa", "forbidden"),
        (pb.OPERATION_EXECUTE, "/", "outside the session workspace"),
        (pb.OPERATION_UNSPECIFIED, str(ws), "unknown operation"),
    ]:
        answer = await _check(stub, "s1", op, path)
        assert not answer.allowed and reason in answer.reason, (path, answer)
        assert answer.resolved_path == ""
    assert (await _check(stub, "s1", pb.OPERATION_EXECUTE, "")).allowed  # "" = the workspace


async def test_check_operation_readonly_refuses_writes_and_commands(
        serve: ServerFactory, short_dir: Path, tmp_path: Path) -> None:
    cfg = make_cfg(short_dir)
    cfg = replace(cfg, autonomy=AutonomySection(level="readonly"))
    cfg.config_dir.mkdir(parents=True)
    _, stub = await serve(cfg)
    await _row(stub, "r1", "ext", tmp_path)
    assert (await _check(stub, "r1", pb.OPERATION_READ, str(tmp_path))).allowed
    for op in (pb.OPERATION_WRITE, pb.OPERATION_EXECUTE):
        answer = await _check(stub, "r1", op, str(tmp_path / "f"))
        assert not answer.allowed and "readonly" in answer.reason


async def test_check_operation_unknown_session(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _check(stub, "nope", pb.OPERATION_READ, "/x")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_recorded_capabilities_come_back_with_the_agent(store_stub: Stub) -> None:
    """On every store backend: what RecordAgentCapabilities stored, ResolveAgent returns."""
    first = await store_stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias="ext"))
    assert first.adapter_capabilities_json == ""
    caps = '{"promptCapabilities":{"image":true}}'
    await store_stub.RecordAgentCapabilities(pb.RecordAgentCapabilitiesRequest(
        alias="ext", capabilities_json=caps))
    again = await store_stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias="ext"))
    assert again.adapter_capabilities_json == caps
    for alias, text, code in [("ext", "[1]", grpc.StatusCode.INVALID_ARGUMENT),
                              ("ext", "not json", grpc.StatusCode.INVALID_ARGUMENT),
                              ("ghost", "{}", grpc.StatusCode.INVALID_ARGUMENT)]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await store_stub.RecordAgentCapabilities(pb.RecordAgentCapabilitiesRequest(
                alias=alias, capabilities_json=text))
        assert info.value.code() == code


async def test_store_keeps_capabilities_across_reopen(backend: Backend) -> None:
    """On every store backend: one row per alias, replaced (not added) by a new record,
    kept across a reopen and seen by another connection (another host); bad input is
    refused and changes nothing."""
    store = await backend.open()
    assert await store.get_agent_capabilities("a") == ""
    await store.set_agent_capabilities("a", '{"x": 1}')
    await store.set_agent_capabilities("a", '{"x": 2}')  # replaced, not added
    await store.set_agent_capabilities("b", "{}")
    for alias, text in [("", "{}"), ("a\x00", "{}"), ("a", "[1]"), ("a", "not json")]:
        with pytest.raises(InvalidItem):
            await store.set_agent_capabilities(alias, text)
    assert await store.get_agent_capabilities("a\x00") == ""
    other = await backend.open()
    assert await other.get_agent_capabilities("a") == '{"x": 2}'
    await store.close()
    store = await backend.open()
    assert await store.get_agent_capabilities("a") == '{"x": 2}'
    assert await store.get_agent_capabilities("b") == "{}"
    assert await backend.count("SELECT count(*) FROM agent_capabilities") == 2
