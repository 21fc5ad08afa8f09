"""Which hosts are alive, from PostgreSQL itself: one session-level advisory lock per host.

Several hosts share one store; a claim says which host serves a session. Whether
that host still lives is not judged by the clock alone: every session service
holds, on one dedicated connection kept open for its whole life
(:class:`HostLiveness`), a session-level advisory lock for each host instance it
writes claims for — the host it serves, taken at start (``acpgate serve`` names
it), and any instance whose claim it writes, taken before the claim is written.
PostgreSQL drops a session-level lock the moment its connection ends: a killed
process's connection is closed by the kernel, and the server notices at once (a
machine that vanishes without closing it is noticed by the TCP keepalives this
connection asks the server for, a few seconds). So a claim is live only while its
instance's host lock is held (:func:`holder_live`), and another host takes over a
dead host's sessions at once instead of after ``[store] lease_secs``
(:func:`pg_claimable`). The lease stays the fallback: a claim whose lock some
connection holds is live until it expires, as before.

The lock key is ``(NAMESPACE, hashtext(host instance id))``: the host part of a
claim identity (an edge worker's ``<instance>/w<N>`` belongs to its host), computed
by the same SQL expression on both sides. A hash collision can only make a dead host
look alive (the lease then decides), never a live one dead.

Trust: anyone with the store's credential may hold any such lock (delaying a
failover to the lease), or end another host's connection (its sessions then fail
over, and its writes are fenced by the claim generation) — no more than that
credential already allows by writing the rows. Nothing a client sends reaches a
lock key: claim identities come from the edges' configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Collection
from typing import Final

import asyncpg

from services.common.logs import get_logger
from services.session.store.postgres.db import KEEPALIVES, Conn, PostgresTarget, describe
from services.session.store.records import StoreUnavailable
from services.session.store.sql.claims import CLAIMABLE

__all__ = ["HOLDER_LIVE", "NAMESPACE", "HostLiveness", "connector", "dead_holders",
           "holder_live", "host_of", "pg_claimable"]

log = get_logger("session.store")

#: The first key of every host lock: "acpg" in ASCII (an int4).
NAMESPACE: Final = 0x61637067
#: How often the keeper looks at its connection (and retakes what it lost).
KEEP_SECS: Final = 0.5
#: Every how many looks the keeper also asks the server something, and how long it waits.
_PROBE_EVERY: Final = 4
_PROBE_TIMEOUT_SECS: Final = 5.0
_WORKER_SUFFIX: Final = re.compile(r"/w[0-9]+\Z")


def _key(column: str) -> str:
    """The SQL of a host lock's second key for the claim identity in ``column``."""
    return f"hashtext(regexp_replace({column}, '/w[0-9]+$', ''))"


def holder_live(column: str) -> str:
    """SQL: true while some connection holds the host lock of the claim identity in
    ``column`` (granted, in this database)."""
    return ("EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())"
            f" AND l.classid = {NAMESPACE}::oid AND l.objsubid = 2"
            f" AND l.objid = {_key(column)}::oid)")


#: SQL: the row's claim holder's host is alive.
HOLDER_LIVE: Final = holder_live("active_instance_id")
#: :data:`~.sql.claims.CLAIMABLE` on PostgreSQL: also when the holder's host is dead.
_CLAIMABLE_PG: Final = f"{CLAIMABLE[:-1]} OR NOT {HOLDER_LIVE})"
_TRY_LOCK: Final = f"SELECT pg_try_advisory_lock({NAMESPACE}, {_key('$1::text')})"
_DEAD: Final = (f"SELECT h FROM unnest($1::text[]) AS h WHERE NOT {holder_live('h')}")


def pg_claimable(sql: str) -> str:
    """``sql`` (a statement or ``WHERE`` built on :data:`~.sql.claims.CLAIMABLE`) with a
    dead host's claim claimable too; the parameters are unchanged."""
    assert CLAIMABLE in sql, "not a claim condition"
    return sql.replace(CLAIMABLE, _CLAIMABLE_PG)


def host_of(instance_id: str) -> str:
    """The host part of a claim identity (as :func:`_key` computes it in SQL)."""
    return _WORKER_SUFFIX.sub("", instance_id)


