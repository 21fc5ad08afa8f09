"""The edge connection API: what the stdio front door, the WebSocket gateway,
the bridge tests and the benchmarks call (docs/contracts.md).

```python
runtime = await open_runtime(cfg)              # connects, or starts embedded services
await serve_connection(runtime, incoming, send, default_agent="")
await runtime.close()                          # closes every session, stops embedded services
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from services.common.logs import get_logger
from services.edge.dialect import DialectConnection
from services.edge.metrics import Metrics
from services.edge.runtime import EdgeRuntime, open_runtime

__all__ = ["EdgeRuntime", "Metrics", "open_runtime", "serve_connection"]

log = get_logger("edge.connection")


async def serve_connection(
    runtime: EdgeRuntime,
    incoming: AsyncIterator[str],
    send: Callable[[str], Awaitable[None]],
    *,
    default_agent: str = "",
) -> None:
    """Serve one client connection until ``incoming`` ends.

    ``incoming`` yields one JSON-RPC message per item (a stdio line or a
    WebSocket text frame); ``send`` writes one message. ``default_agent`` is the
    connection default alias (the WebSocket URL's ``?agent=``; blank = none).
    When ``incoming`` ends (EOF, disconnect) the connection's pending
    back-channel requests fail as "client gone" and its sessions are released
    (adapters closed through the lifecycle service, stored rows kept). Requests
    still running are given a moment to finish, then cancelled.
    """
    conn = DialectConnection(runtime, send, default_agent=default_agent)
    try:
        async for line in incoming:
            conn.feed(line)
    finally:
        await conn.close()
