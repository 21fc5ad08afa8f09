"""kill -9 of a wrapper leaves nothing behind (SPEC §13).

The attack, end to end through ``acpgate acp``: in full autonomy a local fake
model server makes the built-in agent's shell tool run
``setsid sleep 4001 >/dev/null 2>&1 </dev/null & sleep 0.5``: a detached
grandchild in its own session, adopted by the wrapper (a subreaper). Then the
wrapper is SIGKILLed. Neither the agent nor the sleeper may survive: the agent
learns of its wrapper's death (PDEATHSIG), the lifecycle service notices the
wrapper's exit and reaps what still carries the lease id in its environment.

Every process is found through what the system recorded (the lease store,
``/proc/<pid>/environ``), never by guessing a PID.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.grpc_channel import wait_healthy
from services.lifecycle.adapters.spawn import install_wrapper
from services.lifecycle.api.server import start_lifecycle_server
from tests.agent.fake_http import FakeProviderServer, Reply, sse
from tests.e2e.harness import AcpProcess, write_config
from tests.gateway.stack import RawClient
from tests.launches import ensure_request, service_channel
from tests.lifecycle.conftest import ProcessGuard, make_config, read_pidfile, start_service_process
from tests.security.gateway_stack import WAIT, running_gateway
from tests.security.procs import (
    LEASES_DB,
    STUBBORN,
    alive,
    birth_of,
    ensure_detacher,
    eventually,
    guard,
    kill_exact,
    lease_of,
    marked_with,
    read_leases,
    script,
)
from tests.security.scripted_agent import agent_section

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

pytestmark = pytest.mark.slow


# argv: marker — an adapter that records the signal it gets, then exits.
NOTICER = r"""
import os, signal, sys, time
marker = sys.argv[1]
def note(signum, frame):
    with open(marker, "w") as fh:
        fh.write(str(signum))
    os._exit(0)
signal.signal(signal.SIGTERM, note)
print(os.getpid(), flush=True)
while True:
    time.sleep(1)
"""


# argv: pidfile stubborn.py — detaches A (setsid, a STUBBORN) with its child B (another),
# then exits in order when stdin closes. The wrapper terminates A (SIGKILL after the
# grace) but never sees B, which is A's child in A's own session until A dies.
LEAVER = r"""
import json, os, subprocess, sys, time
pidfile, stubborn = sys.argv[1:3]
a, b = pidfile + ".a", pidfile + ".b"
subprocess.run(["/bin/sh", "-c", 'setsid "$0" "$1" "$2" "$3" >/dev/null 2>&1 </dev/null &',
                sys.executable, stubborn, a, b], check=True)
while not (os.path.exists(a) and os.path.exists(b)):
    time.sleep(0.02)
with open(pidfile + ".tmp", "w") as fh:
    json.dump({"a": int(open(a).read()), "b": int(open(b).read())}, fh)
os.replace(pidfile + ".tmp", pidfile)
sys.stdin.read()
"""

#: A shell command that starts a sleeper in a session of its own (setsid) and exits.
DETACH = "setsid sleep 4001 >/dev/null 2>&1 </dev/null & sleep 0.5"
#: The sleeper's argv, as the kernel shows it.
SLEEPER = ["sleep", "4001"]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def shell_call(command: str) -> Reply:
    """An OpenAI-style streamed reply asking for one shell tool call."""
    args = json.dumps({"command": command})
    return sse(
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "shell", "arguments": args}}]}),
        _chunk({}, "tool_calls"),
        done=True,
    )


def text(reply: str) -> Reply:
    """An OpenAI-style streamed plain answer."""
    return sse(_chunk({"content": reply}), _chunk({}, "stop"), done=True)


def model_config(tmp_path: Path, url: str) -> Path:
    """A full-autonomy install whose default agent talks to the fake model at ``url``."""
    extra = f"""
