"""The new serve's side of a hot restart (``acpgate serve --replace``).

:func:`request_takeover` finds the running serve of the data dir by its handover socket
(:mod:`acpgate.handover_wire`), proves it holds the install's service credential, checks
the running serve's proof in return, and receives the serve lock, the instance slot and
the listening sockets. The :class:`Takeover` then paces this serve's start: its session
service starts once the old one is gone (:meth:`Takeover.before` for ``session-service``),
its lifecycle service once the old one stepped down (for ``lifecycle-service``) — so the
wrappers wait the shortest time for their adopter. No serve running there: None, and
this serve starts as any would.

Blocking socket calls stay off the loop (the exchange is asyncio throughout).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from acpgate.handover_wire import (
    HELLO,
    Channel,
    HandoverError,
    close_fds,
    handover_key,
    handover_path,
    new_nonce,
    proof,
)
from acpgate.serve_lock import ServeLock, adopt_serve_lock
from services.common.config import ConfigError
from services.common.listeners import adopt_listeners
from services.common.logs import get_logger
from services.lifecycle.leases.instance_slots import Slot, adopt_slot

__all__ = ["Takeover", "TakeoverRefused", "request_takeover", "start_successor"]

log = get_logger("serve.replace")

HELLO_SECS: Final = 5.0
#: The old serve's edges write their logs and exit, its session service stops: bounded by
#: its children's stop grace (20 s each by default), with room.
STEP_SECS: Final = 120.0


class TakeoverRefused(ConfigError):
    """The running serve refused the hot restart, or the exchange broke (one line: exit 2)."""


@dataclass
class Takeover:
    """What the old serve handed over, and the rest of the exchange."""

    channel: Channel
    old_pid: int
    port: int
    lock_fd: int
    slot_fd: int
    listen_fds: list[int] = field(default_factory=list)
    _services_down: bool = False

    async def before(self, command: str) -> None:
        """Wait for what must be gone before this serve starts ``command``'s child."""
        if command == "session-service" and not self._services_down:
            await self._expect("services_down")
            self._services_down = True
        elif command == "lifecycle-service":
            await self.channel.send({"op": "lifecycle"})
            await self._expect("done")
            self.channel.close()
            log.info("serve_took_over", replaced=self.old_pid, port=self.port)

    async def _expect(self, step: str) -> None:
        message, fds = await self.channel.recv(STEP_SECS)
        close_fds(fds)
        if message.get("step") != step:
            raise TakeoverRefused(f"the serve being replaced (pid {self.old_pid}) broke off "
                                  f"the hot restart: {message.get('error') or message}")

    def adopt(self, data_dir: Path, state_dir: Path) -> tuple[ServeLock, list[socket.socket],
                                                               Slot]:
        """The serve lock, the listening sockets and the slot handed over, checked and
        held by this serve (blocking: run off the loop)."""
        fds, self.lock_fd, self.slot_fd, self.listen_fds = \
            [self.lock_fd, self.slot_fd, *self.listen_fds], -1, -1, []
        lock = adopt_serve_lock(data_dir, fds[0], self.port)
        try:
            listeners = adopt_listeners(fds[2:])
            return lock, listeners, adopt_slot(state_dir, fds[1])
        except BaseException:
            lock.release()
            raise

    def close(self) -> None:
        """End the exchange (the old serve, if not done, serves on)."""
        self.channel.close()
        close_fds([fd for fd in (self.lock_fd, self.slot_fd, *self.listen_fds) if fd >= 0])
        self.lock_fd = self.slot_fd = -1
        self.listen_fds = []


async def request_takeover(data_dir: Path, credential: str) -> Takeover | None:
    """The running serve's handover, or None when no serve runs on ``data_dir``;
    TakeoverRefused when one runs and refuses (or the exchange breaks)."""
    path = handover_path(data_dir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        raise TakeoverRefused(f"cannot reach the running serve at {path}: {exc}") from None
    channel = Channel(sock)
    try:
        return await _exchange(channel, credential)
    except (HandoverError, OSError, TimeoutError) as exc:
        channel.close()
        raise TakeoverRefused(f"the hot restart failed: {exc or type(exc).__name__}") from None
    except BaseException:
        channel.close()
        raise


async def _exchange(channel: Channel, credential: str) -> Takeover:
    key = handover_key(credential)
    hello, fds = await channel.recv(HELLO_SECS)
    close_fds(fds)
    theirs, old_pid = hello.get("nonce"), hello.get("pid")
    if hello.get("hello") != HELLO or not isinstance(theirs, str) or not isinstance(old_pid, int):
        raise HandoverError("not an acpgate serve's handover socket")
    nonce = new_nonce()
    await channel.send({"op": "replace", "pid": os.getpid(), "nonce": nonce,
                        "proof": proof(key, "replace", theirs, nonce)})
    answer, fds = await channel.recv(HELLO_SECS)
    kinds = answer.get("fds")
    given = answer.get("proof")
    if answer.get("ok") is not True or not isinstance(given, str) \
            or not hmac.compare_digest(given, proof(key, "serve", theirs, nonce)) \
            or not isinstance(kinds, list) or len(kinds) != len(fds) \
            or kinds[:2] != ["lock", "slot"] or set(kinds[2:]) != {"listen"} \
            or not isinstance(answer.get("port"), int):
        close_fds(fds)
        why = answer.get("error") if answer.get("ok") is False else "an unexpected answer"
        raise TakeoverRefused(f"acpgate serve (pid {old_pid}) refused the hot restart: {why}")
    log.info("serve_taking_over", replacing=old_pid, port=answer["port"])
    with contextlib.suppress(Exception):
        for fd in fds:
            os.set_inheritable(fd, False)
    return Takeover(channel, old_pid, answer["port"], fds[0], fds[1], fds[2:])


def start_successor() -> None:
    """SIGUSR2: start ``serve --replace`` with this serve's own command line, in a session
    of its own (it outlives this serve, which it replaces); its output goes where this
    serve's goes."""
    argv = [sys.executable, *sys.orig_argv[1:]]
    if "--replace" not in argv:
        argv.append("--replace")
    task = asyncio.get_running_loop().create_task(_start(argv))
    _STARTING.add(task)
    task.add_done_callback(_STARTING.discard)


#: Successors being started (held so that their tasks are not collected midway).
_STARTING: set[asyncio.Task[None]] = set()


async def _start(argv: list[str]) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        log.error("serve_successor_failed", why=str(exc))
        return
    log.info("serve_successor_started", pid=proc.pid)
