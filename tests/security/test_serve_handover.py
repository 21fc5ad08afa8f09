"""Nobody but the install's own serve can take a running serve's listening socket or make
it step down: its handover socket (``<data dir>/run/serve.handover.sock``) answers
another uid with nothing, even one holding the service credential, and refuses a
caller without the credential's proof — handing over no descriptor, stopping nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest

from acpgate.handover_wire import handover_key, handover_path, proof
from services.common.grpc_auth import load_security
from tests.gateway.workers_serve import Served, serve_workers, until
from tests.gateway.wsfixtures import http_get
from tests.security.test_fd_channel import FOREIGN_PYTHON, OTHER_UID

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: Run as another uid (argv: uid, socket path, credential): speak the new serve's side with
#: a right proof; print what came back.
FOREIGN_REPLACER = textwrap.dedent("""
    import hashlib, hmac, json, os, socket, sys
    uid = int(sys.argv[1])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    assert os.getuid() == os.geteuid() == uid
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    try:
        sock.connect(sys.argv[2])
    except OSError as exc:
        print(json.dumps({"connect": type(exc).__name__}))
        sys.exit(0)
    out = {"hello": "", "answer": "", "fds": 0}
    try:
        hello = sock.recv(4096)
        out["hello"] = hello.decode(errors="replace")
        if hello:
            nonce = json.loads(hello)["nonce"]
            key = hmac.new(sys.argv[3].encode(), b"acpgate serve handover key v1",
                           hashlib.sha256).digest()
            mine = "n" * 32
            text = "\\0".join(("replace", nonce, mine)).encode()
            sock.sendall(json.dumps({"op": "replace", "pid": os.getpid(), "nonce": mine,
                                     "proof": hmac.new(key, text, hashlib.sha256).hexdigest()
                                     }).encode() + b"\\n")
            data, fds, _, _ = socket.recv_fds(sock, 4096, 16)
            out["answer"], out["fds"] = data.decode(errors="replace"), len(fds)
    except OSError as exc:
        out["error"] = type(exc).__name__
    print(json.dumps(out))
""")


async def handover_ready(served: Served) -> Path:
    """The running serve's handover socket, once it listens."""
    path = handover_path(served.cfg.data_dir)

    async def listening() -> bool:
        return path.exists()
    await until(listening, "the handover socket")
    return path


def children(served: Served) -> list[int]:
    """serve's children's PIDs now."""
    import psutil
    return sorted(p.pid for p in psutil.Process(served.proc.pid).children())


async def still_serving(served: Served, before: list[int]) -> None:
    """serve runs on, with the same children, and its port answers."""
    assert served.proc.returncode is None
    assert children(served) == before
    status, _, _ = await http_get(f"http://127.0.0.1:{served.port}/healthz")
    assert status == 200


async def exchange(path: Path, make_proof: Any) -> tuple[dict[str, Any], int]:
    """As a caller of this uid: read the hello, send ``make_proof(nonce_old, mine)``; the
    answer and how many descriptors came with it."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    try:
        await asyncio.to_thread(sock.connect, str(path))
        hello = json.loads(await asyncio.to_thread(sock.recv, 4096))
        mine = "m" * 32
        sock.sendall(json.dumps({"op": "replace", "pid": os.getpid(), "nonce": mine,
                                 "proof": make_proof(hello["nonce"], mine)}).encode() + b"\n")
        data, fds, _, _ = await asyncio.to_thread(socket.recv_fds, sock, 4096, 16)
        for fd in fds:
            os.close(fd)
        return json.loads(data), len(fds)
    finally:
        sock.close()


async def test_a_caller_without_the_credential_gets_nothing_and_stops_nothing(
        tmp_path: Path) -> None:
    async with serve_workers(tmp_path, workers=1) as served:
        path = await handover_ready(served)
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        before = children(served)
        wrong = handover_key("not the credential")
        for make in (lambda old, mine: "0" * 64,
                     lambda old, mine: proof(wrong, "replace", old, mine),
                     lambda old, mine: proof(wrong, "serve", old, mine)):
            answer, fds = await exchange(path, make)
            assert answer == {"ok": False, "error": "refused"} and fds == 0, answer
        await asyncio.sleep(0.5)  # a step-down, had one begun, would be under way
        await still_serving(served, before)


@pytest.mark.skipif(os.getuid() != 0 or FOREIGN_PYTHON is None,
                    reason="needs root, and a python3 outside any private home, to run a "
                           "caller as another uid")
async def test_another_uid_gets_nothing_even_with_the_credential(tmp_path: Path) -> None:
    async with serve_workers(tmp_path, workers=1) as served:
        path = await handover_ready(served)
        before = children(served)
        credential = (await load_security(served.cfg)).token
        # The file modes aside (owner-only run dir and socket): the serve's own check.
        for part in (path, *path.parents):
            if part in (Path("/tmp"), Path("/")):  # up to the test's base dir, whatever its depth
                break
            os.chmod(part, 0o777 if part == path else 0o711)
        assert FOREIGN_PYTHON is not None
        proc = await asyncio.create_subprocess_exec(
            FOREIGN_PYTHON, "-I", "-c", FOREIGN_REPLACER, str(OTHER_UID), str(path), credential,
            cwd="/", env={"PATH": "/usr/bin:/bin"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err
        got = json.loads(out)
        assert "connect" not in got, got
        assert got["hello"] == "" and got["fds"] == 0 and '"ok"' not in got["answer"], got
        await asyncio.sleep(0.5)
        await still_serving(served, before)
