"""The wrapper's control channel: how a restarted lifecycle service re-adopts a wrapper.

Standard library only: it is installed beside the wrapper (as ``wrapper_control.py``)
and loaded by it from there. The wrapper listens on a unix socket of its own,
``<lifecycle state dir>/run/<first 16 hex of the lease id>.sock``, in a directory only the
owner can enter (services/lifecycle/adapters/control_channel.py says where, when that path is too long).
Every connection is a short exchange of JSON lines (docs/contracts.md, "The wrapper
control channel"):

1. the wrapper checks the peer's uid (``SO_PEERCRED``: its own, else closed unanswered),
   then says ``hello`` with its lease id, instance id, PID and a fresh nonce;
2. the peer names one operation (``adopt`` or ``close_stdin``) with a nonce of its own
   and a proof: HMAC-SHA256 under the lease's adopt key over both nonces and the
   operation. The key is derived from the service credential and the lease id and was
   handed to the wrapper at spawn on a pipe (never in its argv or environment, so the
   adapter never has it);
3. a wrong proof is answered ``{"ok": false}`` and the connection closed; a right one
   is answered with the wrapper's own proof (so the peer knows it is the wrapper that
   holds the key) and, for ``adopt``, the service's ends of the adapter's pipes
   (``SCM_RIGHTS``). The adopting connection stays open: it is the wrapper's link to
   its new parent, and its EOF means that parent is gone (the adoption window opens
   again). The wrapper's reports (``exit``) go on it from then on.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
from collections.abc import Callable

PROTOCOL_VERSION = 1
OP_ADOPT = "adopt"
OP_CLOSE_STDIN = "close_stdin"
OPS = (OP_ADOPT, OP_CLOSE_STDIN)
#: The longest line either side sends or accepts.
MAX_MESSAGE_BYTES = 4096
#: How long one exchange may take before the wrapper drops the connection.
EXCHANGE_TIMEOUT_SECS = 1.0
#: How many connections wait to be accepted.
BACKLOG = 4
ROLE_SERVICE = "service"
ROLE_WRAPPER = "wrapper"


def proof(key: bytes, role: str, op: str, lease_id: str, nonce_w: str, nonce_s: str) -> str:
    """The HMAC-SHA256 (hex) one side shows: over its role, the operation, the lease id and
    both nonces, so that no answer can be replayed to another exchange."""
    msg = "\0".join((role, op, lease_id, nonce_w, nonce_s)).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def send_line(sock: socket.socket, message: dict[str, object], fds: list[int] | None = None) -> None:
    """One JSON line, with ``fds`` attached (``SCM_RIGHTS``) when there are any."""
    data = (json.dumps(message) + "\n").encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def recv_line(sock: socket.socket, want_fds: int = 0) -> tuple[dict[str, object], list[int]]:
    """One JSON line (and the descriptors that came with it); ValueError when it is not one."""
    data = b""
    fds: list[int] = []
    while not data.endswith(b"\n"):
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError("message too long")
        if want_fds and not fds:
            chunk, got, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE_BYTES, want_fds)
            fds.extend(got)
        else:
            chunk = sock.recv(MAX_MESSAGE_BYTES)
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    try:
        message = json.loads(data)
    except RecursionError:  # nested deeper than the parser goes: no message of ours
        raise ValueError("nested too deeply") from None
    if not isinstance(message, dict):
        raise ValueError("not an object")
    return message, fds


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the peer, as the kernel saw it connect."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


WAIT = "wait"
SUPERVISE = "supervise"
CLEANUP = "cleanup"


class AdoptionWindow:
    """When a wrapper whose parent is gone stops waiting for an adopter (the seed's
    cleanup then runs). Pure: the clock is passed in, so the same policy runs in the
    wrapper and in the simulated process table of the tests."""

    def __init__(self, secs: float, now: Callable[[], float]) -> None:
        self.secs = secs
        self._now = now
        #: When the parent (or the adopter) was found gone; None while one is there.
        self.orphaned_at: float | None = None

    def step(self, parent_alive: bool, adopted: bool) -> str:
        """:data:`SUPERVISE` while a parent or an adopter is there, :data:`WAIT` while the
        window runs, :data:`CLEANUP` once it is over (at once with no window)."""
        if parent_alive or adopted:
            self.orphaned_at = None
            return SUPERVISE
        if self.orphaned_at is None:
            self.orphaned_at = self._now()
        return WAIT if self._now() - self.orphaned_at < self.secs else CLEANUP


class Control:
    """The wrapper's side: the listening socket, the adopter's link, the held pipe ends."""

    def __init__(self, path: str, key: bytes, lease_id: str, instance_id: str,
                 stdin_fd: int, stdout_fd: int) -> None:
        self.path = path
        self._key = key
        self.lease_id = lease_id
        self.instance_id = instance_id
        #: The service's ends of the adapter's pipes, kept so that no death of the service
        #: closes them (-1 once let go).
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.listener: socket.socket | None = None
        #: The adopting service's connection (None: not adopted, or its adopter is gone).
        self.adopter: socket.socket | None = None
        #: Exchanges refused (wrong uid, wrong proof, bad message).
        self.refused = 0

    def listen(self) -> bool:
        """Bind and listen, owner-only; False (no control channel) when it cannot."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(self.path)
            finally:
                os.umask(old)
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            return False
        sock.setblocking(False)
        self.listener = sock
        return True

    def fds(self) -> list[int]:
        """The descriptors the wrapper's loop waits on."""
        return [s.fileno() for s in (self.listener, self.adopter) if s is not None]

    def on_ready(self, ready: list[int], status: Callable[[], dict[str, object]]) -> None:
        """Serve what ``select`` found ready: a connection to accept, or the adopter's
        link (anything on it is ignored; its EOF ends the adoption)."""
        adopter = self.adopter
        if adopter is not None and adopter.fileno() in ready:
            try:
                data = adopter.recv(MAX_MESSAGE_BYTES)
            except BlockingIOError:
                data = b"-"
            except OSError:
                data = b""
            if not data:
                adopter.close()
                self.adopter = None
        listener = self.listener
        if listener is not None and listener.fileno() in ready:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            self._exchange(conn, status)

    def _exchange(self, conn: socket.socket, status: Callable[[], dict[str, object]]) -> None:
        """One connection's exchange (module docstring); never raises."""
        keep = False
        try:
            conn.setblocking(True)
            conn.settimeout(EXCHANGE_TIMEOUT_SECS)
            _pid, uid, _gid = peer_credentials(conn)
            if uid != os.getuid():
                self.refused += 1
                return
            nonce_w = secrets.token_hex(16)
            send_line(conn, {"v": PROTOCOL_VERSION, "hello": "acpgate-wrapper",
                             "lease_id": self.lease_id, "instance_id": self.instance_id,
                             "pid": os.getpid(), "nonce": nonce_w})
            request, stray = recv_line(conn)
            for fd in stray:
                os.close(fd)
            op, nonce_s = request.get("op"), request.get("nonce")
            shown = request.get("proof")
            if (op not in OPS or not isinstance(nonce_s, str) or not isinstance(shown, str)
                    or not 16 <= len(nonce_s) <= 128
                    or not hmac.compare_digest(
                        shown, proof(self._key, ROLE_SERVICE, str(op), self.lease_id,
                                     nonce_w, nonce_s))):
                self.refused += 1
                send_line(conn, {"ok": False, "error": "refused"})
                return
            answer: dict[str, object] = {
                "ok": True, **status(),
                "proof": proof(self._key, ROLE_WRAPPER, str(op), self.lease_id, nonce_w, nonce_s),
            }
            if op == OP_CLOSE_STDIN:
                self.close_stdin()
                send_line(conn, answer)
                return
            held = [fd for fd in (self.stdin_fd, self.stdout_fd) if fd >= 0]
            answer["pipes"] = [name for name, fd in (("stdin", self.stdin_fd),
                                                     ("stdout", self.stdout_fd)) if fd >= 0]
            send_line(conn, answer, held)
            if self.adopter is not None:
                self.adopter.close()  # the last adopter with the key wins
            conn.setblocking(False)
            self.adopter = conn
            keep = True
        except (OSError, ValueError):
            self.refused += 1
        finally:
            if not keep:
                conn.close()

    def close_stdin(self) -> None:
        """Let the held copy of stdin's write end go (EOF, once no one else holds one)."""
        if self.stdin_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.stdin_fd)
            self.stdin_fd = -1

    def send_event(self, event: dict[str, object]) -> bool:
        """A report on the adopter's link; False when there is no adopter to take it."""
        if self.adopter is None:
            return False
        try:
            self.adopter.setblocking(True)
            self.adopter.settimeout(EXCHANGE_TIMEOUT_SECS)
            send_line(self.adopter, event)
            self.adopter.setblocking(False)
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Stop listening (the socket file goes) and let every held descriptor go."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.close_stdin()
        if self.stdout_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.stdout_fd)
            self.stdout_fd = -1


def open_control(adopt_secs: float, path: str, key_fd: int, hold_fds: tuple[int, int],
                 lease_id: str, instance_id: str) -> Control | None:
    """The control channel of a wrapper with an adoption window, listening; None without
    one (or when it cannot listen: the seed's immediate cleanup then). The adopt key is
    read from its pipe here; the held pipe ends are kept out of the adapter's exec."""
    key = b""
    if key_fd >= 0:
        with contextlib.suppress(OSError, ValueError):
            key = bytes.fromhex(os.read(key_fd, 256).decode("ascii", "replace").strip())
        with contextlib.suppress(OSError):
            os.close(key_fd)
    for fd in hold_fds:
        with contextlib.suppress(OSError):
            if fd >= 0:
                os.set_inheritable(fd, False)
    if adopt_secs <= 0 or not path or len(key) < 16:
        for fd in hold_fds:
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
        return None
    control = Control(path, key, lease_id, instance_id, *hold_fds)
    if not control.listen():
        control.close()
        return None
    return control
