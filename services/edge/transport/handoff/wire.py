"""The hand-over exchange between two edge workers of one host.

Each worker listens on its own unix socket, :func:`handoff_socket_path` (``0600``
in the install's private run dir; a peer of another uid is dropped unread,
``SO_PEERCRED``). A sibling sends one message per connection:

- a header line (JSON): the protocol version, the worker it comes from and the
  one it is for, how many bytes it had already read of the client
  (``pre_read``), a fresh nonce, and a proof — an HMAC over all of them under a
  key derived from the install's service credential (:func:`handoff_key`), so
  only siblings of this install can hand a connection in — with the client's
  socket attached (``SCM_RIGHTS``);
- then the ``pre_read`` bytes: the request head (and what followed it) that the
  owner parses as if it had read them itself.

The owner answers one line, :data:`ACCEPTED` or :data:`REFUSED`; until then the
sender keeps its copy of the socket, so a refusal or a dead owner is answered
503 with ``Retry-After`` by the sender, never left hanging.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["ACCEPTED", "HANDSHAKE_SECS", "MAX_HEADER_BYTES", "MAX_PRE_READ", "REFUSED",
           "HandoffHeader", "encode_header", "handoff_key", "handoff_socket_path",
           "header_proof", "parse_header"]

#: Version of the exchange.
HANDOFF_PROTOCOL: Final = 1
#: The header line is at most this long.
MAX_HEADER_BYTES: Final = 1024
#: The most bytes read of a client that travel with its socket (a head, a body's start).
MAX_PRE_READ: Final = 2 * 1024 * 1024
#: How long one exchange may take, either side.
HANDSHAKE_SECS: Final = 5.0
#: The owner's answers.
ACCEPTED: Final = b"ok\n"
REFUSED: Final = b"no\n"
#: The longest unix socket path the kernel takes (``sun_path`` less its NUL).
_MAX_SOCKET_PATH_BYTES: Final = 107
#: Domain separation: the key is never the credential itself, nor the fd channel's.
_KEY_LABEL: Final = b"acpgate/edge-handoff/v1"


def handoff_socket_path(run_dir: Path, worker: int) -> str | None:
    """Worker ``worker``'s hand-over socket in ``run_dir`` (None when the path is too long
    for a unix socket: then nothing is handed over)."""
    path = str(run_dir / f"edge-w{worker}.handoff.sock")
    return path if len(os.fsencode(path)) <= _MAX_SOCKET_PATH_BYTES else None


def handoff_key(credential: str) -> bytes:
    """The key hand-over proofs are made with, derived from the service credential."""
    return hmac.new(credential.encode(), _KEY_LABEL, hashlib.sha256).digest()


@dataclass(frozen=True)
class HandoffHeader:
    """What comes with a handed-over socket."""

    sender: int
    target: int
    pre_read: int
    nonce: str
    proof: str


def header_proof(key: bytes, sender: int, target: int, pre_read: int, nonce: str) -> str:
    """The proof that the sender holds the install's credential (hex)."""
    text = f"{HANDOFF_PROTOCOL}\n{sender}\n{target}\n{pre_read}\n{nonce}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def encode_header(key: bytes, sender: int, target: int, pre_read: int) -> bytes:
    """The header line for one hand-over, with a fresh nonce and its proof."""
    nonce = os.urandom(16).hex()
    body = {"v": HANDOFF_PROTOCOL, "from": sender, "to": target, "pre_read": pre_read,
            "nonce": nonce, "proof": header_proof(key, sender, target, pre_read, nonce)}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_header(raw: bytes, key: bytes, worker: int) -> HandoffHeader | None:
    """The header in ``raw`` when it is well formed, for ``worker`` and proven; else None."""
    if len(raw) > MAX_HEADER_BYTES or not raw.endswith(b"\n"):
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # nested deeper than the parser goes: no header
        return None
    if not isinstance(body, dict) or body.get("v") != HANDOFF_PROTOCOL:
        return None
    sender, target, pre_read = (_int(body.get(k)) for k in ("from", "to", "pre_read"))
    nonce, proof = body.get("nonce"), body.get("proof")
    if sender is None or target is None or pre_read is None or target != worker \
            or not 0 <= pre_read <= MAX_PRE_READ \
            or not isinstance(nonce, str) or not isinstance(proof, str):
        return None
    expected = header_proof(key, sender, target, pre_read, nonce)
    if not hmac.compare_digest(expected, proof):
        return None
    return HandoffHeader(sender, target, pre_read, nonce, proof)
