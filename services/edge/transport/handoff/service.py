"""One edge worker's hand-over: its marks on connections, its socket, its sends.

:class:`Handoff` is what the gateway (``services.edge.transport.ws_server``) holds:
it mints the ``Acp-Connection-Id`` of this worker (:meth:`Handoff.new_id`), and
once the listeners serve (:meth:`Handoff.start`) takes connections in from its
siblings and hands theirs to them. It does nothing for a lone edge (no
``--worker``), and nothing over TLS: a TLS session cannot move to another process
(a TLS client negotiates HTTP/2 — one connection — anyway; see docs/operating.md, "Edge workers").
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from services.common.config import Config
from services.common.config.schema import worker_count
from services.common.grpc_auth import load_security
from services.common.logs import get_logger
from services.edge.sessions.worker_link import split_worker_name
from services.edge.transport.balance import Balancer
from services.edge.transport.exchange import HttpRequest
from services.edge.transport.handoff.adopt import adopt_connection
from services.edge.transport.handoff.owner import Ownership
from services.edge.transport.handoff.receiver import HandoffReceiver
from services.edge.transport.handoff.sender import HandoffSender
from services.edge.transport.handoff.wire import handoff_key, handoff_socket_path
from services.edge.transport.server import FrontDoor

__all__ = ["Handoff", "run_dir"]

log = get_logger("edge.handoff")


def run_dir(cfg: Config) -> Path:
    """The install's private run dir, where the workers' hand-over sockets are."""
    return Path(cfg.data_dir) / "run"


class Handoff:
    """This worker's hand-over (inert for a lone edge)."""

    def __init__(self, cfg: Config, runtime: Any, balancer: Balancer | None = None) -> None:
        self._cfg = cfg
        self._balancer = balancer  # counts the connections handed in
        link = getattr(runtime, "workers", None)
        self.ownership: Ownership | None = None
        if link is not None and link.worker:
            host, _ = split_worker_name(getattr(runtime, "gateway_instance_id", ""))
            count = worker_count(cfg.gateway.workers, os.cpu_count() or 1)
            self.ownership = Ownership(link.worker, count, host)
        self.sender: HandoffSender | None = None
        self.receiver: HandoffReceiver | None = None

    def new_id(self) -> str:
        """A new ``Acp-Connection-Id``: random, naming this worker when there are several."""
        random_part = str(uuid.uuid4())
        return self.ownership.connection_id(random_part) if self.ownership else random_part

    def owner(self, request: HttpRequest) -> int:
        """The sibling ``request`` belongs to, or 0 (see :mod:`.owner`)."""
        return self.ownership.owner(request) if self.ownership is not None else 0

    def hand(self, transport: asyncio.Transport, pre_read: bytes, target: int) -> None:
        """Give the connection to ``target`` (see :class:`HandoffSender`)."""
        assert self.sender is not None
        self.sender.hand(transport, pre_read, target)

    async def start(self, doors: Sequence[FrontDoor]) -> None:
        """Listen for siblings' connections and hand theirs over, from now on."""
        own = self.ownership
        if own is None or own.workers < 2 or not doors or self._cfg.gateway.tls.enabled:
            return
        security = await load_security(self._cfg)
        path = handoff_socket_path(run_dir(self._cfg), own.worker)
        if not security.token or path is None:
            log.warning("handoff_off", why="no service credential" if not security.token
                        else "the run dir's path is too long for a unix socket")
            return
        key = handoff_key(security.token)
        self.receiver = HandoffReceiver(path, key, own.worker,
                                        partial(adopt_connection, doors[0].wiring,
                                                track=self._balancer.track if self._balancer else None))
        await self.receiver.start()
        self.sender = HandoffSender(run_dir(self._cfg), own.worker, key)
        for door in doors:
            door.wiring.handoff = self

    async def close(self) -> None:
        """Hand nothing more over, take nothing more in."""
        if self.receiver is not None:
            await self.receiver.close()
        if self.sender is not None:
            await self.sender.close()