async def dead_holders(con: Conn, instance_ids: Collection[str]) -> set[str]:
    """Those of ``instance_ids`` whose host lock nobody holds: their claims are over."""
    if not instance_ids:
        return set()
    return {str(r[0]) for r in await con.fetch(_DEAD, sorted(instance_ids))}


Connect = Callable[[], Awaitable["asyncpg.Connection[asyncpg.Record]"]]


def connector(target: PostgresTarget) -> Connect:
    """How :class:`HostLiveness` opens its connection to ``target``."""
    def connect() -> Awaitable[asyncpg.Connection[asyncpg.Record]]:
        return asyncpg.connect(
            target.url, password=target.password or None,
            timeout=max(1.0, target.connect_timeout_secs),
            server_settings={"application_name": "acpgate-liveness", **KEEPALIVES})
    return connect


class HostLiveness:
    """The host locks this session service holds, on one connection of its own.

    :meth:`hold` takes a host's lock (once; later calls cost nothing). A keeper task
    reconnects when the connection breaks (the server restarted, the network was cut:
    the locks went with it) and takes every lock again; one another connection holds
    (a predecessor the server has not dropped yet) is tried again until it is free.
    """

    def __init__(self, connect: Connect, shown_url: str) -> None:
        """``connect`` opens the connection the locks are held on (:func:`connector`)."""
        self._connect = connect
        self._shown = shown_url
        self._con: asyncpg.Connection[asyncpg.Record] | None = None
        self._mutex = asyncio.Lock()
        #: Host instance ids whose locks this service holds / wants to hold.
        self._held: set[str] = set()
        self._wanted: set[str] = set()
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def held(self) -> frozenset[str]:
        """The host instance ids whose locks are held now."""
        return frozenset(self._held)

    async def hold(self, instance_id: str) -> None:
        """Hold the lock of ``instance_id``'s host from now on (StoreUnavailable when no
        connection can be made: a claim it cannot vouch for is not written)."""
        host = host_of(instance_id)
        if not host or self._closed or (host in self._held and self._open()):
            return
        self._wanted.add(host)
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep(), name="host-liveness")
        await self._take(sorted(self._wanted))  # all of them, on a new connection

    def _open(self) -> bool:
        return self._con is not None and not self._con.is_closed()

    async def _take(self, hosts: Collection[str]) -> None:
        async with self._mutex:
            try:
                con = await self._connection()
                for host in hosts:
                    if host in self._held:
                        continue
                    if await con.fetchval(_TRY_LOCK, host):
                        self._held.add(host)
                        log.info("host_liveness_held", instance=host)
                    else:  # another connection holds it: the host looks alive meanwhile
                        log.info("host_liveness_busy", instance=host)
            except (OSError, TimeoutError, asyncpg.PostgresError,
                    asyncpg.InterfaceError) as exc:
                await self._drop(exc)
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown} unavailable: {describe(exc)}") from exc

    async def _connection(self) -> asyncpg.Connection[asyncpg.Record]:
        if self._con is not None and self._open():
            return self._con
        self._held.clear()  # a closed connection's locks are gone
        self._con = await self._connect()
        return self._con

    async def _drop(self, exc: BaseException) -> None:
        if self._held:
            log.warning("host_liveness_lost", instances=sorted(self._held),
                        reason=describe(exc))
        self._held.clear()
        con, self._con = self._con, None
        if con is not None:
            con.terminate()

    async def _keep(self) -> None:
        """Every :data:`KEEP_SECS`: a connection found closed (or failing a probe) is
        replaced and every wanted lock taken again."""
        ticks = 0
        while not self._closed:
            await asyncio.sleep(KEEP_SECS)
            ticks += 1
            try:
                con = self._con
                if con is not None and self._open() and self._wanted <= self._held:
                    if ticks % _PROBE_EVERY == 0:  # a half-open connection answers nothing
                        async with self._mutex:
                            await con.fetchval("SELECT 1", timeout=_PROBE_TIMEOUT_SECS)
                    continue
                await self._take(sorted(self._wanted))
            except StoreUnavailable:
                continue
            except (OSError, TimeoutError, asyncpg.PostgresError,
                    asyncpg.InterfaceError) as exc:
                await self._drop(exc)

    async def close(self) -> None:
        """Let every lock go (closing the connection); a second call does nothing."""
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        if self._con is not None:
            with contextlib.suppress(Exception):
                await self._con.close(timeout=5)
            self._con = None
        self._held.clear()
