"""The real wrapper: signal forwarding, no orphans when the adapter exits, bounded stderr log."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.lifecycle.adapters.spawn import install_wrapper
from services.lifecycle.api.server import start_lifecycle_server
from services.lifecycle.wrapper.supervisor import BoundedLog, parse_args
from tests.launches import ensure_request
from tests.lifecycle.conftest import (
    ProcessGuard,
    Scripts,
    gone,
    make_config,
    read_pidfile,
    wait_until,
)

# argv: pidfile — spawns a TERM-ignoring grandchild, exits when stdin closes.
EXIT_LEAVING_CHILD = r"""
import json, os, subprocess, sys
pidfile = sys.argv[1]
grand = subprocess.Popen([sys.executable, "-c",
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)\n"])
with open(pidfile + ".tmp", "w") as fh:
    json.dump({"adapter": os.getpid(), "grandchild": grand.pid}, fh)
os.replace(pidfile + ".tmp", pidfile)
sys.stdin.read()
sys.exit(0)
"""

# argv: marker — records INT/HUP/TERM (without dying) and echoes stdin.
RECORDER = r"""
import signal, sys
marker = sys.argv[1]
def note(signum, frame):
    with open(marker, "a") as fh:
        fh.write(f"{signum}\n")
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, note)
print("ready", flush=True)
for line in sys.stdin:
    pass
"""


async def test_int_hup_term_are_forwarded_to_the_adapter_group(tmp_path: Path, guard: ProcessGuard) -> None:
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    marker = tmp_path / "signals.txt"
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        resp = await stub.EnsureSession(ensure_request(
            session_key="agent:r:acp:1", command=sys.executable, args=[str(script), str(marker)]))
        wrapper = guard.track(resp.lease.root_pid)
        adapter = guard.track(resp.lease.adapter_pid)
        call = stub.Attach(iter([pb.AttachRequest(open=pb.AttachOpen(lease_id=resp.lease.lease_id))]))
        assert (await call.read()).WhichOneof("msg") == "attached"  # type: ignore[attr-defined]
        assert list((await call.read()).stdout.lines) == ["ready"]  # type: ignore[attr-defined]
        expected: list[str] = []
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            wrapper.send_signal(sig)  # the wrapper this test's service started
            expected.append(str(int(sig)))
            await wait_until(
                lambda: marker.exists() and marker.read_text().split() == expected, 5.0, f"{sig.name} forwarded"
            )
        assert not gone(adapter) and not gone(wrapper)
        call.cancel()
        closed = await stub.CloseSession(pb.CloseSessionRequest(lease_id=resp.lease.lease_id))
        assert set(closed.terminated_pids) == {wrapper.pid, adapter.pid}
        assert gone(adapter) and gone(wrapper)
    finally:
        await channel.close(None)
        await server.stop()


async def test_adapter_exit_leaves_no_orphan(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    script = tmp_path / "leaver.py"
    script.write_text(EXIT_LEAVING_CHILD)
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        resp = await stub.EnsureSession(ensure_request(
            session_key="agent:l:acp:1", command=sys.executable, args=[str(script), str(tmp_path / "p.json")]))
        wrapper = guard.track(resp.lease.root_pid)
        pids = await read_pidfile(tmp_path / "p.json")
        grandchild = guard.track(pids["grandchild"])
        adapter = guard.track(pids["adapter"])
        call = stub.Attach(iter([
            pb.AttachRequest(open=pb.AttachOpen(lease_id=resp.lease.lease_id)),
            pb.AttachRequest(close_stdin=True),
        ]))
        kinds = [m.WhichOneof("msg") async for m in call]
        assert kinds == ["attached", "exit"]
        # The wrapper cleans up what the adapter left in its group, SIGKILL after the grace.
        await wait_until(lambda: gone(grandchild) and gone(wrapper), 5.0, "leftover grandchild reaped by the wrapper")
        assert gone(adapter)
    finally:
        await channel.close(None)
        await server.stop()


def test_bounded_log_never_exceeds_twice_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "lease.log"
    log = BoundedLog(str(path), 2048)
    for i in range(500):
        log.write(f"line {i:04d} {'z' * 40}\n".encode())
    log.close()
    rotated = Path(str(path) + ".1")
    assert path.stat().st_size <= 2048 and rotated.stat().st_size <= 2048
    assert path.read_text().rstrip().endswith("line 0499 " + "z" * 40)
    log = BoundedLog(str(path), 2048)
    log.write(b"x" * 10_000)  # one oversized write keeps only its tail
    log.close()
    assert path.stat().st_size == 2048


def test_wrapper_argument_parsing() -> None:
    opts = parse_args([
        "--lease-id", "L", "--instance-id", "I", "--parent-pid", "5", "--term-grace-ms", "10",
        "--report-fd", "7", "--stderr-log", "/x", "--", "agent", "--flag", "--",
    ])
    assert (opts.lease_id, opts.instance_id, opts.parent_pid, opts.term_grace_ms, opts.report_fd) == ("L", "I", 5, 10, 7)
    assert opts.command == ["agent", "--flag", "--"]
    with pytest.raises(ValueError):
        parse_args(["--lease-id", "L", "--"])
    with pytest.raises(KeyError):
        parse_args(["--", "agent"])


async def test_wrapper_refuses_to_start_when_its_parent_is_already_gone(tmp_path: Path) -> None:
    wrapper = (await install_wrapper(tmp_path / "state")).path  # as the service runs it
    marker = tmp_path / "started"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", str(wrapper), "--lease-id", "L", "--instance-id", "I",
        "--parent-pid", str(os.getpid() + 100000), "--stderr-log", str(tmp_path / "w.log"), "--",
        sys.executable, "-c", f"open({str(marker)!r}, 'w').close()",
    )
    assert await asyncio.wait_for(proc.wait(), 10.0) == 1
    assert not marker.exists()
    assert "parent gone" in (tmp_path / "w.log").read_text()
    assert not psutil.pid_exists(proc.pid) or gone(psutil.Process(proc.pid))
