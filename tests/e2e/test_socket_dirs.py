"""Embedded mode's socket dirs (acpgate/socket_dirs.py): a SIGKILLed ``acpgate acp``
leaves its ``/tmp/acpg-*`` dir behind, and the next start removes it, never a live one."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import psutil
import pytest

from acpgate.socket_dirs import is_stale, sweep_stale
from tests.e2e.harness import AcpProcess, write_config

INIT = {"protocolVersion": 1, "clientCapabilities": {}}


def _socket_dir(acp: AcpProcess) -> Path:
    """The socket dir the running ``acpgate acp`` listens in."""
    paths = [c.laddr for c in psutil.Process(acp.proc.pid).net_connections("unix")
             if isinstance(c.laddr, str) and c.laddr.endswith("/l.sock")]
    assert len(paths) == 1, paths
    return Path(paths[0]).parent


def _age(path: Path, secs: float) -> None:
    past = time.time() - secs
    os.utime(path, (past, past))


@pytest.mark.slow
def test_next_start_removes_a_killed_acpgates_dir_not_a_live_ones(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    live, killed, later = AcpProcess(cfg), AcpProcess(cfg), None
    try:
        live.result("initialize", INIT)
        killed.result("initialize", INIT)
        live_dir, dead_dir = _socket_dir(live), _socket_dir(killed)
        killed.proc.kill()
        killed.proc.wait()
        assert dead_dir.exists()  # nobody could remove it
        _age(dead_dir, 3600)
        _age(live_dir, 3600)  # old, but still served
        later = AcpProcess(cfg)
        later.result("initialize", INIT)
        assert not dead_dir.exists()
        assert live_dir.exists() and not is_stale(live_dir)
        assert live.result("session/list", {})["sessions"] == []  # still served
    finally:
        for proc in (live, killed, later):
            if proc is not None:
                proc.kill()


def _listener(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


def test_only_old_dirs_of_dead_sockets_are_stale(tmp_path: Path) -> None:
    dead = tmp_path / "acpg-dead0001"
    dead.mkdir()
    _listener(dead / "s.sock").close()  # the file stays, nobody listens
    alive = tmp_path / "acpg-alive001"
    alive.mkdir()
    server = _listener(alive / "l.sock")
    young = tmp_path / "acpg-young001"
    young.mkdir()  # created, not bound yet
    foreign = tmp_path / "acpg-foreign1"
    foreign.mkdir()
    (foreign / "data.txt").write_text("not a socket")
    other = tmp_path / "acpg-gw-abcdefgh"  # not a name mkdtemp gives our prefix
    other.mkdir()
    try:
        for path in (dead, alive, foreign, other):
            _age(path, 3600)
        assert sweep_stale(str(tmp_path)) == [str(dead)]
        assert not dead.exists()
        assert alive.exists() and young.exists() and foreign.exists() and other.exists()
        _age(young, 3600)
        assert sweep_stale(str(tmp_path)) == [str(young)]
        server.close()
        assert is_stale(alive)
    finally:
        server.close()
