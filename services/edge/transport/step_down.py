"""An edge that steps down for a hot restart: it goes, and its sessions live on.

``acpgate serve --replace`` (or SIGUSR2 to serve) hands the listening sockets to a new
serve and tells each old edge to step down (:data:`~services.common.signals.STEP_DOWN_SIGNAL`).
The edge then, in order:

1. accepts nothing more on its copies of the listening sockets: new connections wait
   in the kernel's queue for the successor;
2. stops reading every adapter's stdout for good (what it did not read stays in the pipe
   for the successor, which re-adopts the session) and lets what it read be delivered;
3. writes its event log (every event a client may not have seen is then in the store,
   for ``session/attach`` ``after_message``), and a note of the sessions whose turn runs
   for its successor (:mod:`services.edge.sessions.running_note`);
4. closes every WebSocket connection with :data:`CLOSE_SERVICE_RESTART` (1012, "service
   restart") and exits at once, 0, *without* closing a session: their leases stay open
   (``keep_on_loss``), their claims stay under this edge's name, which the successor
   bears. Streamable HTTP connections simply end (a client reconnects with its
   ``Last-Event-ID``).

Nothing here runs the connections' own endings (they would detach or release their
sessions): after step 3 the process leaves without yielding to the loop again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import TYPE_CHECKING, Final

from services.common.logs import get_logger
from services.common.signals import exit_now
from services.edge.adapter.pipes import hold_every_stdout
from services.edge.sessions.running_note import note_path, write_note

if TYPE_CHECKING:
    from websockets.asyncio.server import ServerConnection

    from services.edge.sessions.runtime import EdgeRuntime
    from services.edge.transport.ws_server import EdgeServer

__all__ = ["CLOSE_SERVICE_RESTART", "step_down"]

log = get_logger("edge.step_down")

#: WebSocket close code of a server restarting (RFC 6455 registry: "Service Restart").
CLOSE_SERVICE_RESTART: Final = 1012
CLOSE_REASON: Final = "service restart"
#: The longest the edge waits for what it read from adapters to be delivered.
SETTLE_SECS: Final = 5.0
#: The longest it waits for the event log's last batch.
FLUSH_SECS: Final = 10.0
_LOOK_SECS: Final = 0.01


async def step_down(server: EdgeServer, runtime: EdgeRuntime) -> None:
    """Stop accepting, hold every adapter's output, write the log, close the WebSockets
    with 1012 and exit 0 (never returns)."""
    doors = await server.stop_accepting()
    held = hold_every_stdout()
    for _ in range(int(SETTLE_SECS / _LOOK_SECS)):
        if all(pipes.settled for pipes in held):
            break
        await asyncio.sleep(_LOOK_SECS)
    written = await runtime.event_log.flush(FLUSH_SECS)
    name = runtime.gateway_instance_id
    if name:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(write_note, note_path(runtime.cfg.data_dir, name), name,
                                    list(runtime.event_log.running))
    connections = [ws for door in doors for ws in list(door.server.connections)]
    log.info("edge_stepped_down", adapters_held=len(held), log_written=written,
             websockets=len(connections))
    for ws in connections:
        _close_now(ws)
    exit_now(0)


def _close_now(ws: ServerConnection) -> None:
    """Send ``ws`` the 1012 close frame and end the sending side of its socket, here and
    now (its handler never runs again: the process exits next). What the client sent and
    nobody read is drained first, so the socket's close is a FIN, not a reset that could
    overtake the close frame."""
    with contextlib.suppress(Exception):
        ws.protocol.send_close(CLOSE_SERVICE_RESTART, CLOSE_REASON)
        ws.send_data()
        raw = ws.transport.get_extra_info("socket")
        if raw is None:
            return
        sock = socket.socket(fileno=os.dup(raw.fileno()))
        try:
            with contextlib.suppress(OSError):
                while sock.recv(65536, socket.MSG_DONTWAIT):
                    pass
            sock.shutdown(socket.SHUT_WR)
        finally:
            sock.close()
