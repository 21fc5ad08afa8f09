"""A Streamable HTTP connection becomes the edge's ordinary client connection.

:func:`run_dialect` runs ``serve_connection`` over a :class:`StreamableConnection`
exactly as the WebSocket gateway runs it over a socket: the same dialect, the
connection's caller (its token's principal), ``remote`` (gateway client rules),
the revocation signal and the gateway's stop. :func:`session_lookup` answers the
one question the RFD makes the transport ask the store — may this caller name
that session (``Acp-Session-Id`` of a session the connection has not seen yet,
as a client sends before ``session/load``)? — with the same visibility rule as
``session/load``: another token's session is unknown. :func:`affinity_cookie`
is the cookie a load balancer keeps a reconnecting client on this host with.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.remote_transport import AFFINITY_COOKIE
from services.edge.caller import Caller
from services.edge.sessions.log_replay import read_log_lines
from services.edge.sessions.worker_link import split_worker_name
from services.edge.transport.handoff.owner import cookie_value
from services.edge.transport.streamable.connection import StreamableConnection

__all__ = ["affinity_cookie", "log_reader", "run_dialect", "session_lookup"]


async def run_dialect(conn: StreamableConnection, agent: str, *, runtime: Any,
                      serve_connection: Callable[..., Awaitable[None]],
                      revoked: asyncio.Event, stopping: asyncio.Event,
                      flush_secs: float) -> None:
    """Serve ``conn`` until it closes; a stopping gateway's last answers are written first."""
    await serve_connection(runtime, conn.frames(), conn.send, default_agent=agent,
                           caller=conn.caller, remote=True, send_many=conn.send_many,
                           revoked=revoked, stopping=stopping)
    if stopping.is_set():
        await conn.flush(flush_secs)
        conn.close("gateway stopping")


def session_lookup(runtime: Any) -> Callable[[Caller, str], Awaitable[bool]]:
    """True when ``caller`` may load, resume or delete the stored session ``sid``."""

    async def knows(caller: Caller, sid: str) -> bool:
        from services.edge.dialect.visibility import visible_row

        try:
            await visible_row(runtime, caller, sid)
        except JsonRpcError:
            return False
        return True

    return knows


def log_reader(runtime: Any) -> Callable[[str, int, int], AsyncIterator[list[str]]]:
    """What fills a session stream's gap: the session's log between two event ids (the
    caller may reach the session: its stream exists)."""
    return partial(read_log_lines, runtime)


def affinity_cookie(instance_id: str, *, tls: bool) -> str:
    """``Set-Cookie`` value naming this host (a digest of its instance id, or a random id)
    and, with several edge workers, the worker (``-w<k>``):
    cross-site pages may send it over TLS only (SameSite=None needs Secure)."""
    value = cookie_value(*split_worker_name(instance_id)) if instance_id \
        else secrets.token_hex(8)
    attrs = "; Secure; SameSite=None" if tls else "; SameSite=Lax"
    return f"{AFFINITY_COOKIE}={value}; Path=/; HttpOnly{attrs}"
