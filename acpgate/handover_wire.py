"""The hot restart's wire: how a new ``acpgate serve --replace`` and the running serve
of its data dir talk over ``<data dir>/run/serve.handover.sock``.

The socket is the owner's alone (``0600`` in the private run dir) and the running serve
answers only a peer of its own uid (``SO_PEERCRED``). One exchange per connection, JSON
lines of at most :data:`MAX_MESSAGE_BYTES`, strictly in turn:

1. old → new: ``{"v":1,"hello":"acpgate-serve","pid","nonce"}``;
2. new → old: ``{"op":"replace","pid","nonce","proof"}``, ``proof`` =
   ``HMAC-SHA256(key, "replace\\0" nonce_old "\\0" nonce_new)`` hex, with ``key`` =
   ``HMAC-SHA256(credential, "acpgate serve handover key v1")`` — the install's service
   credential, so a caller without it makes the serve neither hand anything over nor
   step down; a wrong proof gets ``{"ok":false,"error":"refused"}``;
3. old → new: ``{"ok":true,"proof","port","fds":[kinds]}`` with the descriptors
   (``SCM_RIGHTS``) — the serve lock, the instance slot, every listening socket —
   ``proof`` = ``HMAC(key, "serve\\0" nonce_old "\\0" nonce_new)`` (the new serve trusts
   no descriptor from anything else);
4. old → new: ``{"step":"services_down"}`` once its edges stepped down (sessions kept)
   and its session service stopped;
5. new → old: ``{"op":"lifecycle"}`` once its own session service serves;
6. old → new: ``{"step":"done"}`` once its lifecycle service stepped down (wrappers kept,
   waiting to be adopted); the old serve then exits 0.

Any other turn of events ends the exchange; the old serve then serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any, Final

from services.common.fd_sockets import recv_fds

__all__ = ["HANDOVER_SOCKET_NAME", "MAX_MESSAGE_BYTES", "Channel", "HandoverError",
           "handover_key", "handover_path", "new_nonce", "proof"]

HANDOVER_SOCKET_NAME: Final = "serve.handover.sock"
MAX_MESSAGE_BYTES: Final = 4096
#: The most descriptors one message carries (lock, slot, a few listening sockets).
MAX_FDS: Final = 16
VERSION: Final = 1
HELLO: Final = "acpgate-serve"
_KEY_LABEL: Final = b"acpgate serve handover key v1"


class HandoverError(Exception):
    """The exchange broke (a peer's refusal, a malformed message, a closed socket)."""


def handover_path(data_dir: Path) -> Path:
    """``<data dir>/run/serve.handover.sock``."""
    return data_dir / "run" / HANDOVER_SOCKET_NAME


def handover_key(credential: str) -> bytes:
    """The exchange's key, derived from the install's service credential."""
    return hmac.new(credential.encode(), _KEY_LABEL, hashlib.sha256).digest()


def proof(key: bytes, role: str, nonce_old: str, nonce_new: str) -> str:
    """``role``'s proof over both nonces (``replace`` for the new serve, ``serve`` for the
    old)."""
    text = "\0".join((role, nonce_old, nonce_new)).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def new_nonce() -> str:
    """A fresh nonce (hex)."""
    return secrets.token_hex(16)


class Channel:
    """One handover connection: JSON lines each way, descriptors with a line."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._buffer = b""
        self._fds: list[int] = []

    async def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        """Send ``message`` (and ``fds`` with its first byte)."""
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        if fds:
            sent = socket.send_fds(self.sock, [data], fds)
            data = data[sent:]
        if data:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def recv(self, within: float) -> tuple[dict[str, Any], list[int]]:
        """The next message and the descriptors that came with it (the caller owns
        them), within ``within`` seconds; HandoverError on EOF, a malformed or an
        over-long line."""
        async with asyncio.timeout(within):
            while b"\n" not in self._buffer:
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    raise HandoverError("message too long")
                data, fds = await recv_fds(self.sock, MAX_MESSAGE_BYTES, MAX_FDS)
                self._fds += fds
                if not data:
                    raise HandoverError("the other serve closed the connection")
                self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        fds, self._fds = self._fds, []
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # nested deeper than the parser goes
            message = None
        if not isinstance(message, dict):
            close_fds(fds)
            raise HandoverError("malformed message")
        return message, fds

    def close(self) -> None:
        """Close the connection and any descriptor received and not taken."""
        close_fds(self._fds)
        self._fds = []
        self.sock.close()


def close_fds(fds: list[int]) -> None:
    """Close each of ``fds`` (errors ignored)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
