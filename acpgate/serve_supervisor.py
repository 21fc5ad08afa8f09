"""The children of ``acpgate serve`` under supervision: started in order, each service
healthy before the next, restarted with backoff when one exits, stopped in dependency
order (edge workers, then the lifecycle service, then the session service).

:class:`Supervisor` also takes and holds what the children run on (the serve lock, the
listening sockets, the lifecycle slot, the workers' board) and hands each child its
descriptors. :mod:`acpgate.serve` runs it; reload (:mod:`acpgate.serve_reload`) and a hot
restart's handover (:mod:`acpgate.serve_handover`) act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from acpgate.listen_flags import served_urls
from acpgate.serve_board import board_for, workers_serving
from acpgate.serve_children import ChildSpec, child_environment, child_specs
from acpgate.serve_lock import ServeLock, take_serve_lock
from acpgate.serve_replace import Takeover, request_takeover
from acpgate.serve_spawn import spawn_child
from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity, load_security, open_service_channel
from services.common.grpc_channel import wait_healthy
from services.common.listeners import bind_listeners
from services.common.logs import get_logger
from services.common.worker_board import WorkerBoard
from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.instance_slots import Slot, acquire_slot, slot_instance_id

__all__ = ["Supervisor", "SupervisorOptions"]

#: serve's logger: the children's story is serve's in the logs.
log = get_logger("serve")


@dataclass(frozen=True)
class SupervisorOptions:
    """Timing knobs (tests shorten them)."""

    #: First restart delay; doubles per consecutive crash up to ``backoff_max``.
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    #: A child that stayed up this long is considered stable: the backoff resets.
    stable_after: float = 30.0
    #: How long each child gets after SIGTERM before SIGKILL.
    stop_grace: float = 20.0
    #: How long to wait for a service's gRPC health at start.
    health_timeout: float = 60.0


@dataclass
class _Child:
    spec: ChildSpec
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0
    failures: int = 0
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Supervisor:
    """Starts, watches, restarts and stops the children (each edge worker on its own)."""

    def __init__(
        self,
        cfg: Config,
        *,
        python: str = sys.executable,
        environ: Mapping[str, str] | None = None,
        options: SupervisorOptions | None = None,
        specs: Sequence[ChildSpec] | None = None,
    ) -> None:
        self.cfg = cfg
        self.python = python
        self.env = child_environment(cfg, os.environ if environ is None else environ)
        self.options = options or SupervisorOptions()
        self.children = [_Child(spec) for spec in (specs or child_specs(cfg))]
        self.stopping = False
        #: The credential of the health checks' channels (read in :meth:`start`).
        self.security = GrpcSecurity()
        #: What the children run on, taken in :meth:`claim` and held until :meth:`stop`.
        self.lock: ServeLock | None = None
        self.listeners: list[socket.socket] = []
        self.slot: Slot | None = None
        #: The slot's gateway instance id: the host whose liveness the session service holds.
        self.instance_id = ""
        #: What each edge worker is doing (several workers only).
        self.board: WorkerBoard | None = None
        #: ``--replace``: take over from the running serve of the data dir, if one runs.
        self.replace = False
        self.takeover: Takeover | None = None

    def argv(self, spec: ChildSpec) -> list[str]:
        """``python -I -m acpgate <command> --config-dir <dir>`` and the descriptors it
        inherits (:meth:`handed`): isolated mode, so the directory serve was started from
        (a clone with an ``acpgate/`` of its own) and ``PYTHON*`` variables never decide
        which code runs."""
        return [self.python, "-I", "-m", "acpgate", spec.command,
                "--config-dir", str(self.cfg.config_dir), *self.handed(spec)[0]]

    def handed(self, spec: ChildSpec) -> tuple[list[str], list[int]]:
        """The options naming what ``spec``'s child inherits, and those descriptors: the
        serve lock (every child), the slot (the lifecycle service), the listening
        sockets (every edge worker: the kernel spreads the port's connections over the
        processes accepting on the one socket, and no other process can bind the port,
        as it could with ``SO_REUSEPORT``); an edge worker's number besides, and the
        session service's host instance id."""
        args: list[str] = []
        fds = [self.lock.fileno()] if self.lock is not None else []
        if spec.command == "session-service" and self.instance_id:
            args += ["--host-instance", self.instance_id]
        if spec.command == "lifecycle-service" and self.slot is not None:
            args += ["--slot-fd", str(self.slot.fileno())]
            fds.append(self.slot.fileno())
        if spec.command == "edge":
            if spec.worker:
                args += ["--worker", str(spec.worker)]
            if spec.worker and self.board is not None:
                args += ["--board-fd", str(self.board.fileno())]
                fds.append(self.board.fileno())
            for sock in self.listeners:
                args += ["--listen-fd", str(sock.fileno())]
                fds.append(sock.fileno())
        return args, fds

    async def claim(self) -> None:
        """Take what the children run on, or raise the ConfigError that says why not:
        the serve lock, the gateway port (bound), a lifecycle slot."""
        if self.replace:
            self.takeover = await request_takeover(self.cfg.data_dir, self.security.token)
        if self.takeover is not None:  # the old serve's own, never free in between
            lock, self.listeners, slot = await asyncio.to_thread(
                self.takeover.adopt, self.cfg.data_dir, self.cfg.lifecycle_state_dir)
        else:
            lock = await asyncio.to_thread(take_serve_lock, self.cfg.data_dir,
                                           self.cfg.gateway.port)
            self.lock = lock
            self.listeners = await asyncio.to_thread(bind_listeners, self.cfg.gateway.host,
                                                     self.cfg.gateway.port)
            slot = await asyncio.to_thread(acquire_slot, self.cfg.lifecycle_state_dir)
        self.lock, self.slot = lock, slot
        # The first line a person at the terminal needs: where to point a client.
        log.info("serving", **served_urls(self.cfg, self.port))
        self.instance_id = slot_instance_id(
            await load_or_create_instance_id(self.cfg.lifecycle_state_dir), slot.number)
        self.board = board_for([child.spec for child in self.children])
        log.info("serve_claimed", port=self.port, slot=slot.number, lock=str(lock.path),
                 took_over=self.takeover.old_pid if self.takeover is not None else None)

    @property
    def port(self) -> int:
        """The gateway port bound (``[gateway] port``, or the one port 0 picked)."""
        if self.listeners:
            return int(self.listeners[0].getsockname()[1])
        return self.cfg.gateway.port

    def release(self) -> None:
        """Let go of what :meth:`claim` took (the children that inherited it are gone)."""
        for sock in self.listeners:
            sock.close()
        self.listeners = []
        for held in (self.slot, self.lock, self.board):
            if held is not None:
                held.release()
        self.slot = self.lock = self.board = None

    async def _spawn(self, child: _Child) -> None:
        child.process = await spawn_child(self.python, self.argv(child.spec), self.env,
                                          self.handed(child.spec)[1])
        child.started_at = time.monotonic()
        log.info("child_started", child=child.spec.name, pid=child.process.pid,
                 restarts=child.restarts)

    async def _wait_healthy(self, child: _Child) -> bool:
        """Wait for a service child's gRPC health; False if it died first or timed out."""
        spec = child.spec
        if not spec.health_address:
            return True
        channel = open_service_channel(self.security, spec.health_address)
        try:
            assert child.process is not None
            health = asyncio.create_task(
                wait_healthy(channel, spec.health_service, within=self.options.health_timeout)
            )
            died = asyncio.create_task(child.process.wait())
            done, _ = await asyncio.wait({health, died}, return_when=asyncio.FIRST_COMPLETED)
            for task in (health, died):
                if task not in done:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            if health in done and health.exception() is None:
                log.info("child_healthy", child=spec.name, address=spec.health_address)
                return True
            log.error("child_unhealthy", child=spec.name,
                      reason="exited" if died in done else "health timeout")
            return False
        finally:
            await channel.close(None)

    async def start(self) -> bool:
        """Start every child in order, each service healthy before the next; False on failure.

        The install's service credential is read (made on the first start) before any
        child runs: the children then read the one key, never each a new one."""
        self.security = await load_security(self.cfg)
        await self.claim()
        workers = sum(1 for c in self.children if c.spec.worker)
        if workers:  # what several edges still cannot do (docs/operating.md, "Edge workers")
            log.warning("serve_edge_workers", workers=workers,
                        caveat="a WebSocket client without the affinity cookie is told to "
                               "reconnect to its session's worker (?worker=k); with TLS, "
                               "Streamable HTTP over HTTP/1.1 needs one worker")
        for child in self.children:
            if self.takeover is not None:  # the old serve's child of that kind must go first
                await self.takeover.before(child.spec.command)
            await self._spawn(child)
            if not await self._wait_healthy(child):
                return False
        await self.resume_restarts()
        if self.board is not None:
            await workers_serving(self.board, self.worker_pids, self.options.health_timeout)
        return True

    async def pause_restarts(self) -> None:
        """Restart no child that exits (a hot restart is stepping them down)."""
        for child in self.children:
            if child.task is not None:
                child.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await child.task
                child.task = None

    async def resume_restarts(self) -> None:
        """Start again, in order, each child that is not running, then watch them all."""
        for child in self.children:
            if self.stopping:
                return
            if child.process is not None and child.process.returncode is not None:
                await self._spawn(child)
                await self._wait_healthy(child)
            if child.task is None:
                child.task = asyncio.create_task(self._watch(child),
                                                 name=f"watch-{child.spec.name}")

    def worker_pids(self) -> dict[int, int]:
        """Edge worker number → the PID it runs as now."""
        return {c.spec.worker: c.process.pid for c in self.children
                if c.spec.worker and c.process is not None and c.process.returncode is None}

    async def _watch(self, child: _Child) -> None:
        """Restart ``child`` with backoff whenever it exits while serve is running."""
        while not self.stopping:
            assert child.process is not None
            code = await child.process.wait()
            if self.stopping:
                return
            if child.spec.worker and self.board is not None:
                self.board.clear(child.spec.worker)  # /healthz: not serving until its successor
            uptime = time.monotonic() - child.started_at
            if uptime >= self.options.stable_after:
                child.failures = 0
            delay = min(self.options.backoff_initial * (2 ** child.failures),
                        self.options.backoff_max)
            child.failures += 1
            child.restarts += 1
            log.warning("child_exited", child=child.spec.name, pid=child.process.pid,
                        exit_code=code, uptime_secs=round(uptime, 1), restart_in_secs=delay)
            await asyncio.sleep(delay)
            if self.stopping:
                return
            await self._spawn(child)

    async def _stop_child(self, child: _Child) -> None:
        proc = child.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.options.stop_grace)
        except TimeoutError:
            log.error("child_kill", child=child.spec.name, pid=proc.pid,
                      reason=f"no exit {self.options.stop_grace}s after SIGTERM")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        log.info("child_stopped", child=child.spec.name, pid=proc.pid, exit_code=proc.returncode)

    async def stop(self) -> None:
        """Stop in dependency order: the edge workers (together), lifecycle, session."""
        self.stopping = True
        for child in self.children:
            if child.task is not None:
                child.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await child.task
        edges = [c for c in self.children if c.spec.command == "edge"]
        await asyncio.gather(*(self._stop_child(child) for child in edges))
        for child in reversed(self.children):
            if child not in edges:
                await self._stop_child(child)
        self.release()
