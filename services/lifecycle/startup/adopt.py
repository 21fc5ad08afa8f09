"""Re-adopting the live wrappers an earlier run of this slot left (a lifecycle service that
was killed and restarted within its wrappers' adoption window).

At start, before any orphan reap, each open lease of this slot whose root is alive is
verified like a reap (:func:`services.lifecycle.processes.verify.verify_owned_tree`: lease id,
instance id, wrapper root, birth identity, command hash, interpreter, environment and
group), then its wrapper is asked to ``adopt`` over its control channel
(:mod:`services.lifecycle.adapters.control_channel`): the peer must be the lease's root PID and prove the
lease's key. The wrapper hands back the service's ends of the adapter's pipes and keeps
the connection as its link to this service. The lease stays open and gets a channel as
a spawn of this run would: the exit is watched (the wrapper's report on the link, and a
pidfd for its end, since it is not this service's child), and a wrapper that dies is
reaped as any. Stdout is not read until an attacher relays over the stream: an edge
may hold the pipes and go on reading them itself.

A lease that cannot be adopted is left to the orphan reap that follows, as before; one
adopted that no attacher re-attaches to in :data:`REATTACH_WAIT_SECS` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import TYPE_CHECKING

from services.common.logs import get_logger
from services.lifecycle.adapters.control_channel import (
    AdoptPolicy,
    ControlError,
    Exchanged,
    exchange,
)
from services.lifecycle.adapters.spawn import stderr_log_path
from services.lifecycle.attach.channel import AdapterChannel, StartReport
from services.lifecycle.leases.store import LeaseRecord, LeaseState
from services.lifecycle.processes.snapshot import ProcSnapshot
from services.lifecycle.processes.verify import verify_owned_tree
from services.lifecycle.wrapper.control import OP_ADOPT

if TYPE_CHECKING:  # the controller calls in here; this module only reads it
    from services.lifecycle.controller import LifecycleController

__all__ = ["AdoptedProcess", "adopt_at_start"]

log = get_logger("lifecycle.adopt")

#: The exit code a channel records for an adopted wrapper that ended without a report
#: (not this service's child: its real status is its new parent's to read).
UNREPORTED_EXIT = 255
#: How long an adopted lease waits for an attacher (the edge re-attaches within 20 s of the
#: restart); one nobody attaches to had its edge die too, and is closed ("not-reattached").
REATTACH_WAIT_SECS = 30.0


class AdoptedProcess:
    """A re-adopted wrapper as its channel watches it: its end through a pidfd (exact even
    if its PID is reused later), signals through the same pidfd."""

    def __init__(self, pid: int, pidfd: int, link: asyncio.StreamWriter) -> None:
        self.pid = pid
        self._pidfd = pidfd
        #: The control connection's writer: kept, so the link stays open while we live.
        self.link = link
        self.returncode: int | None = None

    async def wait(self) -> int:
        """Until the wrapper is gone."""
        if self.returncode is None:
            loop = asyncio.get_running_loop()
            gone = loop.create_future()
            loop.add_reader(self._pidfd, _settle, gone)
            try:
                await gone
            finally:
                loop.remove_reader(self._pidfd)
                with contextlib.suppress(OSError):
                    os.close(self._pidfd)
            self.returncode = UNREPORTED_EXIT
        return self.returncode

    def _send(self, sig: int) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        """SIGTERM (the wrapper then stops its adapter group)."""
        self._send(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self._send(signal.SIGKILL)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


#: The waits of :func:`_close_unless_attached` under way (held, so none is collected).
_WAITS: set[asyncio.Task[None]] = set()


async def _close_unless_attached(controller: LifecycleController, channel: AdapterChannel) -> None:
    """Close a re-adopted lease nobody attached to within :data:`REATTACH_WAIT_SECS`."""
    await asyncio.sleep(REATTACH_WAIT_SECS)
    if channel.generation == 0 and controller.channels.get(channel.lease_id) is channel:
        log.warning("adopted_lease_not_reattached", lease_id=channel.lease_id)
        controller.close_later(channel.lease_id, "not-reattached")


async def adopt_at_start(controller: LifecycleController) -> list[str]:
    """Re-adopt this slot's live wrappers (module docstring); the lease ids adopted."""
    policy = controller.adoption
    if policy is None or not policy.enabled:
        return []
    leases = [lease for lease in await controller.store.list(
        states=[LeaseState.OPEN], instance_id=controller.instance_id)
        if not lease.pending and lease.root_pid > 1]
    if not leases:
        return []
    try:
        snap = ProcSnapshot(await controller.table.list_all())
    except Exception as exc:  # nothing verifiable: every lease is left to the reap
        log.warning("adopt_listing_failed", why=f"{type(exc).__name__}: {exc}")
        return []
    done = await asyncio.gather(*(adopt_one(controller, policy, lease, snap) for lease in leases))
    adopted = [lease.lease_id for lease, ok in zip(leases, done, strict=True) if ok]
    log.info("wrappers_adopted", instance_id=controller.instance_id, adopted=len(adopted),
             open_leases=len(leases))
    return adopted


async def adopt_one(controller: LifecycleController, policy: AdoptPolicy, lease: LeaseRecord,
                    snap: ProcSnapshot) -> bool:
    """Verify, then adopt one lease's wrapper; False (logged) when it is not adoptable."""
    lease_id, path = lease.lease_id, policy.path(lease.lease_id)
    if path is None:
        return False
    try:  # taken first: whatever the checks below see, the pidfd is that process's
        pidfd = os.pidfd_open(lease.root_pid)
    except OSError:
        return False
    got: Exchanged | None = None
    try:
        verdict = await verify_owned_tree(lease, controller.table, controller.owner, snap)
        if not verdict.verified or verdict.root_gone:
            raise ControlError(f"not verified: {verdict.reason}")
        got = await asyncio.to_thread(exchange, path, policy.key(lease_id), lease_id,
                                      lease.root_pid, OP_ADOPT)
        if got.stdout < 0 or got.sock is None:
            raise ControlError("the wrapper holds no stdout to hand back")
        stdin = got.stdin
        if stdin < 0:  # its stdin was closed already: a write end that is closed at once
            read_end, stdin = os.pipe()
            os.close(read_end)
        reader, writer = await asyncio.open_unix_connection(sock=got.sock)
    except Exception as exc:  # left to the orphan reap that follows
        log.info("wrapper_not_adopted", lease_id=lease_id, why=f"{type(exc).__name__}: {exc}")
        os.close(pidfd)
        if got is not None:
            got.close()
        return False
    process = AdoptedProcess(lease.root_pid, pidfd, writer)
    channel = AdapterChannel(lease_id, process, reader, stderr_log_path(controller.state_dir, lease_id),
                             stdin_fd=stdin, stdout_fd=got.stdout, stdout_handed=True,
                             control=controller.control_for(lease_id, lease.root_pid))
    channel.started.set_result(StartReport(got.adapter_pid or lease.adapter_pid,
                                           got.pgid or lease.process_group_id or 0))
    if got.stdin < 0:
        await channel.close_stdin()
    controller.channels[lease_id] = channel
    controller.watch(channel)
    (task := asyncio.create_task(_close_unless_attached(controller, channel))).add_done_callback(
        _WAITS.discard)
    _WAITS.add(task)
    log.info("wrapper_adopted", lease_id=lease_id, root_pid=lease.root_pid)
    return True
