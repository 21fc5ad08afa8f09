"""The lifecycle service's fd socket, from the attacker's side.

The fd socket hands an attached edge an adapter's stdin and stdout — a new door to
every adapter's conversation. Against a real lifecycle service and its socket:

- a caller without the service credential gets nothing: a made-up grant, or a real
  one (taken off the stream) proven with another key, is refused without a
  descriptor — and the grant it named is spent, so the stream it belonged to falls
  back to relaying, still working;
- a grant opens only its own lease's pipes, for its own attach: naming another
  lease or another generation is refused, even with the credential;
- a used grant is never good again;
- a process of another uid is dropped before a byte is read: the socket file is
  the owner's alone, and even made world-writable the service checks the peer's uid
  (``SO_PEERCRED``) — the grant it knew stays unspent for its rightful caller;
- an agent never learns the socket's address: through a real ``acpgate serve`` whose
  edge holds the agent's pipes, the agent process finds no trace of the socket in its
  environment, its argv or its descriptors (only its pipes), nor does its wrapper.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from bench.transports import ws_peer
from services.common.config import load_config
from services.common.fd_channel import channel_key, grant_proof
from services.common.grpc_server import RunningServer
from services.lifecycle.api.server import start_lifecycle_server
from tests.gateway.wsfixtures import free_port, mint, start_serve, wait_healthy, write_config
from tests.launches import DATA_PATH_ENV, TEST_SERVICE_KEY, ensure_request, install_test_key
from tests.lifecycle.conftest import ECHO, Attacher, ProcessGuard
from tests.lifecycle.fd_client import Answer, exchange, read_until, redeem, request_line

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

Served = tuple[RunningServer, Any, str]


@pytest.fixture
async def fd_served(tmp_path: Path) -> AsyncIterator[Served]:
    """A lifecycle service on ``data_path = "auto"`` (whatever the run's), a stub, and the
    path of its fd socket — in a dir others may enter, so that only the service's own
    checks stand between another uid and it."""
    root = tmp_path / "gw"
    root.mkdir()
    (root / "config.toml").write_text('[lifecycle]\nterm_grace_ms = 300\n\n'
                                      '[services]\ndata_path = "auto"\n')
    cfg = load_config(root, environ={})
    install_test_key(cfg)
    sockets = open_dir()
    server = await start_lifecycle_server(cfg, f"unix:{sockets}/lifecycle.sock")
    channel = server.dial()
    try:
        yield server, lifecycle_pb2_grpc.LifecycleServiceStub(channel), f"{sockets}/lifecycle.fds.sock"
    finally:
        await channel.close(None)
        await server.stop()
        shutil.rmtree(sockets)


def open_dir() -> str:
    """A short dir under /tmp that every uid may enter (the socket's own mode still holds)."""
    path = tempfile.mkdtemp(prefix="fdsec-", dir="/tmp")
    os.chmod(path, 0o755)
    return path


@pytest.fixture
def echo(tmp_path: Path) -> Path:
    """An adapter that echoes its stdin."""
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    return path


@pytest.fixture
def guard() -> Iterator[ProcessGuard]:
    """The processes a test caused, killed at its end if still there."""
    procs = ProcessGuard()
    yield procs
    procs.cleanup()


async def attached(stub: Any, echo: Path, guard: ProcessGuard, key: str,
                   cwd: Path) -> tuple[Attacher, pb.AttachResponse]:
    """A stream that spawned an echo adapter for ``key`` and was granted its pipes."""
    att = Attacher(stub, ensure=ensure_request(session_key=key, command=sys.executable,
                                               args=[str(echo)], cwd=str(cwd)),
                   fd_pass=True)
    first = await att.read()
    assert first.HasField("fd_grant")
    guard.track(first.ensured.lease.root_pid)
    return att, first


def refused(answer: Answer) -> bool:
    return answer.header.get("ok") is False and answer.fds == []


async def still_relays(att: Attacher) -> None:
    """The stream whose grant was spent relays its adapter over itself."""
    att.queue.put_nowait(pb.AttachRequest(use_stream=True))
    att.send("still mine")
    assert await att.read_lines(1) == ["still mine"]


async def test_a_caller_without_the_credential_gets_no_pipes(
        tmp_path: Path, echo: Path, guard: ProcessGuard, fd_served: Served) -> None:
    _, stub, path = fd_served
    att, first = await attached(stub, echo, guard, "agent:v:acp:1", tmp_path)
    made_up = await asyncio.to_thread(exchange, path, request_line(
        first.ensured.lease.lease_id, first.fd_grant.generation, "f" * 32, "0" * 64))
    assert refused(made_up)
    stolen = await redeem(path, first, credential="an attacker's guess at the key" * 2)
    assert refused(stolen)
    rightful = await redeem(path, first)  # the grant was spent by the attempt
    assert refused(rightful)
    await still_relays(att)


async def test_a_grant_opens_only_its_own_lease_and_attach(
        tmp_path: Path, echo: Path, guard: ProcessGuard, fd_served: Served) -> None:
    _, stub, path = fd_served
    victim = await stub.EnsureSession(ensure_request(
        session_key="agent:v:acp:2", command=sys.executable, args=[str(echo)],
        cwd=str(tmp_path)))
    guard.track(victim.lease.root_pid)
    att, first = await attached(stub, echo, guard, "agent:a:acp:2", tmp_path)
    other_lease = await redeem(path, first, lease_id=victim.lease.lease_id)  # with the key
    assert refused(other_lease)
    await still_relays(att)
    att2, second = await attached(stub, echo, guard, "agent:a:acp:3", tmp_path)
    later_attach = await redeem(path, second, generation=second.fd_grant.generation + 1)
    assert refused(later_attach)
    await still_relays(att2)


async def test_a_used_grant_is_never_good_again(
        tmp_path: Path, echo: Path, guard: ProcessGuard, fd_served: Served) -> None:
    _, stub, path = fd_served
    _, first = await attached(stub, echo, guard, "agent:v:acp:4", tmp_path)
    taken = await redeem(path, first)
    assert taken.ok
    try:
        replay = await redeem(path, first)
        assert refused(replay)
        os.write(taken.fds[0], b"only mine\n")  # the pipes are the first caller's alone
        assert await asyncio.to_thread(read_until, taken.fds[1], b"\n") == b"only mine\n"
    finally:
        taken.close()


OTHER_UID = 65534  # nobody

#: Run as another uid: redeem a grant (argv: uid, socket path, request line); print what came.
#: It drops root itself (a fork with another uid from this process would run gRPC's fork
#: handlers, which do not survive it).
FOREIGN_CLIENT = textwrap.dedent("""
    import json, os, socket, sys
    uid = int(sys.argv.pop(1))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    assert os.getuid() == os.geteuid() == uid
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    try:
        sock.connect(sys.argv[1])
    except OSError as exc:
        print(json.dumps({"connect": type(exc).__name__}))
        sys.exit(0)
    try:
        sock.sendall(sys.argv[2].encode())
        data, fds, _, _ = socket.recv_fds(sock, 4096, 4)
    except OSError as exc:  # dropped before (or while) it spoke
        data, fds = ("(" + type(exc).__name__ + ")").encode(), []
    print(json.dumps({"answer": data.decode(errors="replace"), "fds": len(fds)}))
""")


#: An interpreter another uid may run (acpgate's may live under a private home).
FOREIGN_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")


async def as_other_uid(path: str, line: bytes) -> dict[str, Any]:
    """Run :data:`FOREIGN_CLIENT` as :data:`OTHER_UID` (clean environment, cwd /)."""
    assert FOREIGN_PYTHON is not None
    proc = await asyncio.create_subprocess_exec(
        FOREIGN_PYTHON, "-I", "-c", FOREIGN_CLIENT, str(OTHER_UID), path, line.decode(),
        cwd="/", env={"PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, (proc.returncode, err)
    return dict(json.loads(out))


@pytest.mark.skipif(os.getuid() != 0 or FOREIGN_PYTHON is None,
                    reason="needs root, and a python3 outside any private home, to run a "
                           "client as another uid")
async def test_another_uid_is_dropped_unread(
        tmp_path: Path, echo: Path, guard: ProcessGuard, fd_served: Served) -> None:
    _, stub, path = fd_served
    att, first = await attached(stub, echo, guard, "agent:v:acp:5", tmp_path)
    lease_id, gen, grant = (first.ensured.lease.lease_id, first.fd_grant.generation,
                            first.fd_grant.grant_id)
    # Even a foreign process that somehow holds the credential and the grant.
    line = request_line(lease_id, gen, grant, grant_proof(channel_key(TEST_SERVICE_KEY),
                                                          lease_id, gen, grant))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert await as_other_uid(path, line) == {"connect": "PermissionError"}
    os.chmod(path, 0o666)  # the file mode aside: the service's own check
    got = await as_other_uid(path, line)
    assert got["fds"] == 0 and '"ok"' not in got["answer"], got
    rightful = await redeem(path, first)  # nothing read, nothing spent
    assert rightful.ok
    rightful.close()
    att.call.cancel()


#: An ACP adapter that first writes down everything it can see of its own process and
#: its wrapper's, then answers initialize, session/new and session/prompt.
PEEKING_AGENT = textwrap.dedent(r"""
    import json, os, sys

    def fds(pid):
        out = {}
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                out[name] = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                pass
        return out

    def unix_paths():
        with open("/proc/net/unix") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
        return {row[6]: row[7] for row in rows if len(row) > 7}  # inode -> bound path

    me, wrapper = os.getpid(), os.getppid()
    seen = {
        "env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(),
        "fds": fds(me), "wrapper_fds": fds(wrapper),
        "wrapper_cmdline": open(f"/proc/{wrapper}/cmdline").read().split("\0"),
        "wrapper_environ": open(f"/proc/{wrapper}/environ").read().split("\0"),
        "unix": unix_paths(),
    }
    with open(sys.argv[1], "w") as fh:
        json.dump(seen, fh)
    for raw in sys.stdin:
        msg = json.loads(raw)
        if "id" not in msg or "method" not in msg:
            continue
        result = {"initialize": {"protocolVersion": 1, "agentCapabilities": {},
                                 "authMethods": []},
                  "session/new": {"sessionId": "peek-1"},
                  "session/prompt": {"stopReason": "end_turn"}}.get(msg["method"])
        if msg["method"] == "session/prompt":
            print(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": "peek-1", "update": {"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "seen"}}}}), flush=True)
        reply = {"jsonrpc": "2.0", "id": msg["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": "no"}
        else:
            reply["result"] = result
        print(json.dumps(reply), flush=True)
""")


async def test_an_agent_never_learns_the_fd_socket(tmp_path: Path) -> None:
    agent = tmp_path / "peek.py"
    agent.write_text(PEEKING_AGENT)
    seen_file = tmp_path / "seen.json"
    work = tmp_path / "work"
    work.mkdir()
    port = free_port()
    cfg_dir = tmp_path / "cfg"
    cfg = write_config(cfg_dir, port=port, extra=textwrap.dedent(f"""
        [agents.peek]
        kind = "acp"
        command = {json.dumps(sys.executable)}
        args = {json.dumps([str(agent), str(seen_file)])}
    """))
    _, secret = mint(cfg)
    # The pipes' path, whatever the test run's (ACPGATE_services__data_path).
    proc = await start_serve(cfg_dir, cfg_dir / "serve.log", {DATA_PATH_ENV: "auto"})
    try:
        await wait_healthy(port, proc)
        ep = await ws_peer(f"ws://127.0.0.1:{port}/acp", secret)
        try:
            await ep.peer.request("initialize", {"protocolVersion": 1})
            sid = (await ep.peer.request("session/new", {
                "cwd": str(work), "mcpServers": [], "agentAlias": "peek"}))["sessionId"]
            ep.peer.sink(sid).reset(1)
            await ep.peer.prompt(sid, "hello")
            await asyncio.wait_for(ep.peer.sink(sid).done.wait(), 30)
        finally:
            await ep.close()
        log = (cfg_dir / "serve.log").read_text()
        assert "fd_pipes_handed_over" in log  # the edge held this agent's pipes
        seen = json.loads(await asyncio.to_thread(seen_file.read_text))  # before session/new
    finally:
        proc.terminate()
        await proc.wait()
    fd_socket = str(cfg.data_dir / "run" / "lifecycle.fds.sock")
    text = json.dumps({k: v for k, v in seen.items() if k != "unix"})
    assert "fds.sock" not in text and str(cfg.data_dir / "run") not in text, text
    for where in ("fds", "wrapper_fds"):
        sockets = [target for target in seen[where].values() if target.startswith("socket:")]
        inodes = {target[len("socket:["):-1] for target in sockets}
        assert not any(fd_socket in seen["unix"].get(inode, "") for inode in inodes), where
    assert all(seen["fds"][n].startswith("pipe:") for n in ("0", "1")), seen["fds"]
    assert not any(t.startswith("socket:") for t in seen["fds"].values()), seen["fds"]
