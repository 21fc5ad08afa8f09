"""A session's state through the session service's gRPC API: extra roots, policy, delete, usage."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from tests.session.conftest import make_cfg

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub


def _resolve(alias: str, cwd: str, *extra: str) -> pb.ResolveWorkspaceRequest:
    return pb.ResolveWorkspaceRequest(alias=alias, cwd=cwd, additional_directories=list(extra))


async def test_additional_directories_resolve_like_cwd(stub: Stub, tmp_path: Path) -> None:
    """Real paths (symlinks resolved), order kept, duplicates and the workspace dropped."""
    ws, a, b = tmp_path / "ws", tmp_path / "a", tmp_path / "b"
    for d in (ws, a, b):
        d.mkdir()
    (tmp_path / "link").symlink_to(a)
    got = await stub.ResolveWorkspace(_resolve("alpha", str(ws), str(b), str(tmp_path / "link"),
                                               str(a), str(ws)))
    assert list(got.additional_directories) == [str(b.resolve()), str(a.resolve())]


@pytest.mark.parametrize(("entry", "reason"), [
    ("/nonexistent-dir-xyz", "No such file or directory"),
    ("/etc/ssh", "it is a credential store; an operator may allow the directory with "
                 "[autonomy] allow_cwd"),
    ("/", "it contains acpgate's own state"),
])
async def test_unusable_additional_directories_are_refused(stub: Stub, tmp_path: Path,
                                                           entry: str, reason: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ResolveWorkspace(_resolve("alpha", str(tmp_path), entry))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(f"additionalDirectories entry is not usable ({entry}): ")
    assert reason in info.value.details()


async def test_extra_roots_are_confined_like_the_cwd(serve, short_dir: Path) -> None:
    """An extra root that is, lies inside or contains acpgate's own state is refused as a
    cwd would be (the reason named, never the guarded path); one inside an agent workspace
    is fine; ``[autonomy] allow_cwd`` opts an exact directory in."""
    cfg = make_cfg(short_dir)
    cfg.data_dir.mkdir(parents=True)
    (short_dir / "proj").mkdir()
    inside_ws = cfg.agent_workspace("alpha") / "sub"
    inside_ws.mkdir(parents=True)
    real_inside, real_short = await asyncio.gather(
        *(asyncio.to_thread(os.path.realpath, d) for d in (inside_ws, short_dir)))
    _, stub = await serve(cfg)
    for extra, reason in ((short_dir, "it contains acpgate's own state"),
                          (cfg.data_dir, "it is acpgate's own state"),
                          (cfg.config_dir, "it is acpgate's own state")):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ResolveWorkspace(_resolve("alpha", str(short_dir / "proj"), str(extra)))
        assert reason in info.value.details()
        assert str(cfg.data_dir) not in info.value.details().split("): ", 1)[1]
    got = await stub.ResolveWorkspace(_resolve("alpha", str(short_dir / "proj"), str(inside_ws)))
    assert list(got.additional_directories) == [real_inside]
    opted = replace(cfg, autonomy=replace(cfg.autonomy, allow_cwd=(str(short_dir),)))
    _, lenient = await serve(opted)
    got = await lenient.ResolveWorkspace(_resolve("alpha", str(short_dir / "proj"), str(short_dir)))
    assert list(got.additional_directories) == [real_short]


async def test_policy_refuses_a_stored_extra_root_no_longer_allowed(stub: Stub,
                                                                   tmp_path: Path) -> None:
    """GetPolicy is on every session's way up (new and restore): a stored extra root that
    the confinement refuses now (a row from before, a config changed since) is refused."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.GetPolicy(pb.GetPolicyRequest(
            alias="alpha", workspace_dir=str(tmp_path), additional_directories=["/etc/ssh"]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(
        "additionalDirectories entry is not usable (/etc/ssh): it is a credential store")


async def test_policy_allows_the_additional_directories(stub: Stub, tmp_path: Path) -> None:
    """The extra roots are allowed roots of the policy (enforce.py and Landlock)."""
    policy = await stub.GetPolicy(pb.GetPolicyRequest(
        alias="alpha", workspace_dir=str(tmp_path), additional_directories=["/x", "/y"]))
    assert list(policy.allowed_roots)[1:] == ["/x", "/y"]


async def test_delete_session_and_usage_over_grpc(store_stub: Stub) -> None:
    """A row's title, mode, config, extra roots and usage totals, and DeleteSession,
    through gRPC on every store backend."""
    stub = store_stub
    await stub.CreateSession(pb.CreateSessionRequest(
        session_id="d1", agent_alias="alpha", workspace_dir="/w", additional_directories=["/x"]))
    await stub.AppendTurn(pb.AppendTurnRequest(
        session_id="d1", token_delta=5,
        items=[pb.HistoryItem(role=pb.HistoryItem.ROLE_USER, text="first line\nsecond")],
        usage=pb.TurnUsage(input_tokens=3, output_tokens=2)))
    row = await stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="d1", mode_id="plan", config_json='{"model": "m"}'))
    assert (row.title, row.mode_id, row.config_json) == ("first line", "plan", '{"model": "m"}')
    assert (list(row.additional_directories), row.input_tokens, row.output_tokens) == \
        (["/x"], 3, 2)
    row = await stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="d1", additional_directories=pb.StringList(values=[])))
    assert list(row.additional_directories) == []
    assert (await stub.DeleteSession(pb.DeleteSessionRequest(session_id="d1"))).deleted
    assert not (await stub.DeleteSession(pb.DeleteSessionRequest(session_id="d1"))).deleted
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.GetSession(pb.GetSessionRequest(session_id="d1"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_protocol_version_over_grpc(store_stub: Stub) -> None:
    """The ACP version a session's agent speaks: none recorded on a new row, set by
    UpdateSession and kept by an update that does not name it; a number that is no ACP
    version is INVALID_ARGUMENT."""
    stub = store_stub
    row = await stub.CreateSession(pb.CreateSessionRequest(
        session_id="p1", agent_alias="alpha", workspace_dir="/w"))
    assert row.protocol_version == 0
    row = await stub.UpdateSession(pb.UpdateSessionRequest(session_id="p1", protocol_version=2))
    assert row.protocol_version == 2
    row = await stub.UpdateSession(pb.UpdateSessionRequest(session_id="p1", lease_id="L"))
    assert (row.protocol_version, row.lease_id) == (2, "L")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.UpdateSession(pb.UpdateSessionRequest(session_id="p1", protocol_version=-1))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_delete_session_refuses_another_hosts_session(store_stub: Stub) -> None:
    """Several hosts: DeleteSession on behalf of one instance is ABORTED ("Session already
    active", nothing removed) while another instance's claim is live; its own goes."""
    stub = store_stub
    for sid in ("mine", "theirs"):
        await stub.CreateSession(pb.CreateSessionRequest(
            session_id=sid, agent_alias="alpha", workspace_dir="/w"))
    await stub.ClaimSession(pb.ClaimSessionRequest(session_id="mine", gateway_instance_id="gw-a"))
    await stub.ClaimSession(pb.ClaimSessionRequest(session_id="theirs",
                                                   gateway_instance_id="gw-b"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.DeleteSession(pb.DeleteSessionRequest(session_id="theirs",
                                                         holder_instance_id="gw-a"))
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert "already active" in info.value.details()
    assert (await stub.GetSession(pb.GetSessionRequest(session_id="theirs"))).session_id
    assert (await stub.DeleteSession(pb.DeleteSessionRequest(
        session_id="mine", holder_instance_id="gw-a"))).deleted