[agents.model]
kind = "builtin"
provider = "openai"
model = "fake-model"
base_url = "{url}"
max_retries = 0
"""
    return write_config(tmp_path / "cfg", default_agent="model", autonomy="full", extra=extra)


def sleepers(lease_id: str) -> list[psutil.Process]:
    """The detached sleepers still carrying ``lease_id``."""
    out = []
    for proc in marked_with(lease_id):
        try:
            if proc.cmdline() == SLEEPER:
                out.append(proc)
        except psutil.Error:
            continue
    return out


async def test_kill_9_of_the_wrapper_leaves_no_agent_and_no_detached_grandchild(
    tmp_path: Path,
) -> None:
    async with FakeProviderServer([shell_call(DETACH), text("started it")]) as model:
        cfg = model_config(tmp_path, model.url)
        acp = AcpProcess(cfg)
        leftovers: list[psutil.Process] = []
        try:
            await asyncio.to_thread(acp.result, "initialize", {"protocolVersion": 1})
            sid = await asyncio.to_thread(acp.new_session)
            result = await asyncio.to_thread(
                acp.result, "session/prompt", {"sessionId": sid, "prompt": "detach a sleeper"})
            assert result["stopReason"] == "end_turn"
            assert len(model.requests) == 2, "the shell tool call ran and its result went back"

            lease = lease_of(cfg / LEASES_DB, f"agent:model:acp:{sid}")
            assert lease.state == "open" and lease.root_pid and lease.adapter_pid
            wrapper = psutil.Process(lease.root_pid)
            agent = psutil.Process(lease.adapter_pid)
            detached = await asyncio.to_thread(sleepers, lease.lease_id)
            assert len(detached) == 1, "the shell left one detached sleeper carrying the lease id"
            sleeper = detached[0]
            leftovers = [agent, sleeper, *await asyncio.to_thread(marked_with, lease.lease_id)]
            assert sleeper.pid not in {p.pid for p in agent.children(recursive=True)}
            assert await asyncio.to_thread(lambda: sleeper.ppid() == wrapper.pid), (
                "the wrapper (a subreaper) adopted the detached sleeper")

            assert await kill_exact(lease.root_pid, lease.root_start_time)

            # Nobody asks for anything: the wrapper's death alone ends its tree.
            await eventually(lambda: not alive(agent), 10.0, "the agent to learn its wrapper died")
            await eventually(lambda: not alive(sleeper), 10.0, "the detached sleeper to be reaped")
            key = f"agent:model:acp:{sid}"
            await eventually(lambda: lease_of(cfg / LEASES_DB, key).state in ("lost", "closed"),
                             10.0, "the lease to end")
            assert await asyncio.to_thread(marked_with, lease.lease_id) == []

            # The agent does not keep serving: the session's adapter is gone.
            _, resp = await asyncio.to_thread(
                acp.call, "session/prompt", {"sessionId": sid, "prompt": "still there?"})
            assert "error" in resp, resp
        finally:
            code = await asyncio.to_thread(acp.close)
            survivors = [p for p in leftovers if alive(p)]
            for proc in survivors:
                proc.kill()
        assert code == 0
        assert survivors == [], f"survived the wrapper's death and a clean exit: {survivors}"
        assert all(r.state in ("closed", "lost") for r in read_leases(cfg / LEASES_DB))


async def test_the_adapter_gets_sigterm_when_its_wrapper_is_killed(tmp_path: Path, guard: ProcessGuard) -> None:
    """PDEATHSIG alone: the wrapper runs without any lifecycle service, nobody else signals."""
    marker = tmp_path / "signal.txt"
    noticer = script(tmp_path, "noticer", NOTICER)
    installed = (await install_wrapper(tmp_path / "state")).path  # the file the service runs
    wrapper = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", str(installed), "--lease-id", "l-1", "--instance-id", "gw-t",
        "--parent-pid", str(os.getpid()), "--", sys.executable, str(noticer), str(marker),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    guard.track(wrapper.pid)
    assert wrapper.stdout is not None
    adapter = guard.track(int(await asyncio.wait_for(wrapper.stdout.readline(), 10.0)))
    assert adapter.ppid() == wrapper.pid
    wrapper.send_signal(signal.SIGKILL)  # our own unreaped child: its PID cannot be reused
    await eventually(lambda: not alive(adapter), 5.0, "the adapter to get its parent-death signal")
    assert marker.read_text() == str(int(signal.SIGTERM))
    await wrapper.wait()


async def test_a_dead_wrappers_tree_is_reaped_by_the_lifecycle_service(
    tmp_path: Path, guard: ProcessGuard
) -> None:
    """No close, no client: the service sees the wrapper die and reaps what carries the lease.

    The adapter survives SIGTERM (its parent-death signal included) and so does the
    detached grandchild, which lands on PID 1 (or a subreaper) once the wrapper is
    gone: only the verified reap's SIGKILL, after the grace, ends them.
    """
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        tree = await ensure_detacher(stub, tmp_path, guard)
        lease, adapter, grandchild = tree.lease, tree.adapter, tree.grandchild
        assert await kill_exact(tree.wrapper.pid, lease.root_start_time)
        await eventually(lambda: not alive(adapter) and not alive(grandchild), 10.0,
                         "the dead wrapper's adapter and detached grandchild to be reaped")
        # SIGTERM came first (the adapter's twice: its parent-death signal, then the reap's).
        assert tree.signals().split().count(str(int(signal.SIGTERM))) >= 3
        await eventually(lambda: lease_of(cfg.config_dir / LEASES_DB, lease.session_key).state == "lost",
                         5.0, "the lease to end as lost")
        assert await asyncio.to_thread(marked_with, lease.lease_id) == []
    finally:
        await channel.close(None)
        await server.stop()


async def test_startup_reap_finds_a_dead_wrappers_detached_grandchild(
    tmp_path: Path, guard: ProcessGuard
) -> None:
    """Service and wrapper both SIGKILLed: nobody watched, the next start reaps (SPEC §13)."""
    cfg_dir = tmp_path / "gw"
    # A long grace: the wrapper that notices its service's death waits it out, and
    # is killed meanwhile, so that nothing but the next startup can clean up.
    cfg = make_config(cfg_dir, term_grace_ms=60_000)
    address = f"unix:{cfg.data_dir}/run/lifecycle.sock"
    first = await start_service_process(cfg_dir, tmp_path / "first.log")
    guard.track(first.pid)
    channel = service_channel(address)
    try:
        await wait_healthy(channel, within=20.0)
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        tree = await ensure_detacher(stub, tmp_path, guard)
        lease, wrapper, adapter, grandchild = tree.lease, tree.wrapper, tree.adapter, tree.grandchild
    finally:
        await channel.close(None)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    assert await kill_exact(wrapper.pid, lease.root_start_time)
    await eventually(lambda: not alive(wrapper), 5.0, "the wrapper to die")
    await eventually(lambda: grandchild.ppid() != wrapper.pid, 5.0, "the grandchild to be orphaned")
    await asyncio.sleep(0.5)
    assert alive(adapter) and alive(grandchild), "both survive SIGTERM: nobody ended them"
    birth = await birth_of(grandchild.pid)

    second = await start_service_process(
        cfg_dir, tmp_path / "second.log", env={"ACPGATE_lifecycle__term_grace_ms": "300"})
    guard.track(second.pid)
    channel = service_channel(address)
    try:
        await wait_healthy(channel, within=20.0)  # startup reaping happens before serving
        await eventually(lambda: not alive(adapter) and not alive(grandchild), 5.0,
                         "the startup reap to end the orphans")
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        leases = await stub.ListLeases(pb.ListLeasesRequest())
        (row,) = [x for x in leases.leases if x.lease_id == lease.lease_id]
        assert row.state == pb.LEASE_STATE_LOST
    finally:
        await channel.close(None)
    assert birth > lease.root_start_time
    second.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(second.wait(), 15.0) == 0


async def test_close_reaps_what_a_wrapper_that_ended_in_order_left_behind(
    tmp_path: Path, guard: ProcessGuard
) -> None:
    """The wrapper ends in order (the adapter exited) yet B escaped it: CloseSession finds B.

    B is a child of A in A's own session: neither in the adapter's group nor the
    wrapper's child, so the wrapper's cleanup (group + adopted children) never
    sees it, and when A dies B outlives the wrapper. The close after the exit
    (the edge sends it when the adapter ends) finds B by the lease id in its
    environment.
    """
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        leaver, stubborn = script(tmp_path, "leaver", LEAVER), script(tmp_path, "stubborn", STUBBORN)
        pidfile = tmp_path / "pids.json"
        resp = await stub.EnsureSession(ensure_request(
            session_key="agent:l:acp:1", command=sys.executable,
            args=[str(leaver), str(pidfile), str(stubborn)]))
        wrapper = guard.track(resp.lease.root_pid)
        pids = await read_pidfile(pidfile)
        a, b = guard.track(pids["a"]), guard.track(pids["b"])
        call = stub.Attach(iter([pb.AttachRequest(open=pb.AttachOpen(lease_id=resp.lease.lease_id)),
                                 pb.AttachRequest(close_stdin=True)]))
        assert [m.WhichOneof("msg") async for m in call] == ["attached", "exit"]
        await eventually(lambda: not alive(wrapper) and not alive(a), 10.0, "the wrapper's own cleanup")
        assert alive(b), "B escaped the wrapper (the case this test is about)"

        closed = await stub.CloseSession(pb.CloseSessionRequest(lease_id=resp.lease.lease_id))
        assert b.pid in closed.terminated_pids and list(closed.surviving_pids) == []
        assert closed.lease.state == pb.LEASE_STATE_LOST  # the root was gone before any signal
        assert not alive(b)
    finally:
        await channel.close(None)
        await server.stop()


@pytest.mark.parametrize(("alias", "prompt"), [
    ("attacker", "shell sleep 30"),  # the built-in agent: told to terminate, it answers
    ("scripted", "stream 300"),      # "cancelled" before it goes; an agent that just dies
])
async def test_a_turn_whose_wrapper_is_killed_reports_the_agent_killed(
        tmp_path: Path, alias: str, prompt: str) -> None:
    """SIGKILL of the wrapper mid-turn is never reported as the client's cancel ("[turn
    cancelled via client]"): the prompt fails -32603 saying the agent was killed (the
    signal named, ``data.acpgate.exit`` as for setup failures); nothing of the turn is
    stored."""
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        client = RawClient(await gw.connect(await gw.token("t")))
        sid = (await client.result("session/new", {"agentAlias": alias}))["sessionId"]
        rid = await client.send("session/prompt", {"sessionId": sid, "prompt": prompt})
        while json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)).get("method") \
                != "session/update":
            pass  # the turn runs
        lease = lease_of(gw.config_dir / LEASES_DB, f"agent:{alias}:acp:{sid}")
        assert await kill_exact(lease.root_pid, lease.root_start_time)

        _, resp = await asyncio.wait_for(client.until_response(rid), WAIT)
        assert "error" in resp and "[turn cancelled" not in json.dumps(resp), resp
        err = resp["error"]
        assert err["code"] == -32603
        assert "agent process exited (killed by SIGKILL, signal 9)" in err["message"], err
        assert err["data"]["acpgate"]["exit"]["signal"] == signal.SIGKILL
        assert gw.stored_items(sid) == 0
        await client.ws.close()
