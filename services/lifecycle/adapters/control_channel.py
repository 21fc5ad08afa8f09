"""The lifecycle service's side of the wrapper control channel
(:mod:`services.lifecycle.wrapper.control`).

:class:`AdoptPolicy` says whether wrappers get an adoption window, where their control
sockets live (``<lifecycle state dir>/run``, owner-only) and which key each one holds:
HMAC-SHA256 of the lease id under the service credential, so a restarted service
derives it again from the lease alone and no key is ever stored. :func:`exchange`
is one connection to a wrapper (blocking: run it in a thread); the service checks
that the peer is the lease's wrapper (``SO_PEERCRED`` PID = the lease's root PID) and
that it holds the key (its proof), besides the verification of the six facts the
caller has done. :class:`WrapperLink` is one wrapper's channel as its adapter channel uses
it later (``close_stdin``), whether the wrapper was spawned or adopted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import secrets
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from services.common.fd_channel import MAX_SOCKET_PATH_BYTES
from services.common.logs import get_logger
from services.common.private_files import private_dir
from services.lifecycle.wrapper.control import (
    EXCHANGE_TIMEOUT_SECS,
    OP_ADOPT,
    OP_CLOSE_STDIN,
    ROLE_SERVICE,
    ROLE_WRAPPER,
    peer_credentials,
    proof,
    recv_line,
    send_line,
)

__all__ = ["AdoptPolicy", "ControlError", "Exchanged", "WrapperLink", "control_dir", "exchange",
           "forget_control"]

#: Its events are the adoption's: a link is what an adopted or adoptable wrapper keeps.
log = get_logger("lifecycle.adopt")

#: Where the wrappers' control sockets live, under the lifecycle state dir.
RUN_DIR_NAME = "run"
#: Hex digits of the lease id a control socket is named by.
SOCKET_NAME_CHARS = 16
_KEY_LABEL = b"acpgate wrapper adopt key v1\0"


class ControlError(Exception):
    """The exchange failed: no such socket, not the lease's wrapper, or a refused proof."""


@dataclass(frozen=True)
class AdoptPolicy:
    """The adoption window of this service's wrappers (0: none, the seed's cleanup)."""

    secs: float
    credential: str = field(repr=False)
    #: Where the control sockets live (None: nowhere safe, no adoption window).
    run_dir: Path | None

    @property
    def enabled(self) -> bool:
        """True when wrappers wait for a re-adoption (a window and a credential)."""
        return self.secs > 0 and bool(self.credential) and self.run_dir is not None

    def key(self, lease_id: str) -> bytes:
        """The adopt key of ``lease_id``'s wrapper."""
        secret = hashlib.sha256(self.credential.encode()).digest()
        return hmac.new(secret, _KEY_LABEL + lease_id.encode(), hashlib.sha256).digest()

    def path(self, lease_id: str) -> str | None:
        """The control socket of ``lease_id``'s wrapper (named by the first 64 bits of the
        lease id: a clash only costs the second wrapper its window); None when none."""
        if self.run_dir is None:
            return None
        path = str(self.run_dir / socket_name(lease_id))
        return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES else None


def socket_name(lease_id: str) -> str:
    """A control socket's file name."""
    return lease_id.replace("-", "")[:SOCKET_NAME_CHARS] + ".sock"


def control_dir(state_dir: Path) -> Path | None:
    """Where this install's control sockets live (blocking): ``<state dir>/run``, owner-only;
    where that path is too long for a socket, ``<tmp>/acpgate-<uid>-<digest of the state
    dir>``, used only when it is a real directory of this uid that no one else may enter.
    None when neither will do (wrappers then get no adoption window)."""
    longest = len(socket_name("0" * 32)) + 1
    preferred = state_dir / RUN_DIR_NAME
    if len(os.fsencode(str(preferred))) + longest <= MAX_SOCKET_PATH_BYTES:
        return private_dir(preferred)
    digest = hashlib.sha256(os.fsencode(str(state_dir.absolute()))).hexdigest()[:12]
    fallback = Path(tempfile.gettempdir()) / f"acpgate-{os.getuid()}-{digest}"
    with contextlib.suppress(FileExistsError):
        fallback.mkdir(mode=0o700)
    try:
        st = os.lstat(fallback)
    except OSError:
        return None
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077
            or len(os.fsencode(str(fallback))) + longest > MAX_SOCKET_PATH_BYTES):
        return None
    return fallback


