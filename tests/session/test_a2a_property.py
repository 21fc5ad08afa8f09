"""SPEC §14's invariant as a property of the session service itself:
for every action — list, history, send, status — whatever ``tree`` shows, ``all`` shows.

Hypothesis builds forests of sessions through the real RPCs (CreateSession for top-level
sessions of random owners, SpawnSession for children of random agents, so the ownership
is what the product records), on real servers for each ``[a2a]`` policy, and asks each
action from every session's key and from a gateway principal. The same check guards
every action, so each action's answers also equal the list's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acpgate_contracts.session.v1 import session_pb2 as pb
from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.config import A2aSection, AgentSection, Config
from services.common.grpc_server import RunningServer
from services.common.principals import principal_of_owner
from services.session.api.server import start_session_server
from tests.session.conftest import make_cfg

POLICIES = {
    "a2a-off": A2aSection(enabled=False),
    "a2a-on": A2aSection(enabled=True),
    "a2a-allow-list": A2aSection(enabled=True, allow=("alpha", "ma*")),
}
AGENTS = ("alpha", "beta", "main")
OWNERS = ("", "client:a", "client:b")
ACTIONS = ("list", "history", "send", "status")


@dataclasses.dataclass
class Servers:
    loop: asyncio.AbstractEventLoop
    stubs: dict[str, session_pb2_grpc.SessionServiceStub]
    workspace: str
    counter: Iterator[int]


async def _serve(cfg: Config, address: str) -> tuple[RunningServer, grpc.aio.Channel]:
    """A server and a channel to it, both on the running loop."""
    server = await start_session_server(cfg, address)
    return server, server.dial()


@pytest.fixture(scope="module")
def servers(loop: asyncio.AbstractEventLoop) -> Iterator[Servers]:
    root = Path(tempfile.mkdtemp(prefix="a2ap-"))
    ws = Path(tempfile.mkdtemp(prefix="a2ap-ws-"))
    running: list[tuple[RunningServer, grpc.aio.Channel]] = []
    stubs = {}
    try:
        for i, (name, a2a) in enumerate(POLICIES.items()):
            cfg = make_cfg(root / name, a2a=a2a)
            agents = {**cfg.agents, "main": AgentSection(alias="main", provider="demo",
                                                         model="demo")}
            cfg = dataclasses.replace(cfg, agents=agents)
            server, channel = loop.run_until_complete(_serve(cfg, f"unix:{root}/{i}.sock"))
            running.append((server, channel))
            stubs[name] = session_pb2_grpc.SessionServiceStub(channel)
        yield Servers(loop, stubs, str(ws.resolve()), itertools.count())
    finally:
        for server, channel in running:
            loop.run_until_complete(channel.close(None))
            loop.run_until_complete(server.stop(grace=0.2))
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ws, ignore_errors=True)


#: One forest: each node is (agent, parent index or None, owner of a top-level node).
forests = st.lists(
    st.tuples(st.sampled_from(AGENTS), st.integers(0, 5), st.sampled_from(OWNERS),
              st.booleans()),
    min_size=1, max_size=5)


async def _build(stub: session_pb2_grpc.SessionServiceStub, ws: str, prefix: str,
                 spec: list[tuple[str, int, str, bool]]) -> list[pb.SessionRow]:
    rows: list[pb.SessionRow] = []
    for i, (agent, parent, owner, top) in enumerate(spec):
        sid = f"{prefix}-{i}"
        if top or not rows:
            rows.append(await stub.CreateSession(pb.CreateSessionRequest(
                session_id=sid, agent_alias=agent, workspace_dir=ws, owner_session_key=owner)))
        else:
            got = await stub.SpawnSession(pb.SpawnSessionRequest(
                requester_session_key=rows[parent % len(rows)].ownership.session_key,
                session_id=sid, agent_alias=agent))
            rows.append(got.session)
    return rows


def principal_of(rows: list[pb.SessionRow], key: str) -> str:
    """The principal ``key`` acts for: itself for a principal key, else its row's owner's."""
    if key.startswith("client:"):
        return key
    row = next(r for r in rows if r.ownership.session_key == key)
    return principal_of_owner(row.ownership.owner_session_key)


async def _ok(call: object) -> bool:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        return False
    return True


async def _history(stub: session_pb2_grpc.SessionServiceStub, key: str, sid: str,
                   vis: str) -> bool:
    async def read() -> None:
        async for _ in stub.GetHistory(pb.GetHistoryRequest(
                requester_session_key=key, session_id=sid, visibility=vis)):
            pass
    return await _ok(read())


async def _seen(stub: session_pb2_grpc.SessionServiceStub, key: str, vis: str,
                ids: list[str]) -> dict[str, set[str]]:
    listed = await stub.ListSessions(pb.ListSessionsRequest(
        requester_session_key=key, visibility=vis, limit=1000))
    seen = {"list": {r.session_id for r in listed.sessions} & set(ids),
            "history": set(), "send": set(), "status": set()}
    for sid in ids:
        if await _history(stub, key, sid, vis):
            seen["history"].add(sid)
        send = stub.SendToSession(pb.SendToSessionRequest(
            requester_session_key=key, session_id=sid, visibility=vis))
        if key.startswith("client:"):  # a principal never sends: only a session does
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await send
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            seen["send"] = seen["list"]  # nothing to compare for the principal
        elif await _ok(send):
            seen["send"].add(sid)
        if await _ok(stub.SessionStatus(pb.SessionStatusRequest(
                requester_session_key=key, session_id=sid, visibility=vis))):
            seen["status"].add(sid)
    return seen


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=forests, policy=st.sampled_from(list(POLICIES)))
def test_spec14_property_tree_within_all_for_every_action(
        servers: Servers, spec: list[tuple[str, int, str, bool]], policy: str) -> None:
    stub = servers.stubs[policy]
    prefix = f"x{next(servers.counter)}"

    async def check() -> None:
        rows = await _build(stub, servers.workspace, prefix, spec)
        ids = [r.session_id for r in rows]
        for key in [*(r.ownership.session_key for r in rows), "client:a"]:
            tree = await _seen(stub, key, "tree", ids)
            every = await _seen(stub, key, "all", ids)
            for action in ACTIONS:
                assert tree[action] <= every[action], (policy, key, action)
                assert tree[action] == tree["list"] and every[action] == every["list"], action
            # A spawned child is always seen by its spawner, under tree and all alike.
            for r in rows:
                if r.ownership.spawned_by == key:
                    assert r.session_id in tree["list"], (key, r.session_id)
            # Nothing of another principal, under any level.
            mine = principal_of(rows, key)
            for r in rows:
                if principal_of_owner(r.ownership.owner_session_key) != mine:
                    assert r.session_id not in every["list"], (key, r.session_id)

    servers.loop.run_until_complete(check())
