"""The session service behind gRPC: a real server on a real unix socket (SPEC §2, §3, §8,
§12, §13, §14)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.config import A2aSection, StoreSection, load_config
from services.common.grpc_auth import GrpcSecurity, open_service_channel
from services.common.grpc_channel import wait_healthy
from services.common.protocol import MSG_CWD_REFUSED
from services.common.urls import redact_url
from services.lifecycle.adapters.sealed import open_launch
from services.session.api.server import SERVICE_NAME, store_target
from services.session.store import LATEST_SCHEMA_VERSION, HistoryEntry, NewSession, open_store
from tests.launches import dial, seal_key_of
from tests.session.conftest import make_cfg
from tests.session.test_visibility import EXPECTED, ROW_ORDER

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub
    from tests.session.conftest import ServerFactory


async def _code(call: object) -> tuple[grpc.StatusCode, str]:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    raise AssertionError("call succeeded")


async def _pages(stream: object) -> list[pb.HistoryPage]:
    return [p async for p in stream]  # type: ignore[attr-defined]


async def _items(stream: object) -> list[pb.HistoryItem]:
    return [i for p in await _pages(stream) for i in p.items]


# ------------------------------------------------------------------ operability


async def test_health_serving_and_reflection(serve: ServerFactory, short_dir: Path) -> None:
    """Both services serve: health SERVING; reflection lists SessionService and Health methods."""
    running, _ = await serve(make_cfg(short_dir))
    assert running.address.startswith("unix:")
    async with running.dial() as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for name in ("", SERVICE_NAME):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        reqs = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.health.v1.Health"),
        ]
        replies = [r async for r in refl.ServerReflectionInfo(iter(reqs))]
        names = {s.name for s in replies[0].list_services_response.service}
        assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names

        def methods(reply: reflection_pb2.ServerReflectionResponse, service: str) -> set[str]:
            out: set[str] = set()
            for raw in reply.file_descriptor_response.file_descriptor_proto:
                fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
                for svc in fd.service:
                    if f"{fd.package}.{svc.name}" == service:
                        out |= {m.name for m in svc.method}
            return out

        expected = {m.name for m in pb.DESCRIPTOR.services_by_name["SessionService"].methods}
        assert methods(replies[1], SERVICE_NAME) == expected
        assert "CheckAccess" in expected and "AppendTurn" in expected
        assert {"Check", "Watch"} <= methods(replies[2], "grpc.health.v1.Health")


async def test_spec2_store_status_persistent(store_stub: Stub, short_dir: Path,
                                            store_section: StoreSection) -> None:
    """SPEC §2: the store opened at <data dir>/sessions/acp-sessions.db, or at [store] url
    (shown without a password); the claim lease time is [store] lease_secs."""
    s = await store_stub.GetStoreStatus(pb.GetStoreStatusRequest())
    assert s.persistent and s.fallback_reason == "" and s.schema_version == LATEST_SCHEMA_VERSION
    assert s.claim_ttl_ms == 30_000
    if store_section.url:
        assert (s.backend, s.db_path) == ("postgresql", redact_url(store_section.url))
    else:
        assert s.backend == "sqlite"
        assert s.db_path == str(short_dir / "data" / "sessions" / "acp-sessions.db")


async def test_spec2_memory_fallback_reported(serve: ServerFactory, short_dir: Path) -> None:
    """SPEC §2: `sessions` is a file → memory store, reported; restore refused; rest works."""
    cfg = make_cfg(short_dir)
    (cfg.data_dir).mkdir(parents=True)
    (cfg.data_dir / "sessions").write_text("oops")
    _, stub = await serve(cfg)
    s = await stub.GetStoreStatus(pb.GetStoreStatusRequest())
    assert not s.persistent and "not a directory" in s.fallback_reason and s.db_path == ""
    await stub.CreateSession(pb.CreateSessionRequest(session_id="m", agent_alias="alpha",
                                                     workspace_dir="/w"))
    code, _ = await _code(stub.ResolveRestoreAgent(pb.ResolveRestoreAgentRequest(session_id="m")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert (cfg.data_dir / "sessions").read_text() == "oops"


# ------------------------------------------------------------------ agents, cwd, policy


async def test_spec3_resolve_agent(stub: Stub, short_dir: Path) -> None:
    """SPEC §3 over gRPC: launch specs, and INVALID_ARGUMENT with the exact SPEC message."""
    a = await stub.ResolveAgent(pb.ResolveAgentRequest())
    assert a.alias == "alpha" and a.kind == "builtin" and a.command == sys.executable
    assert list(a.args) == ["-I", "-m", "services.agent", "--config-dir", str(short_dir / "cfg"),
                            "--alias", "alpha"]
    assert a.default_model == "demo/demo" and a.autonomy == "supervised"
    assert await asyncio.to_thread(Path(a.agent_workspace).is_dir)
    # What the lifecycle service will run: the same spec, sealed with the install's key; the
    # built-in agent takes acpgate's configuration overrides, never [services]/[store].
    key = seal_key_of(make_cfg(short_dir))
    opened = open_launch(a.launch, key)
    assert (opened.command, list(opened.args)) == (a.command, list(a.args))
    assert opened.pass_env == tuple(a.pass_env) and "ACPGATE_agents__*" in opened.pass_env
    assert not any(p.startswith(("ACPGATE_services", "ACPGATE_store")) for p in opened.pass_env)
    e = await stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias=" ", connection_default="ext"))
    assert (e.alias, e.command, list(e.args)) == ("ext", "some-acp", ["--x"])
    assert open_launch(e.launch, key).pass_env == ()  # an external agent: nothing of ours
    assert await _code(stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias="nope"))) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Unknown agent `nope` — no [agents.nope] entry configured",
    )
    assert await _code(stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias="off"))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "Agent `off` is not enabled for dispatch",
    )


async def test_warm_agents_resolved_for_the_edge(stub: Stub, short_dir: Path) -> None:
    """ListWarmAgents: the dispatchable agents with warm > 0 (built-in agents default to 1,
    acp agents to 0, disabled ones never), with the files a warm built-in agent read."""
    resp = await stub.ListWarmAgents(pb.ListWarmAgentsRequest())
    assert [(a.alias, a.warm) for a in resp.agents] == [("alpha", 1), ("beta", 1)]
    alpha = resp.agents[0]
    assert list(alpha.watch_paths) == [str(short_dir / "cfg" / "config.toml")]
    assert alpha.command == sys.executable and await asyncio.to_thread(Path(alpha.agent_workspace).is_dir)
    resolved = await stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias="ext"))
    assert resolved.warm == 0 and list(resolved.watch_paths) == []
    assert (await stub.ResolveAgent(pb.ResolveAgentRequest())).warm == 1


async def test_agents_listed_for_clients(serve: ServerFactory, stub: Stub,
                                         short_dir: Path) -> None:
    """ListAgents: the dispatchable agents (a disabled one never) with no launch details,
    the default the alias chain gives (a connection default counts; none: "")."""
    resp = await stub.ListAgents(pb.ListAgentsRequest())
    assert [(a.alias, a.kind, a.default_model) for a in resp.agents] == [
        ("alpha", "builtin", "demo/demo"), ("beta", "builtin", "demo/demo"), ("ext", "acp", "")]
    assert resp.default_alias == "alpha"
    by_default = await stub.ListAgents(pb.ListAgentsRequest(connection_default="beta"))
    assert by_default.default_alias == "beta"
    assert (await stub.ListAgents(pb.ListAgentsRequest(connection_default="off"))
            ).default_alias == ""
    _, none_default = await serve(make_cfg(short_dir / "nd", default_agent=""))
    assert (await none_default.ListAgents(pb.ListAgentsRequest())).default_alias == ""


async def test_spec3_alias_required_over_grpc(serve: ServerFactory, short_dir: Path) -> None:
    """SPEC §3: no default and several agents → the exact alias-required message."""
    _, stub = await serve(make_cfg(short_dir, default_agent=""))
    assert await _code(stub.ResolveAgent(pb.ResolveAgentRequest())) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "session/new requires `agentAlias` (alias of a configured [agents.<alias>] entry)",
    )


async def test_spec3_resolve_workspace(stub: Stub, short_dir: Path) -> None:
    """SPEC §3: `.` placeholder, explicit dirs, a file and a missing dir over gRPC."""
    agent_ws = (short_dir / "cfg" / "agents" / "alpha" / "workspace").resolve()
    w = await stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(
        alias="alpha", cwd=".", base_dir=str(short_dir / "cfg")))
    assert w.workspace_dir == str(agent_ws) and w.is_agent_workspace
    w = await stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(alias="alpha"))
    assert w.workspace_dir == str(agent_ws) and w.is_agent_workspace
    proj = short_dir / "proj"
    proj.mkdir()
    w = await stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(
        alias="alpha", cwd="proj", base_dir=str(short_dir)))
    assert w.workspace_dir == str(proj.resolve()) and not w.is_agent_workspace
    f = proj / "f.txt"
    f.write_text("x")
    assert await _code(stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(alias="alpha",
                                                                        cwd=str(f)))) == (
        grpc.StatusCode.INVALID_ARGUMENT, f"cwd is not a usable directory ({f}): Not a directory")
    code, details = await _code(stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(
        alias="alpha", cwd="/no/such/dir")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "cwd is not a usable directory (/no/such/dir): No such file or directory"


async def test_get_policy_refuses_a_workspace_of_acpgate_state(stub: Stub,
                                                                short_dir: Path) -> None:
    """Every session comes up through GetPolicy, so a stored workspace that is
    acpgate's own state is refused there with session/new's message; the agent workspace
    (inside the config dir) is not."""
    for workspace, relation in ((short_dir / "data", "is"), (short_dir, "contains"),
                                (short_dir / "cfg" / "x", "lies inside")):
        code, details = await _code(stub.GetPolicy(pb.GetPolicyRequest(
            alias="alpha", workspace_dir=str(workspace))))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details == MSG_CWD_REFUSED.format(relation=relation, what="acpgate's own state")
    agent_ws = short_dir / "cfg" / "agents" / "alpha" / "workspace"
    p = await stub.GetPolicy(pb.GetPolicyRequest(alias="alpha", workspace_dir=str(agent_ws)))
    assert p.workspace_dir == str(agent_ws)


async def test_spec12_get_policy(stub: Stub, short_dir: Path) -> None:
    """SPEC §12: the policy message: agent workspace as allowed root, [autonomy] defaults."""
    p = await stub.GetPolicy(pb.GetPolicyRequest(alias="alpha", workspace_dir="/proj"))
    assert p.workspace_dir == "/proj"
    assert list(p.allowed_roots) == [str(short_dir / "cfg" / "agents" / "alpha" / "workspace")]
    assert "/etc/shadow" in p.forbidden_paths and "~/.ssh" in p.forbidden_paths
    # acpgate's own state is always off limits (the agent workspace is an allowed root).
    assert str(short_dir / "data") in p.forbidden_paths
    assert str(short_dir / "cfg") in p.forbidden_paths
    assert p.autonomy == "supervised" and p.workspace_only and "file_read" in p.auto_approve
    code, _ = await _code(stub.GetPolicy(pb.GetPolicyRequest(alias="zzz", workspace_dir="/p")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# ------------------------------------------------------------------ rows and history


def _turn_items(text: str) -> list[pb.HistoryItem]:
    R = pb.HistoryItem
    return [
        R(role=R.ROLE_USER, text=text),
        R(role=R.ROLE_TOOL_CALL, tool_call_id="t1", tool_name="shell", tool_kind="execute",
          title="shell", arguments_json='{"cmd": "ls"}'),
        R(role=R.ROLE_TOOL_RESULT, tool_call_id="t1", output="a b", status="completed"),
        R(role=R.ROLE_ASSISTANT, text="two files"),
    ]


async def test_spec8_spec13_rows_and_turns(store_stub: Stub) -> None:
    """SPEC §8/§13 over gRPC: create with ownership, update, touch, append, stream, errors."""
    row = await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id="s1", agent_alias="alpha", workspace_dir="/w", gateway_instance_id="gw"))
    o = row.ownership
    assert (o.session_key, o.owner_session_key, o.agent_id, o.backend, o.gateway_instance_id) == (
        "agent:alpha:acp:s1", "agent:alpha:acp:s1", "alpha", "acpx", "gw")
    assert row.state == pb.SESSION_STATE_ACTIVE and o.created_at > 0
    child = await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id="s2", agent_alias="beta", workspace_dir="/w", spawned_by=o.session_key))
    assert child.ownership.owner_session_key == o.session_key
    code, _ = await _code(store_stub.CreateSession(pb.CreateSessionRequest(
        session_id="s1", agent_alias="alpha", workspace_dir="/w")))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    code, _ = await _code(store_stub.CreateSession(pb.CreateSessionRequest(session_id="x")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT

    upd = await store_stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="s1", state=pb.SESSION_STATE_INACTIVE, lease_id="L", adapter_session_id="ad"))
    assert (upd.state, upd.lease_id, upd.adapter_session_id) == (
        pb.SESSION_STATE_INACTIVE, "L", "ad")
    upd = await store_stub.UpdateSession(pb.UpdateSessionRequest(session_id="s1", lease_id=""))
    assert upd.lease_id == "" and upd.adapter_session_id == "ad"
    # The client's MCP server list is kept per session, replaced when set.
    servers = '[{"name": "fs", "command": "/bin/fs", "args": [], "env": []}]'
    upd = await store_stub.UpdateSession(pb.UpdateSessionRequest(session_id="s1",
                                                                 mcp_servers_json=servers))
    assert upd.mcp_servers_json == servers
    got = await store_stub.GetSession(pb.GetSessionRequest(session_id="s1"))
    assert got.mcp_servers_json == servers
    code, _ = await _code(store_stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="s1", mcp_servers_json="{}")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await _code(store_stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="s1", state=pb.SESSION_STATE_UNSPECIFIED)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT

    r = await store_stub.AppendTurn(pb.AppendTurnRequest(
        session_id="s1", items=_turn_items("list files please"), token_delta=7,
        plan_json='[{"content": "step", "priority": "high", "status": "pending"}]'))
    assert (r.turn, r.first_seq, r.last_seq) == (1, 1, 4)
    items = await _items(store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="s1")))
    assert [i.seq for i in items] == [1, 2, 3, 4]
    assert items[1].arguments_json == '{"cmd": "ls"}' and items[2].output == "a b"
    assert [i.seq for i in await _items(store_stub.StreamHistory(
        pb.StreamHistoryRequest(session_id="s1", after_seq=2)))] == [3, 4]
    got = await store_stub.GetSession(pb.GetSessionRequest(session_id="s1"))
    assert got.title == "list files please" and got.token_count == 7
    assert got.plan_json.startswith("[")
    touched = await store_stub.TouchSession(pb.TouchSessionRequest(session_id="s1"))
    assert touched.last_activity >= got.last_activity

    # Atomic: a bad last item rolls the whole turn back.
    bad = [*_turn_items("again"), pb.HistoryItem(role=pb.HistoryItem.ROLE_TOOL_RESULT)]
    code, details = await _code(store_stub.AppendTurn(pb.AppendTurnRequest(session_id="s1", items=bad)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "item 4" in details
    assert len(await _items(store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="s1")))) == 4

    for call in (
        store_stub.GetSession(pb.GetSessionRequest(session_id="zz")),
        store_stub.TouchSession(pb.TouchSessionRequest(session_id="zz")),
        store_stub.UpdateSession(pb.UpdateSessionRequest(session_id="zz", lease_id="x")),
        store_stub.AppendTurn(pb.AppendTurnRequest(session_id="zz", items=_turn_items("x"))),
        _items(store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="zz"))),
        store_stub.ResolveRestoreAgent(pb.ResolveRestoreAgentRequest(session_id="zz")),
    ):
        code, details = await _code(call)
        assert code == grpc.StatusCode.NOT_FOUND, details


async def test_history_streams_in_pages(store_stub: Stub) -> None:
    """StreamHistory and GetHistory batch items (ARCHITECTURE "gRPC streams must batch"):
    pages of at most 500 items / ~1 MiB, oldest first, never empty, nothing lost."""
    await store_stub.CreateSession(pb.CreateSessionRequest(session_id="big", agent_alias="alpha",
                                                     workspace_dir="/w"))
    R = pb.HistoryItem
    many = [R(role=R.ROLE_USER if i % 2 == 0 else R.ROLE_ASSISTANT, text=f"m{i}")
            for i in range(1203)]
    await store_stub.AppendTurn(pb.AppendTurnRequest(session_id="big", items=many))
    for stream in (store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="big")),
                   store_stub.GetHistory(pb.GetHistoryRequest(session_id="big", operator=True))):
        pages = await _pages(stream)
        assert [len(p.items) for p in pages] == [500, 500, 203]
        assert [i.seq for p in pages for i in p.items] == list(range(1, 1204))
        assert [i.text for p in pages for i in p.items] == [f"m{i}" for i in range(1203)]
    tail = await _pages(store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="big",
                                                                   after_seq=1200)))
    assert [[i.seq for i in p.items] for p in tail] == [[1201, 1202, 1203]]

    # Large items: the byte bound cuts pages long before 500 items.
    await store_stub.CreateSession(pb.CreateSessionRequest(session_id="fat", agent_alias="alpha",
                                                     workspace_dir="/w"))
    blob = "x" * 300_000
    await store_stub.AppendTurn(pb.AppendTurnRequest(
        session_id="fat", items=[R(role=R.ROLE_USER, text=blob + str(i)) for i in range(8)]))
    pages = await _pages(store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="fat")))
    assert [len(p.items) for p in pages] == [3, 3, 2]
    assert all(p.ByteSize() <= 1 << 20 for p in pages)
    assert [i.text for p in pages for i in p.items] == [blob + str(i) for i in range(8)]

    # A session without items streams no page at all.
    await store_stub.CreateSession(pb.CreateSessionRequest(session_id="nil", agent_alias="alpha",
                                                     workspace_dir="/w"))
    assert await _pages(store_stub.StreamHistory(pb.StreamHistoryRequest(session_id="nil"))) == []


async def test_spec8_restore_agent_over_grpc(store_stub: Stub) -> None:
    """SPEC §8: the stored alias is reused when dispatchable, else the default agent."""
    await store_stub.CreateSession(pb.CreateSessionRequest(session_id="r1", agent_alias="beta",
                                                     workspace_dir="/w"))
    await store_stub.CreateSession(pb.CreateSessionRequest(session_id="r2", agent_alias="off",
                                                     workspace_dir="/w"))
    a = await store_stub.ResolveRestoreAgent(pb.ResolveRestoreAgentRequest(session_id="r1"))
    assert a.alias == "beta"
    b = await store_stub.ResolveRestoreAgent(pb.ResolveRestoreAgentRequest(session_id="r2"))
    assert b.alias == "alpha"


async def test_spec8_survives_restart(serve: ServerFactory, short_dir: Path,
                                      store_section: StoreSection) -> None:
    """SPEC §8: rows and history written by one server are read by the next one."""
    cfg = make_cfg(short_dir, store=store_section)
    running, stub = await serve(cfg)
    await stub.CreateSession(pb.CreateSessionRequest(session_id="p", agent_alias="alpha",
                                                     workspace_dir="/w"))
    await stub.AppendTurn(pb.AppendTurnRequest(session_id="p", items=_turn_items("keep me")))
    await running.stop()
    _, stub2 = await serve(cfg)
    items = await _items(stub2.StreamHistory(pb.StreamHistoryRequest(session_id="p")))
    assert items[0].text == "keep me" and len(items) == 4


# ------------------------------------------------------------------ list / visibility


async def test_spec8_list_sessions_pagination_and_cwd(serve: ServerFactory, short_dir: Path,
                                                      store_section: StoreSection) -> None:
    """session/list: newest updated first, cursor pagination, exact cwd filter."""
    cfg = make_cfg(short_dir, store=store_section)
    # Seed with distinct timestamps through the store, then serve the same database.
    clock_now = [1000]
    store = await open_store(store_target(cfg), clock=lambda: clock_now[0])
    for i in range(7):
        clock_now[0] = 1000 + i
        await store.create_session(NewSession(f"s{i}", "alpha", "/a" if i % 2 == 0 else "/b"))
    clock_now[0] = 2000
    await store.append_turn("s1", [HistoryEntry(role="user", text="bump")])
    await store.close()
    _, stub = await serve(cfg)

    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        page = await stub.ListSessions(pb.ListSessionsRequest(limit=3, cursor=cursor,
                                                                operator=True))
        seen += [r.session_id for r in page.sessions]
        pages += 1
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert seen == ["s1", "s6", "s5", "s4", "s3", "s2", "s0"]
    assert pages == 3
    only_a = await stub.ListSessions(pb.ListSessionsRequest(cwd="/a", operator=True))
    assert [r.session_id for r in only_a.sessions] == ["s6", "s4", "s2", "s0"]
    assert only_a.next_cursor == ""
    code, _ = await _code(stub.ListSessions(pb.ListSessionsRequest(cursor="garbage!",
                                                                   operator=True)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await _code(stub.ListSessions(pb.ListSessionsRequest(visibility="world",
                                                                   operator=True)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def _seed_matrix_rows(stub: Stub) -> dict[str, str]:
    """The six row kinds of the visibility matrix, created over gRPC; name → session id."""
    req_key = "agent:alpha:acp:req"
    specs = {
        "own": ("req", "alpha", ""),
        "same-agent": ("s2", "alpha", ""),
        "owned-same-agent": ("kid", "alpha", req_key),
        "owned-cross-agent-acp-child": ("bkid", "beta", req_key),
        "unowned-cross-agent": ("other", "beta", ""),
        "main-session": ("main", "main", ""),
    }
    for sid, alias, spawned in specs.values():
        await stub.CreateSession(pb.CreateSessionRequest(
            session_id=sid, agent_alias=alias, workspace_dir="/w", spawned_by=spawned,
            parent_session_key=spawned))
        await stub.AppendTurn(pb.AppendTurnRequest(session_id=sid, items=_turn_items("hi")))
    return {name: spec[0] for name, spec in specs.items()}


@pytest.mark.parametrize(
    ("a2a_name", "a2a"),
    [
        ("a2a-off", A2aSection(enabled=False)),
        ("a2a-on", A2aSection(enabled=True)),
        ("a2a-allow-list", A2aSection(enabled=True, allow=("alpha", "ma*"))),
    ],
)
async def test_spec14_matrix_over_grpc(serve: ServerFactory, short_dir: Path, a2a_name: str,
                                       a2a: A2aSection, store_section: StoreSection) -> None:
    """SPEC §14 through the RPCs: list (ListSessions), history (GetHistory), send
    (CheckAccess SEND), status (SessionStatus) agree with the pure matrix."""
    _, stub = await serve(make_cfg(short_dir, a2a=a2a, store=store_section))
    ids = await _seed_matrix_rows(stub)
    req = "agent:alpha:acp:req"
    for vis in ("self", "tree", "agent", "all"):
        listed = {r.session_id for r in (await stub.ListSessions(
            pb.ListSessionsRequest(requester_session_key=req, visibility=vis))).sessions}
        for name in ROW_ORDER:
            sid = ids[name]
            allowed = EXPECTED[(vis, a2a_name)][ROW_ORDER.index(name)] == "Y"
            where = f"{vis}/{a2a_name}/{name}"
            assert (sid in listed) is allowed, where
            send = await stub.CheckAccess(pb.CheckAccessRequest(
                requester_session_key=req, session_id=sid, action=pb.ACTION_SEND, visibility=vis))
            assert send.allowed is allowed, where
            # A hidden row is refused exactly like a missing one.
            assert send.reason == ("" if allowed else f"Session not found: {sid}"), where
            hist = stub.GetHistory(pb.GetHistoryRequest(
                requester_session_key=req, session_id=sid, visibility=vis))
            status = stub.SessionStatus(pb.SessionStatusRequest(
                requester_session_key=req, session_id=sid, visibility=vis))
            if allowed:
                assert len(await _items(hist)) == 4, where
                st = await status
                assert st.session.session_id == sid and st.message_count == 4, where
            else:
                # Exactly the answer of a missing row: nothing to probe for.
                hidden = (grpc.StatusCode.NOT_FOUND, f"Session not found: {sid}")
                assert await _code(_items(hist)) == hidden, where
                assert await _code(status) == hidden, where


async def test_spec14_operator_and_configured_visibility(store_stub: Stub) -> None:
    """The explicit operator sees all; a session requester gets [sessions] visibility (tree)."""
    ids = await _seed_matrix_rows(store_stub)
    everything = await store_stub.ListSessions(pb.ListSessionsRequest(operator=True))
    assert {r.session_id for r in everything.sessions} == set(ids.values())
    tree = await store_stub.ListSessions(pb.ListSessionsRequest(requester_session_key="agent:alpha:acp:req"))
    assert {r.session_id for r in tree.sessions} == {"req", "kid", "bkid"}
    st = await store_stub.SessionStatus(pb.SessionStatusRequest(session_id="other", operator=True))
    assert st.message_count == 4
    for action in (pb.ACTION_LIST, pb.ACTION_HISTORY, pb.ACTION_SEND, pb.ACTION_STATUS):
        ok = await store_stub.CheckAccess(pb.CheckAccessRequest(session_id="other", action=action,
                                                                operator=True))
        assert ok.allowed
    code, _ = await _code(store_stub.CheckAccess(pb.CheckAccessRequest(session_id="other",
                                                                       operator=True)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await _code(store_stub.CheckAccess(pb.CheckAccessRequest(
        session_id="nope", action=pb.ACTION_SEND, operator=True)))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await _code(_items(store_stub.GetHistory(pb.GetHistoryRequest(session_id="nope",
                                                                            operator=True))))
    assert code == grpc.StatusCode.NOT_FOUND


# ------------------------------------------------------------------ the entry point


async def test_run_session_service_process_sigterm(short_dir: Path) -> None:
    """`acpgate session-service` serves on <data dir>/run/session.sock and exits 0 on SIGTERM."""
    cfg_dir = short_dir / "c"
    cfg_dir.mkdir()
    (cfg_dir / "config.toml").write_text('[agents.alpha]\nprovider = "demo"\nmodel = "demo"\n')
    env = {**os.environ, "ACPGATE_CONFIG_DIR": str(cfg_dir)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "acpgate", "session-service", "--config-dir", str(cfg_dir),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    sock = cfg_dir / "data" / "run" / "session.sock"
    try:
        # The install's key (made by whichever of the two comes first) opens the door.
        async with dial(load_config(cfg_dir, environ={}), f"unix:{sock}") as ch:
            await wait_healthy(ch, SERVICE_NAME, within=30)
            stub = session_pb2_grpc.SessionServiceStub(ch)
            status = await stub.GetStoreStatus(pb.GetStoreStatusRequest())
            assert status.persistent
            assert status.db_path == str(cfg_dir / "data" / "sessions" / "acp-sessions.db")
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0
        assert out == b""  # stdout stays clean; logs go to stderr
        assert not sock.exists()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_calls_without_the_credential_are_refused(short_dir: Path) -> None:
    """Every call must carry the service credential; health stays open."""
    from services.session.api.server import start_session_server

    cfg = make_cfg(short_dir)
    sec = GrpcSecurity(token="s3cret")
    running = await start_session_server(cfg, f"unix:{short_dir}/tok.sock", security=sec)
    try:
        for wrong in ("", "another-install's-key"):
            async with open_service_channel(GrpcSecurity(token=wrong), running.address) as bare:
                await wait_healthy(bare, SERVICE_NAME, within=5)
                code, _ = await _code(session_pb2_grpc.SessionServiceStub(bare).GetStoreStatus(
                    pb.GetStoreStatusRequest()))
                assert code == grpc.StatusCode.UNAUTHENTICATED
        async with open_service_channel(sec, running.address) as ch:
            status = await session_pb2_grpc.SessionServiceStub(ch).GetStoreStatus(
                pb.GetStoreStatusRequest())
            assert status.persistent
    finally:
        await running.stop(grace=0.2)
