"""The wrapper's control channel from the attacker's side.

A real wrapper (the installed file's code, run as ``python -I -S``) with an adoption
window, spawned by a stand-in parent that then dies: the wrapper is orphaned and
listens for a restarted lifecycle service. An attacker of the same uid (an agent, a
tool it ran) can reach the socket; without the service credential it cannot adopt the
wrapper — nor replay a proof seen before, nor make it let stdin go — and the wrapper
stops its adapter when the window ends. A line nested deeper than the JSON parser goes
is a malformed line, not the wrapper's death (with its adapter's). A peer of another uid that reaches the socket
(were its mode ever broader) is closed before the wrapper says a word, and peers that
connect and stall cannot hold the window open. The service's own exchange (the key
derived from the credential) does adopt it: the check is real, not a closed door.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from services.lifecycle.adapters.control_channel import AdoptPolicy, ControlError, exchange
from services.lifecycle.adapters.spawn import WRAPPER_FILE_NAME, install_wrapper
from services.lifecycle.wrapper.control import (
    OP_ADOPT,
    OP_CLOSE_STDIN,
    ROLE_SERVICE,
    proof,
    recv_line,
    send_line,
)

pytestmark = [pytest.mark.timeout(60)]

#: The wrapper's installed file name: what its command line shows.
WRAPPER_NAME = WRAPPER_FILE_NAME
WINDOW_SECS = 3
LEASE = "5b1f0c9e-7a44-4d1e-9c3b-2f6d8e0a1b2c"

# A stand-in lifecycle service: spawns the wrapper with the pipes and the key pipe the real
# one passes, prints the wrapper's PID, and exits when its stdin ends.
PARENT = r"""
import os, subprocess, sys
wrapper, path, key, window = sys.argv[1:5]
in_r, in_w = os.pipe(); out_r, out_w = os.pipe(); key_r, key_w = os.pipe()
os.write(key_w, key.encode()); os.close(key_w)
argv = [sys.executable, "-I", "-S", wrapper, "--lease-id", "LEASE", "--instance-id", "gw-test",
        "--parent-pid", str(os.getpid()), "--adopt-secs", window, "--control", path,
        "--adopt-key-fd", str(key_r), "--hold-stdin-fd", str(in_w), "--hold-stdout-fd", str(out_r),
        "--", sys.executable, "-c", "import time; time.sleep(120)"]
