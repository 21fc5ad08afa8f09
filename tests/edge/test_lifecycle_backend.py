"""The edge's client of the lifecycle service: services/edge/backends/lifecycle.py.

Against a real lifecycle service on a real unix socket, with real adapter processes
(an echo script): answers come as the backend's records, every failure as a
ServiceError of the kind the caller matches on, and the ``Attach`` stream as domain
events — attached (with the ensure and the fd grant), stdout lines, the exit — with
the pipes taken over the fd socket where the grant is offered. Last, an adapter link
driven by a fake backend: the edge's code above the backend needs no gRPC at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acpgate import __version__
from acpgate.embedded import start_embedded
from services.common.config import load_config
from services.common.fd_channel import fd_socket_path
from services.common.grpc_auth import open_service_channel
from services.common.grpc_server import RunningServer
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INTERNAL_ERROR
from services.edge.adapter.exits import AdapterExit
from services.edge.adapter.link import AdapterLink, LineFeed
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.fds import FdDialer
from services.edge.backends.lifecycle import (
    AdapterExited,
    Attached,
    AttachEvent,
    AttachSpec,
    Control,
    Ensured,
    EnsureSpec,
    Lease,
    LeaseState,
    LifecycleBackend,
    StdoutLines,
)
from services.edge.caller import LOCAL_OPERATOR
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.agent_calls import authenticate
from services.edge.dialect.handlers.initialize import initialize
from services.edge.transport.connection import open_runtime
from services.lifecycle.api.server import start_lifecycle_server
from tests.e2e.harness import write_config
from tests.launches import (
    TEST_SECURITY,
    TEST_SERVICE_KEY,
    config_environ,
    install_test_key,
    sealed,
)
from tests.lifecycle.conftest import ECHO, ProcessGuard

KEY = "agent:echo:acp:s1"


@dataclass
class Served:
    """A lifecycle service, the backend dialled to it, and a sealed echo adapter."""

    server: RunningServer
    backend: LifecycleBackend
    echo: bytes


@pytest.fixture
def guard() -> Iterator[ProcessGuard]:
    """The adapters a test started, killed at teardown if still there."""
    g = ProcessGuard()
    yield g
    g.cleanup()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """A lifecycle service on a unix socket (its data path the default: pipes offered)."""
    config_dir = tmp_path / "gw"
    config_dir.mkdir()
    (config_dir / "config.toml").write_text("[lifecycle]\nterm_grace_ms = 300\n",
                                            encoding="utf-8")
    cfg = load_config(config_dir, environ={})
    install_test_key(cfg)
    script = tmp_path / "echo.py"
    script.write_text(ECHO, encoding="utf-8")
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/lifecycle.sock")
    channel = server.dial()
    echo = sealed(None, sys.executable, [str(script)]).SerializeToString()
    try:
        yield Served(server, LifecycleBackend(channel), echo)
    finally:
        await channel.close(None)
        await server.stop()


def ensure_echo(s: Served, key: str = KEY, **fields: Any) -> EnsureSpec:
    return EnsureSpec(session_key=key, launch=s.echo, cwd=str(Path.cwd()), **fields)


async def outgoing(queue: asyncio.Queue[list[str] | Control | None],
                   ) -> AsyncIterator[list[str] | Control]:
    while (item := await queue.get()) is not None:
        yield item


async def test_answers_are_records(served: Served, guard: ProcessGuard) -> None:
    lc = served.backend
    instance = await lc.get_instance()
    assert instance.gateway_instance_id and instance.state_dir
    ensured = await lc.ensure(ensure_echo(served))
    assert isinstance(ensured, Ensured) and ensured.spawned and not ensured.warm
    lease = ensured.lease
    assert (lease.session_key, lease.state) == (KEY, LeaseState.OPEN) and lease.root_pid > 0
    guard.track(lease.root_pid)
    again = await lc.ensure(ensure_echo(served))  # idempotent: the live lease, not a spawn
    assert again.lease.lease_id == lease.lease_id and not again.spawned
    assert [x.lease_id for x in await lc.list_leases(LeaseState.OPEN, KEY)] == [lease.lease_id]
    tree = await lc.verify_owned_tree(lease.lease_id, with_usage=True, wait_secs=5.0)
    assert tree.verified and min(tree.processes, key=lambda p: p.depth).pid == lease.root_pid
    closed = await lc.close_session(lease_id=lease.lease_id, reason="test")
    assert closed.lease.state is LeaseState.CLOSED and not closed.unverified_reason
    assert await lc.list_leases(LeaseState.OPEN, KEY) == []


async def test_failures_are_service_errors_of_their_kind(served: Served, tmp_path: Path) -> None:
    lc = served.backend
    with pytest.raises(ServiceError) as unknown:
        await lc.close_session(lease_id="no-such-lease", reason="test")
    assert unknown.value.kind is Failure.NOT_FOUND and unknown.value.code == "NOT_FOUND"
    with pytest.raises(ServiceError) as unsealed:  # a launch the session service never sealed
        await lc.ensure(EnsureSpec(session_key=KEY, launch=b"", cwd=str(tmp_path)))
    assert unsealed.value.kind is Failure.REFUSED
    with pytest.raises(ServiceError) as cold:  # warm only, and no pool: never a spawn
        await lc.ensure(ensure_echo(served, warm_pool="agent:none", warm_only=True))
    assert cold.value.kind is Failure.PRECONDITION
    with pytest.raises(ServiceError) as garbage:  # not even a sealed spec: said, not crashed
        await lc.keep_warm("agent:x", b"\xff\xff", str(tmp_path), [], 1)
    assert garbage.value.kind is Failure.INVALID
    nobody = LifecycleBackend(open_service_channel(TEST_SECURITY, f"unix:{tmp_path}/none.sock"))
    with pytest.raises(ServiceError) as down:
        await nobody.get_instance()
    assert down.value.kind is Failure.UNAVAILABLE


async def test_the_attach_stream_as_domain_events(served: Served, guard: ProcessGuard) -> None:
    queue: asyncio.Queue[list[str] | Control | None] = asyncio.Queue()
    queue.put_nowait(["one", "two"])  # written before the attach: they go first
    stream = served.backend.attach(AttachSpec(ensure=ensure_echo(served)), outgoing(queue))
    first = await asyncio.wait_for(stream.read(), 30)
    assert isinstance(first, Attached) and first.ensured is not None and first.grant is None
    assert first.ensured.spawned and first.lease.session_key == KEY
    guard.track(first.lease.root_pid)
    lines: list[str] = []
    while len(lines) < 2:
        event = await asyncio.wait_for(stream.read(), 10)
        assert isinstance(event, StdoutLines)
        lines += event.lines
    assert lines == ["one", "two"]
    queue.put_nowait(Control.CLOSE_STDIN)
    exited: AttachEvent | None = await asyncio.wait_for(stream.read(), 10)
    assert isinstance(exited, AdapterExited) and exited.exit_code == 0
    assert "stdin closed, bye" in exited.stderr_tail
    assert await asyncio.wait_for(stream.read(), 10) is None
    queue.put_nowait(None)
    with pytest.raises(ServiceError) as refused:  # an attach's refusal: at its first read
        await served.backend.attach(AttachSpec(lease_id="no-such-lease"), outgoing(queue)).read()
    assert refused.value.kind is Failure.NOT_FOUND


async def test_an_adapter_that_cannot_be_spawned_is_the_clients_error(tmp_path: Path) -> None:
    # The connection's default agent runs a command that does not exist: the lifecycle
    # service refuses its spawn (a ServiceError through the backend), and the client learns
    # that from acpgate's own answers, not from a failed request.
    broken = '[agents.broken]\nkind = "acp"\ncommand = "/nonexistent/acpgate-adapter"\n'
    cfg_dir = write_config(tmp_path / "cfg", default_agent="broken", extra=broken)
    rt = await open_runtime(load_config(cfg_dir, environ=config_environ()),
                            version=__version__, start_services=start_embedded)

    async def ignore(line: str) -> None:
        pass

    conn = DialectConnection(rt, ignore, methods={}, caller=LOCAL_OPERATOR)
    try:
        answer = await initialize(conn, {"protocolVersion": 1, "clientCapabilities": {}})
        assert answer["protocolVersion"] == 1  # acpgate's own answer, the agent unstarted
        with pytest.raises(JsonRpcError) as refused:
            await authenticate(conn, {"methodId": "any"})
        assert refused.value.code == INTERNAL_ERROR
        assert refused.value.message.startswith("Failed to start agent `broken`: ")
    finally:
        await conn.close()
        await rt.close()


async def test_the_pipes_are_taken_with_the_grant(served: Served, guard: ProcessGuard) -> None:
    lc = served.backend
    path = fd_socket_path(served.server.address)
    assert path is not None
    lc.fds = FdDialer(path, TEST_SERVICE_KEY)
    queue: asyncio.Queue[list[str] | Control | None] = asyncio.Queue()
    stream = lc.attach(AttachSpec(ensure=ensure_echo(served), fd_pass=True), outgoing(queue))
    first = await asyncio.wait_for(stream.read(), 30)
    assert isinstance(first, Attached) and first.grant is not None
    guard.track(first.lease.root_pid)
    taken = await lc.take_pipes(first.lease.lease_id, first.grant)
    try:
        os.set_blocking(taken.stdout, True)  # read in a thread here, not on the loop
        os.write(taken.stdin, b"through the pipe\n")
        echoed = await asyncio.wait_for(asyncio.to_thread(os.read, taken.stdout, 1024), 10)
        assert echoed == b"through the pipe\n"
    finally:
        taken.close()
    queue.put_nowait(Control.CLOSE_STDIN)  # the service's copy of stdin: now the adapter's EOF
    exited = await asyncio.wait_for(stream.read(), 10)
    assert isinstance(exited, AdapterExited) and exited.exit_code == 0
    queue.put_nowait(None)


class FakeAdapterStream:
    """An ``Attach`` stream with a JSON-RPC adapter behind it that answers every request
    with its params, and on a ``quit`` notification says goodbye (a notification) and
    exits with code 3."""

    def __init__(self, sent: AsyncIterator[list[str] | Control]) -> None:
        lease = Lease(lease_id="lease-1", session_key=KEY, state=LeaseState.OPEN)
        self.events: asyncio.Queue[AttachEvent | None] = asyncio.Queue()
        self.events.put_nowait(Attached(lease, Ensured(lease, spawned=True, warm=False)))
        self.task = asyncio.ensure_future(self._adapter(sent))

    async def _adapter(self, sent: AsyncIterator[list[str] | Control]) -> None:
        async for item in sent:
            if not isinstance(item, list):
                continue
            for msg in map(json.loads, item):
                if "id" in msg:
                    answer = {"jsonrpc": "2.0", "id": msg["id"], "result": msg["params"]}
                    self.events.put_nowait(StdoutLines([json.dumps(answer)]))
                elif msg["method"] == "quit":
                    bye = {"jsonrpc": "2.0", "method": "bye", "params": {}}
                    self.events.put_nowait(StdoutLines([json.dumps(bye)]))
                    self.events.put_nowait(AdapterExited(exit_code=3, signal=0,
                                                         stderr_tail="bye"))
                    self.events.put_nowait(None)
                    return

    async def read(self) -> AttachEvent | None:
        return await self.events.get()

    def cancel(self) -> None:
        self.task.cancel()
        self.events.put_nowait(None)


class FakeLifecycle:
    """A lifecycle backend without a service: every attach reaches a fake adapter."""

    fds = None

    def __init__(self) -> None:
        self.opened: list[AttachSpec] = []

    def attach(self, spec: AttachSpec, sent: AsyncIterator[list[str] | Control],
               ) -> FakeAdapterStream:
        self.opened.append(spec)
        return FakeAdapterStream(sent)


class Peer:
    """The session a link serves: what reached it."""

    def __init__(self) -> None:
        self.notified: list[str] = []
        self.exits: list[AdapterExit] = []

    async def on_adapter_notifications(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        self.notified += [method for method, _ in batch]

    async def on_adapter_request(self, method: str, params: dict[str, Any]) -> Any:
        raise JsonRpcError(-32601, "Method not found")

    def on_adapter_exit(self, exit_info: AdapterExit) -> None:
        self.exits.append(exit_info)

    async def on_adapter_lines(self, lines: Any, feed: LineFeed) -> None:
        await feed(list(lines))


async def test_an_adapter_link_runs_on_a_fake_backend() -> None:
    fake = FakeLifecycle()
    spec = AttachSpec(ensure=EnsureSpec(session_key=KEY, launch=b"opaque"), keep_on_loss=True)
    link = AdapterLink(fake, spec, foreign=False)  # type: ignore[arg-type]
    peer = Peer()
    link.bind(peer)
    link.begin()
    await asyncio.wait_for(link.attached(), 10)
    assert fake.opened == [spec]  # no pipes to take here: the spec as given, no fd_pass
    assert link.lease_id == "lease-1" and link.ensured is not None and link.ensured.spawned
    assert await asyncio.wait_for(link.request("echo/this", {"n": 1}), 10) == {"n": 1}
    link.notify("quit", {})
    gone = AdapterExit(exit_code=3, stderr_tail="bye")
    assert await asyncio.wait_for(link.exited(10), 15) == gone
    assert peer.notified == ["bye"] and peer.exits == [gone]  # its last lines, then its exit
