"""A raw client of the lifecycle service's fd socket, for tests on both sides.

:func:`redeem` sends one request line — well formed, or forged field by field — and
returns what came back: the header, the descriptors attached to it and the stdout
bytes that followed. It closes nothing it received: the test does.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
from dataclasses import dataclass, field
from typing import Any

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from services.common.fd_channel import channel_key, grant_proof
from tests.launches import TEST_SERVICE_KEY


@dataclass
class Answer:
    """What the fd socket answered."""

    header: dict[str, Any]
    fds: list[int] = field(default_factory=list)
    prefix: bytes = b""

    @property
    def ok(self) -> bool:
        """True when the pipes came."""
        return bool(self.header.get("ok")) and len(self.fds) == 2

    def close(self) -> None:
        """Close every descriptor received."""
        for fd in self.fds:
            os.close(fd)


def request_line(lease_id: str, generation: int, grant_id: str, proof: str) -> bytes:
    """One request line, exactly as given."""
    return json.dumps({"v": 1, "lease_id": lease_id, "generation": generation,
                       "grant": grant_id, "proof": proof}).encode() + b"\n"


def exchange(path: str, line: bytes) -> Answer:
    """Connect, send ``line``, read the answer (blocking)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(line)
        data, fds, _, _ = socket.recv_fds(sock, 4097, 4)
        head, _, rest = data.partition(b"\n")
        answer = Answer(json.loads(head) if head else {}, list(fds))
        need = answer.header.get("lines", 0) + answer.header.get("partial", 0)
        prefix = bytearray(rest)
        while answer.header.get("ok") and len(prefix) < need:
            chunk = sock.recv(need - len(prefix))
            if not chunk:
                break
            prefix += chunk
        answer.prefix = bytes(prefix)
        return answer


async def redeem(path: str, first: pb.AttachResponse, *, credential: str = TEST_SERVICE_KEY,
                 lease_id: str | None = None, generation: int | None = None,
                 grant_id: str | None = None) -> Answer:
    """Redeem the grant of ``first`` (an Attach stream's first response) with a proof keyed
    with ``credential``; ``lease_id``, ``generation``, ``grant_id`` replace what is asked
    for (and proven)."""
    lease = lease_id if lease_id is not None else (
        first.ensured.lease.lease_id if first.WhichOneof("msg") == "ensured"
        else first.attached.lease_id)
    gen = generation if generation is not None else first.fd_grant.generation
    grant = grant_id if grant_id is not None else first.fd_grant.grant_id
    proof = grant_proof(channel_key(credential), lease, gen, grant)
    return await asyncio.to_thread(exchange, path, request_line(lease, gen, grant, proof))


def read_until(fd: int, end: bytes, within: float = 10.0) -> bytes:
    """Read ``fd`` (blocking this thread: the pipe itself is non-blocking, as its holder
    in the lifecycle service set it, and stays so) until what was read ends with ``end``,
    or it ends, or ``within`` seconds pass."""
    data = b""
    while not data.endswith(end):
        ready, _, _ = select.select([fd], [], [], within)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data