p = subprocess.Popen(argv, stdin=in_r, stdout=out_w, pass_fds=(key_r, in_w, out_r))
print(p.pid, flush=True)
sys.stdin.read()
""".replace("LEASE", LEASE)


def _spawn(tmp: Path, policy: AdoptPolicy) -> tuple[subprocess.Popen[str], int, str]:
    path = policy.path(LEASE)
    assert path is not None
    wrapper = asyncio.run(install_wrapper(tmp / "state")).path  # the file the service runs
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(wrapper), path, policy.key(LEASE).hex(), str(WINDOW_SECS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    wrapper_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 20
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "the wrapper never listened"
        time.sleep(0.02)
    return parent, wrapper_pid, path


def _orphan(parent: subprocess.Popen[str]) -> None:
    assert parent.stdin is not None
    parent.stdin.close()
    parent.wait(10)


def _adapter(wrapper_pid: int) -> psutil.Process:
    deadline = time.monotonic() + 20
    while not (children := psutil.Process(wrapper_pid).children()):
        assert time.monotonic() < deadline, "the wrapper never started its adapter"
        time.sleep(0.02)
    return children[0]


def _forged(path: str, op: str, key: bytes, nonce_w: str | None = None) -> dict[str, object]:
    """One exchange as an attacker: a proof under ``key`` (over ``nonce_w`` when given: a
    replay of an earlier exchange's nonce). The wrapper's answer."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(path)
        hello, _ = recv_line(sock)
        nonce_s = secrets.token_hex(16)
        used = nonce_w if nonce_w is not None else str(hello["nonce"])
        send_line(sock, {"op": op, "nonce": nonce_s,
                         "proof": proof(key, ROLE_SERVICE, op, LEASE, used, nonce_s)})
        answer, fds = recv_line(sock, want_fds=2)
        for fd in fds:
            os.close(fd)
        assert not fds, "descriptors handed to an attacker"
        return answer


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_without_the_credential_nothing_adopts_or_commands_the_wrapper(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    policy = AdoptPolicy(WINDOW_SECS, "the-service-credential", run)
    parent, wrapper_pid, path = _spawn(tmp_path, policy)
    try:
        adapter = _adapter(wrapper_pid)
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, "the socket is owner-only"
        _orphan(parent)
        wrong = AdoptPolicy(WINDOW_SECS, "a-guessed-credential", run).key(LEASE)
        assert _forged(path, OP_ADOPT, wrong) == {"ok": False, "error": "refused"}
        assert _forged(path, OP_CLOSE_STDIN, wrong) == {"ok": False, "error": "refused"}
        # A proof under the right key but over another exchange's nonce (a replay).
        stale = _forged(path, OP_ADOPT, policy.key(LEASE), nonce_w="00" * 16)
        assert stale == {"ok": False, "error": "refused"}
        # Nothing adopted it: the window ends, the adapter is stopped, the wrapper exits.
        assert _gone(adapter.pid, WINDOW_SECS + 10), "the adapter outlived the window"
        assert _gone(wrapper_pid, 10)
        assert not os.path.exists(path)
    finally:
        parent.kill()
        for pid in (wrapper_pid,):
            with_suppress_kill(pid)


def test_the_service_credential_adopts_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    policy = AdoptPolicy(WINDOW_SECS, "the-service-credential", run)
    parent, wrapper_pid, path = _spawn(tmp_path, policy)
    try:
        adapter = _adapter(wrapper_pid)
        with pytest.raises(ControlError):  # a peer that is not the lease's wrapper PID
            exchange(path, policy.key(LEASE), LEASE, wrapper_pid + 1, OP_ADOPT)
        _orphan(parent)
        got = exchange(path, policy.key(LEASE), LEASE, wrapper_pid, OP_ADOPT)
        try:
            assert got.stdin >= 0 and got.stdout >= 0 and got.adapter_pid == adapter.pid
            assert not _gone(adapter.pid, WINDOW_SECS + 1), "adopted: the adapter lives on"
        finally:
            got.close()  # the adopter goes: a new window, then the seed's cleanup
        assert _gone(adapter.pid, WINDOW_SECS + 10)
    finally:
        parent.kill()
        with_suppress_kill(wrapper_pid)


def with_suppress_kill(pid: int) -> None:
    """SIGKILL a wrapper this test started, if it is still there (its PID is unreaped by
    its dead parent's init only once gone: checked by identity through psutil)."""
    try:
        proc = psutil.Process(pid)
        if WRAPPER_NAME in " ".join(proc.cmdline()):
            proc.send_signal(signal.SIGKILL)
    except psutil.Error:
        pass




def _as_nobody_connect(path: str) -> bytes:
    """Connect to ``path`` from a child running as another uid (``nobody``); what the
    wrapper sent it before closing ("" when nothing)."""
    script = (  # everything imported and the directory entered before the uid changes
        "import os, socket, sys\n"
        "os.chdir(os.path.dirname(sys.argv[1]))\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
        "s.connect(os.path.basename(sys.argv[1]))\n"
        "data = b''\n"
        "while chunk := s.recv(4096):\n"
        "    data += chunk\n"
        "sys.stdout.write(data.decode())\n")
    done = subprocess.run([sys.executable, "-I", "-c", script, path], capture_output=True,
                          text=True, timeout=20, check=True)
    return done.stdout.encode()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a peer as another uid")
def test_another_uid_or_a_stalling_peer_neither_talks_to_nor_keeps_the_wrapper(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    policy = AdoptPolicy(WINDOW_SECS, "the-service-credential", run)
    parent, wrapper_pid, path = _spawn(tmp_path, policy)
    stalling: list[socket.socket] = []
    try:
        adapter = _adapter(wrapper_pid)
        # Reachable by everyone (a socket left open by a mistake): the peer's uid still
        # closes the connection before the wrapper says anything, its lease id included.
        for part in (run, Path(path)):
            os.chmod(part, 0o777)
        assert _as_nobody_connect(path) == b""
        _orphan(parent)
        # Peers that connect and say nothing, again and again, through the whole window.
        deadline = time.monotonic() + WINDOW_SECS + 2
        while time.monotonic() < deadline and psutil.pid_exists(adapter.pid):
            with contextlib.suppress(OSError):
                sock = socket.socket(socket.AF_UNIX)
                sock.setblocking(False)
                stalling.append(sock)
                sock.connect(path)
            time.sleep(0.2)
        assert _gone(adapter.pid, WINDOW_SECS + 10), "stalling peers kept the adapter alive"
        assert _gone(wrapper_pid, 10)
    finally:
        for sock in stalling:
            sock.close()
        parent.kill()
        with_suppress_kill(wrapper_pid)


def test_a_deeply_nested_line_neither_crashes_nor_stalls_the_wrapper(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    policy = AdoptPolicy(WINDOW_SECS, "the-service-credential", run)
    parent, wrapper_pid, path = _spawn(tmp_path, policy)
    try:
        adapter = _adapter(wrapper_pid)
        for line in ("[" * 4000, "{\"op\": " * 800, "[" * 4000 + "]" * 40):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(5)
                sock.connect(path)
                recv_line(sock)  # the hello
                sock.sendall(line.encode()[:4000] + b"\n")
                answer = b"reset"
                with contextlib.suppress(OSError):
                    answer = sock.recv(4096)
                assert not _gone(wrapper_pid, 0.5), "the wrapper died of it"
                assert answer == b"", "closed unanswered"
        assert not _gone(adapter.pid, 0.5), "the adapter was stopped"
        # The wrapper still serves its service.
        _orphan(parent)
        got = exchange(path, policy.key(LEASE), LEASE, wrapper_pid, OP_ADOPT)
        got.close()
    finally:
        parent.kill()
        with_suppress_kill(wrapper_pid)