@dataclass
class Exchanged:
    """What an exchange got: the connection (kept open after ``adopt``: the wrapper's
    link to its adopter), the pipe ends it sent, and what it said of the adapter."""

    sock: socket.socket | None
    stdin: int = -1
    stdout: int = -1
    adapter_pid: int = 0
    pgid: int = 0

    def close(self) -> None:
        """Let everything go (an adoption given up)."""
        for fd in (self.stdin, self.stdout):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.stdin = self.stdout = -1
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def exchange(path: str, key: bytes, lease_id: str, wrapper_pid: int, op: str) -> Exchanged:
    """One operation on the wrapper listening at ``path`` (blocking); ControlError when the
    peer is not ``wrapper_pid``, names another lease, or cannot prove it holds ``key``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    got: list[int] = []
    keep = False
    try:
        sock.settimeout(EXCHANGE_TIMEOUT_SECS)
        sock.connect(path)
        pid, uid, _gid = peer_credentials(sock)
        if pid != wrapper_pid or uid != os.getuid():
            raise ControlError(f"the control socket is not the lease's wrapper (pid {pid})")
        hello, _ = recv_line(sock)
        nonce_w = hello.get("nonce")
        if hello.get("lease_id") != lease_id or not isinstance(nonce_w, str):
            raise ControlError("the wrapper names another lease")
        nonce_s = secrets.token_hex(16)
        send_line(sock, {"op": op, "nonce": nonce_s,
                         "proof": proof(key, ROLE_SERVICE, op, lease_id, nonce_w, nonce_s)})
        answer, got = recv_line(sock, want_fds=2 if op == OP_ADOPT else 0)
        shown = answer.get("proof")
        if answer.get("ok") is not True or not isinstance(shown, str) or not hmac.compare_digest(
                shown, proof(key, ROLE_WRAPPER, op, lease_id, nonce_w, nonce_s)):
            raise ControlError("the wrapper refused the exchange or cannot prove its key")
        names = answer.get("pipes", [])
        held = dict(zip(names if isinstance(names, list) else [], got, strict=False))
        result = Exchanged(None, held.get("stdin", -1), held.get("stdout", -1),
                           _int(answer.get("adapter_pid")), _int(answer.get("pgid")))
        got = []
        if op == OP_ADOPT:
            sock.settimeout(None)
            result.sock = sock
            keep = True
        return result
    except (OSError, ValueError) as exc:
        raise ControlError(f"{type(exc).__name__}: {exc}") from None
    finally:
        for fd in got:
            with contextlib.suppress(OSError):
                os.close(fd)
        if not keep:
            sock.close()


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


async def forget_control(policy: AdoptPolicy | None, lease_id: str) -> None:
    """Remove the control socket file of a lease that ended (a wrapper killed by the reap
    leaves it behind; one that ended in order removed it itself)."""
    path = policy.path(lease_id) if policy is not None else None
    if path is not None:
        await asyncio.to_thread(_unlink, path)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class WrapperLink:
    """One wrapper's control channel as the channel uses it later: ``close_stdin``."""

    def __init__(self, policy: AdoptPolicy, lease_id: str, wrapper_pid: int) -> None:
        self._policy = policy
        self._lease_id = lease_id
        self._pid = wrapper_pid

    @classmethod
    def of(cls, policy: AdoptPolicy | None, lease_id: str, wrapper_pid: int) -> WrapperLink | None:
        """The link of a wrapper spawned under ``policy``; None without an adoption window."""
        return cls(policy, lease_id, wrapper_pid) if policy is not None and policy.enabled else None

    async def close_stdin(self) -> bool:
        """Ask the wrapper to let its copy of stdin go; False (logged) when it cannot."""
        path = self._policy.path(self._lease_id)
        if path is None:
            return False
        try:
            done = await asyncio.to_thread(exchange, path, self._policy.key(self._lease_id),
                                           self._lease_id, self._pid, OP_CLOSE_STDIN)
        except ControlError as exc:
            log.info("wrapper_close_stdin_failed", lease_id=self._lease_id, why=str(exc))
            return False
        done.close()
        return True
