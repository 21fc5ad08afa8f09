"""The running serve's side of a hot restart: hand everything to a new serve, step down.

While ``acpgate serve`` runs it listens on ``<data dir>/run/serve.handover.sock``
(:mod:`acpgate.handover_wire`). A new ``acpgate serve --replace`` of the same install
connects; once it has proved it holds the service credential, this serve:

1. hands it the serve lock, the instance slot and the listening sockets (the same open
   files: the lock and the slot are never free in between, and the port never refuses a
   connection — the kernel queues them for whoever accepts next);
2. stops restarting children, and has each edge step down (it accepts nothing more,
   writes its event log, closes its WebSockets with 1012 and exits leaving its sessions
   running, their leases kept by the lifecycle service), then stops the session service;
3. once the new serve's session service serves, has the lifecycle service step down
   (every lease left open, every wrapper running and waiting for the adopter);
4. says so and exits 0 — the new serve's lifecycle service takes the same slot and adopts
   the wrappers, its edges bear the same names and re-adopt the sessions.

A new serve that goes away before the end (or answers wrongly) leaves this serve serving:
what it stopped is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import signal
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from acpgate.handover_wire import (
    HELLO,
    VERSION,
    Channel,
    HandoverError,
    handover_key,
    handover_path,
    new_nonce,
    proof,
)
from services.common.fd_sockets import FdSocketListener, peer_uid
from services.common.logs import get_logger
from services.common.signals import STEP_DOWN_SIGNAL

if TYPE_CHECKING:
    from acpgate.serve_supervisor import Supervisor, _Child

__all__ = ["HandoverServer"]

log = get_logger("serve.handover")

#: How long each step of the new serve may take (its hello; its session service's start).
HELLO_SECS: Final = 5.0
STEP_SECS: Final = 120.0


class HandoverServer:
    """Serves the handover socket of ``supervisor``'s data dir; ``replaced`` is called
    once a new serve took everything over (this serve should then exit 0)."""

    def __init__(self, supervisor: Supervisor, credential: str,
                 replaced: Callable[[], None]) -> None:
        self.supervisor = supervisor
        self._key = handover_key(credential)
        self._replaced = replaced
        self._busy = False
        self._file: os.stat_result | None = None
        path = handover_path(supervisor.cfg.data_dir)
        self._listener = FdSocketListener(str(path), self._serve, name="serve-handover")

    async def start(self) -> None:
        """Listen (owner-only)."""
        await self._listener.start()
        self._file = os.stat(self._listener.path)

    async def close(self) -> None:
        """Stop listening; an exchange under way is dropped. The socket file goes only
        while it is this serve's (after a handover the path may be the new serve's)."""
        await self._listener.close(unlink=False)
        with contextlib.suppress(OSError):
            now = os.stat(self._listener.path)
            if self._file is not None and (now.st_dev, now.st_ino) == \
                    (self._file.st_dev, self._file.st_ino):
                os.unlink(self._listener.path)

    async def _serve(self, conn: socket.socket) -> None:
        channel = Channel(conn)
        try:
            if peer_uid(conn) != os.getuid():
                log.warning("handover_refused", why="another uid")
                return
            peer = await self._authenticate(channel)
            if peer is None:
                return
            self._busy = True
            try:
                await self._hand_over(channel, peer)
            finally:
                self._busy = False
        except (HandoverError, OSError, TimeoutError) as exc:
            log.warning("handover_broken", why=str(exc) or type(exc).__name__)
        finally:
            channel.close()

    async def _authenticate(self, channel: Channel) -> dict[str, Any] | None:
        """The new serve's request, checked; None (after saying why) when refused."""
        nonce = new_nonce()
        await channel.send({"v": VERSION, "hello": HELLO, "pid": os.getpid(), "nonce": nonce})
        request, fds = await channel.recv(HELLO_SECS)
        for fd in fds:  # nothing is taken from the new serve
            os.close(fd)
        theirs = request.get("nonce")
        given = request.get("proof")
        if request.get("op") != "replace" or not isinstance(theirs, str) \
                or not isinstance(given, str) \
                or not hmac.compare_digest(given, proof(self._key, "replace", nonce, theirs)):
            log.warning("handover_refused", why="no proof of the service credential")
            await channel.send({"ok": False, "error": "refused"})
            return None
        if self._busy or self.supervisor.stopping:
            await channel.send({"ok": False, "error": "busy"})
            return None
        return {"nonce": nonce, "theirs": theirs, "pid": request.get("pid")}

    async def _hand_over(self, channel: Channel, peer: dict[str, Any]) -> None:
        sup = self.supervisor
        if sup.lock is None or sup.slot is None or not sup.listeners:
            await channel.send({"ok": False, "error": "not serving"})
            return
        log.info("handover_started", successor=peer["pid"], port=sup.port)

        fds = [sup.lock.fileno(), sup.slot.fileno(), *(s.fileno() for s in sup.listeners)]
        kinds = ["lock", "slot", *(["listen"] * len(sup.listeners))]
        await channel.send({"ok": True, "proof": proof(self._key, "serve", peer["nonce"],
                                                       peer["theirs"]),
                            "port": sup.port, "fds": kinds}, fds)
        await sup.pause_restarts()
        done = False
        try:
            edges = [c for c in sup.children if c.spec.command == "edge"]
            await asyncio.gather(*(self._step_down(c, STEP_DOWN_SIGNAL) for c in edges))
            for child in sup.children:
                if child.spec.command == "session-service":
                    await self._step_down(child, signal.SIGTERM)
            await channel.send({"step": "services_down"})
            request, fds = await channel.recv(STEP_SECS)
            for fd in fds:
                os.close(fd)
            if request.get("op") != "lifecycle":
                raise HandoverError("expected the lifecycle step")
            for child in sup.children:
                if child.spec.command == "lifecycle-service":
                    await self._step_down(child, STEP_DOWN_SIGNAL)
            await channel.send({"step": "done"})
            done = True
            log.info("handover_done", successor=peer["pid"])
            self._replaced()
        finally:
            if not done:
                log.warning("handover_abandoned", successor=peer["pid"],
                            action="restarting what stepped down")
                await sup.resume_restarts()

    async def _step_down(self, child: _Child, sig: int) -> None:
        """Send ``child`` ``sig`` and wait for its exit (SIGKILL after the stop grace)."""
        proc = child.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), self.supervisor.options.stop_grace)
        except TimeoutError:
            log.error("child_kill", child=child.spec.name, pid=proc.pid,
                      reason="no exit after the step-down signal")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        log.info("child_stepped_down", child=child.spec.name, pid=proc.pid,
                 exit_code=proc.returncode)
