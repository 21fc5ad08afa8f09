"""Attacks on the sessions a restarted edge worker re-adopts.

After ``kill -9`` of edge worker 2 mid-turn, its sessions' leases stay open (the
lifecycle service keeps their pipes) until the restarted worker takes them up. Meanwhile
and afterwards:

- another token's ``session/attach`` of a re-adopted session is answered as for a
  session that does not exist, and gets none of its updates;
- a process of the same user without the service credential gets nothing from the
  kept leases: an ``Attach`` on the lease is refused (UNAUTHENTICATED), and a forged
  redemption on the fd socket is refused without a descriptor;
- the owner, after all that, re-attaches and gets the whole turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from pathlib import Path

import grpc
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.fd_channel import channel_key, encode_request, parse_header
from tests.chaos.edge_worker_kill import (
    CHUNKS,
    Stream,
    agent_pids,
    drain_until_closed,
    read_until,
    reattach,
)
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import (
    client_on,
    dial,
    kill_worker,
    serve_workers,
    until,
    worker_pid,
)
from tests.gateway.wsfixtures import mint
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


#: How gRPC reports the refusal of an unauthenticated ``Attach``: UNAUTHENTICATED, or — when
#: the server's abort races the client's write of its request on a loaded machine — INTERNAL.
REFUSED = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INTERNAL}


async def forged_attach(data_dir: Path, lease_id: str) -> grpc.StatusCode:
    """An ``Attach`` on ``lease_id`` without the service credential: its status (OK if it
    was never refused), once it is certain that nothing came back."""
    channel = grpc.aio.insecure_channel(f"unix:{data_dir}/run/lifecycle.sock")
    received = 0
    try:
        call = lifecycle_pb2_grpc.LifecycleServiceStub(channel).Attach(iter([
            lifecycle_pb2.AttachRequest(open=lifecycle_pb2.AttachOpen(
                lease_id=lease_id, fd_pass=True, keep_on_loss=True))]))
        try:
            async for _ in call:
                received += 1
        except grpc.aio.AioRpcError as exc:
            assert received == 0, "a forged attach got a message"
            return exc.code()
        return grpc.StatusCode.OK
    finally:
        await channel.close(None)


def forged_redeem(data_dir: Path, lease_id: str) -> tuple[bool, int]:
    """A redemption on the fd socket with a guessed grant and a proof under a wrong key:
    (whether it was answered ok, how many descriptors came)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(data_dir / "run" / "lifecycle.fds.sock"))
        sock.sendall(encode_request(channel_key("not the credential"), lease_id, 1, "00" * 16))
        data, fds, _, _ = socket.recv_fds(sock, 4096, 2)
    head = parse_header(data.partition(b"\n")[0] + b"\n")
    return bool(head is not None and head.ok), len(fds)


async def test_readopted_sessions_are_the_owners_alone(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent_section("scripted")) as served:
        client = await client_on(served, 2)
        assert client is not None
        sid = (await client.result("session/new", {"cwd": str(work),
                                                   "agentAlias": "scripted"}))["sessionId"]
        await client.send("session/prompt", {"sessionId": sid, "prompt": f"stream {CHUNKS}"})
        stream = Stream(sid)
        await read_until(client, stream, 5)
        leases = list(agent_pids(served))
        old = kill_worker(served, 2)
        await drain_until_closed(client, stream)

        # While no worker holds it: the kept lease gives nothing without the credential.
        data_dir = served.cfg.data_dir
        for lease_id in leases:
            assert await forged_attach(data_dir, lease_id) in REFUSED
            assert await asyncio.to_thread(forged_redeem, data_dir, lease_id) == (False, 0)

        async def restarted() -> bool:
            with contextlib.suppress(KeyError):
                return worker_pid(served, 2) != old and (await served.health_status())[0] == 200
            return False
        await until(restarted, "worker 2 serving again", tries=1200)

        _, stranger = mint(served.cfg, "mallory")
        other = RawClient(await dial(served, secret=stranger, query="worker=2"))
        await other.result("initialize", {"protocolVersion": 1})
        _, answer = await other.call("session/attach", {
            "sessionId": sid, "role": "observer", "historyPolicy": "full"})
        assert "error" in answer and "not found" in answer["error"]["message"].lower(), answer
        with contextlib.suppress(TimeoutError):
            msg = json.loads(await asyncio.wait_for(other.ws.recv(), 1.0))
            assert msg.get("method") != "session/update", msg
        await other.ws.close()
        for lease_id in leases:  # re-adopted now: still nothing without the credential
            assert await forged_attach(data_dir, lease_id) in REFUSED

        owner = await reattach(served, stream)
        assert stream.chunks == [f"chunk {i} " for i in range(CHUNKS)]
        assert stream.completed is not None
        await owner.ws.close()
