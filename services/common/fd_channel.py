"""The lifecycle service's fd channel: an edge on the same host takes an adapter's pipes.

gRPC cannot carry file descriptors, so where the edge reaches the lifecycle
service over a unix socket (``[services] data_path = "auto"``, the default) the
lifecycle service also listens on a second unix socket beside it
(:func:`fd_socket_path`), over which it hands an attached edge the adapter's
stdin and stdout (``SCM_RIGHTS``): the adapter's updates then go adapter →
edge, not through the lifecycle process and a gRPC stream. The
``Attach`` stream stays the control channel (the open, the ensure, the exit
report with its stderr tail) and the whole data path where fds cannot pass.

One exchange per connection, each way one message:

- the edge sends :func:`encode_request`: the lease, its attach generation, the
  one-shot grant id the ``Attach`` stream's first response carried
  (``AttachResponse.fd_grant``), and a proof — an HMAC over all three under a
  key derived from the install's service credential (:func:`channel_key`), so
  a caller without the credential is refused even with a grant in hand;
- the lifecycle service answers :func:`encode_header` with the two pipe ends
  attached (stdin's write end, stdout's read end), then what it had read of
  stdout already and not delivered: ``lines`` bytes of whole lines, then
  ``partial`` bytes, the start of the next one; or a refusal, without
  descriptors.

The socket is the owner's alone (``0600``, in the install's private run dir);
the lifecycle service also refuses a peer of another uid (``SO_PEERCRED``).
Its address is never put in a child's environment or argv.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DATA_PATH_AUTO",
    "DATA_PATH_GRPC",
    "HANDSHAKE_SECS",
    "MAX_MESSAGE_BYTES",
    "FdGrantRequest",
    "FdHeader",
    "channel_key",
    "encode_header",
    "encode_request",
    "fd_socket_path",
    "grant_proof",
    "parse_header",
    "parse_request",
]

#: ``[services] data_path``: pipes over the fd channel where it can be reached, else gRPC.
DATA_PATH_AUTO = "auto"
#: ``[services] data_path``: always the ``Attach`` stream.
DATA_PATH_GRPC = "grpc"
#: The fd socket's name ends so (in place of the lifecycle socket's ``.sock``): still a
#: ``.sock`` that acpgate's stale socket-dir sweep knows.
FD_SOCKET_SUFFIX = ".fds.sock"
#: The longest unix socket path the kernel takes (``sun_path`` less its NUL).
MAX_SOCKET_PATH_BYTES = 107
#: The request, and the answer's header, are at most this long (one line of JSON).
MAX_MESSAGE_BYTES = 4096
#: How long one exchange may take, either side, before it is dropped.
HANDSHAKE_SECS = 5.0
#: Version of the exchange.
FD_PROTOCOL = 1
#: Domain separation: the channel's key is never the credential itself.
_KEY_LABEL = b"acpgate/fd-channel/v1"


def fd_socket_path(lifecycle_addr: str) -> str | None:
    """The fd socket of the lifecycle service at ``lifecycle_addr``: its unix socket's path
    with ``.fds.sock`` for ``.sock`` (``run/lifecycle.sock`` → ``run/lifecycle.fds.sock``);
    None for a TCP address, or when that path is too long for a socket."""
    if not lifecycle_addr.startswith("unix:"):
        return None
    path = lifecycle_addr.removeprefix("unix:").removeprefix("//")
    path = path.removesuffix(".sock") + FD_SOCKET_SUFFIX
    if not path.startswith("/") or len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        return None
    return path


def channel_key(credential: str) -> bytes:
    """The key grant proofs are made with, derived from the service credential."""
    return hmac.new(credential.encode(), _KEY_LABEL, hashlib.sha256).digest()


def grant_proof(key: bytes, lease_id: str, generation: int, grant_id: str) -> str:
    """The proof that whoever redeems ``grant_id`` holds the credential (hex)."""
    text = f"{FD_PROTOCOL}\n{lease_id}\n{generation}\n{grant_id}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class FdGrantRequest:
    """What an edge sends to redeem a grant."""

    lease_id: str
    generation: int
    grant_id: str
    proof: str


def encode_request(key: bytes, lease_id: str, generation: int, grant_id: str) -> bytes:
    """The edge's request line for one grant, with its proof."""
    body = {"v": FD_PROTOCOL, "lease_id": lease_id, "generation": generation,
            "grant": grant_id, "proof": grant_proof(key, lease_id, generation, grant_id)}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def _object(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_MESSAGE_BYTES or not raw.endswith(b"\n"):
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # nested deeper than the parser goes: no message
        return None
    return value if isinstance(value, dict) else None


def parse_request(raw: bytes) -> FdGrantRequest | None:
    """The request in ``raw`` (one line), or None when it is not a well-formed one."""
    body = _object(raw)
    if body is None or body.get("v") != FD_PROTOCOL:
        return None
    lease_id, generation = body.get("lease_id"), body.get("generation")
    grant_id, proof = body.get("grant"), body.get("proof")
    if not (isinstance(lease_id, str) and isinstance(grant_id, str) and isinstance(proof, str)
            and isinstance(generation, int) and not isinstance(generation, bool)):
        return None
    return FdGrantRequest(lease_id, generation, grant_id, proof)


@dataclass(frozen=True)
class FdHeader:
    """The lifecycle service's answer: the pipes come with it, or why not."""

    ok: bool
    #: Bytes of whole stdout lines (newline-terminated) that follow the header.
    lines: int = 0
    #: Bytes of the next line's start that follow those.
    partial: int = 0
    #: The pipe is inside an over-long line being dropped (up to its newline).
    dropping: bool = False
    #: Over-long stdout lines dropped and not reported yet.
    too_long: int = 0
    error: str = ""


def encode_header(header: FdHeader) -> bytes:
    """The answer's header line."""
    body: dict[str, Any] = {"v": FD_PROTOCOL, "ok": header.ok}
    if header.ok:
        body.update(lines=header.lines, partial=header.partial, dropping=header.dropping,
                    too_long=header.too_long)
    else:
        body["error"] = header.error
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def parse_header(raw: bytes) -> FdHeader | None:
    """The header in ``raw`` (one line), or None when it is not a well-formed one."""
    body = _object(raw)
    if body is None or body.get("v") != FD_PROTOCOL or not isinstance(body.get("ok"), bool):
        return None
    if not body["ok"]:
        return FdHeader(False, error=str(body.get("error", "refused")))
    counts = [body.get(key) for key in ("lines", "partial", "too_long")]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return None
    lines, partial, too_long = (int(n) for n in counts)  # type: ignore[arg-type]
    return FdHeader(True, lines, partial, bool(body.get("dropping")), too_long)
