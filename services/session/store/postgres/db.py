"""PostgreSQL plumbing of the session store: the target, the pool, errors, free text.

The driver is asyncpg: it speaks the PostgreSQL protocol natively on asyncio
(no libpq, no thread per call), brings its own connection pool, and decodes
rows in compiled code — the history load and AppendTurn are its hot paths.

- :class:`PostgresTarget` — where the database is (a ``postgresql://`` URL) and
  how to reach it; the password may come from the environment, and
  :func:`~services.common.urls.redact_url` is the only form of the URL that is
  ever shown or logged;
- :func:`create_pool` — a pool, retrying while the server is not up yet; the server
  ends a pooled connection whose peer vanished (:data:`KEEPALIVES`) or whose transaction
  stalls between statements (:data:`IDLE_IN_TRANSACTION_SECS`), so a cut-off host's open
  transaction does not keep its session's row locked from the host taking it over; a
  released connection is not reset by a query (:func:`_released`): callers leave no
  session state on a pooled connection (no ``SET``, ``LISTEN``, cursor or session-level
  advisory lock — the host locks live on a connection of their own);
- :func:`call` and :func:`in_transaction` — one operation on a pooled
  connection, tried once more on a fresh one when the first was found broken
  before anything ran (the server restarted while it sat idle); other
  connection failures become :class:`~.records.StoreUnavailable`;
- :func:`to_db` / :func:`from_db` — PostgreSQL ``text`` cannot hold NUL, which
  SQLite stores (a tool's binary output, say); free text is escaped reversibly
  so both backends give back exactly what was written (:func:`record_of` and
  :func:`entry_of` read rows back that way, :func:`read_history_page` a page of
  history); :func:`storable` tells an id no row can have.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, TypeVar

import asyncpg

from services.common.logs import get_logger
from services.common.urls import redact_url
from services.session.store.records import (
    ITEM_FIELDS,
    HistoryEntry,
    SessionRecord,
    StoreUnavailable,
)
from services.session.store.sql.history import (
    SELECT_HISTORY_PAGE,
    SELECT_HISTORY_RANGE,
    SELECT_HISTORY_SIZES,
    item_bytes_sql,
)
from services.session.store.sql.rows import numbered, record_from_row

__all__ = [
    "IDLE_IN_TRANSACTION_SECS",
    "KEEPALIVES",
    "Conn",
    "PostgresTarget",
    "call",
    "create_pool",
    "entry_of",
    "from_db",
    "in_transaction",
    "read_history_page",
    "read_history_range",
    "read_history_sizes",
    "record_of",
    "storable",
    "to_db",
]

log = get_logger("session.store")

#: A connection, on its own or borrowed from the pool.
Conn: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)
#: Errors that mean "the server is not there (yet)": worth retrying at start.
_TRANSIENT: Final = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.TooManyConnectionsError,
)
#: A pooled connection that turned out closed (the server went away while it was idle).
#: InternalClientError is in the list because an idle connection that received the
#: server's "terminating connection" message before its socket closed refuses the next
#: statement with it ("cannot switch to state ...; another operation is in progress").
_BROKEN: Final = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.InternalClientError,
)
#: Errors that mean the connection to the server broke or cannot be made.
_UNREACHABLE: Final = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)

#: The server's TCP keepalives on every connection of the store: a peer gone silently
#: (power loss, a cut network) is dropped after about idle + interval × count seconds.
KEEPALIVES: Final = {"tcp_keepalives_idle": "2", "tcp_keepalives_interval": "1",
                     "tcp_keepalives_count": "3"}
#: How long the server lets a pooled connection sit in a transaction without a statement
#: before it ends the connection. The store's transactions send their statements back to
#: back; one that stops is a stalled or cut-off host whose row locks would otherwise block
#: the claim of the host taking its sessions over.
IDLE_IN_TRANSACTION_SECS: Final = 5.0


@dataclass(frozen=True)
class PostgresTarget:
    """A PostgreSQL store to open: ``[store] url`` and the settings around it."""

    url: str
    #: The password from ``[store] password_env`` ("" = the URL's own, or none).
    password: str = field(default="", repr=False)
    pool_size: int = 10
    #: How long to keep trying while the server does not answer yet.
    connect_timeout_secs: float = 10.0

    @property
    def shown(self) -> str:
        """The URL as it may be shown and logged: no password."""
        return redact_url(self.url)


async def _released(con: asyncpg.Connection[asyncpg.Record]) -> None:
    """The pool's reset of a released connection: nothing more than asyncpg's own (a
    transaction left open is rolled back, listeners dropped), not its reset query (``RESET
    ALL``, ``UNLISTEN *``, ``CLOSE ALL``, ``pg_advisory_unlock_all()``) — a round trip per
    store operation, which in ``acpgate acp`` waits for a turn of the relay's busy loop,
    for state this store never leaves on a pooled connection."""


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, _TRANSIENT)


def describe(exc: BaseException) -> str:
    """A one-line reason for a failure, without the URL's secrets."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


async def create_pool(target: PostgresTarget) -> asyncpg.Pool:
    """A connected pool, retrying transient failures for ``connect_timeout_secs``.

    Raises the last error when the time is up or at once for a permanent one (a
    refused password, a database that does not exist).
    """
    deadline = time.monotonic() + target.connect_timeout_secs
    delay = 0.1
    while True:
        try:
            pool = await asyncpg.create_pool(
                target.url,
                password=target.password or None,
                min_size=1,
                max_size=target.pool_size,
                # Each attempt gets the time that is left, at least a second.
                timeout=max(1.0, deadline - time.monotonic()),
                reset=_released,
                server_settings={"application_name": "acpgate-session", **KEEPALIVES,
                                 "idle_in_transaction_session_timeout":
                                     str(int(IDLE_IN_TRANSACTION_SECS * 1000))},
            )
        except Exception as exc:
            remaining = deadline - time.monotonic()
            if not _is_transient(exc) or remaining <= 0:
                raise
            log.info("session_store_waiting", url=target.shown, reason=describe(exc))
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 2.0)
            continue
        assert pool is not None
        return pool


T = TypeVar("T")


@contextlib.asynccontextmanager
async def _unavailable(shown_url: str) -> AsyncIterator[None]:
    """Turn a lost or refused connection inside the body into StoreUnavailable."""
    try:
        yield
    except _UNREACHABLE as exc:
        raise StoreUnavailable(f"PostgreSQL store {shown_url} unavailable: {describe(exc)}") from exc


async def _reconnect(pool: asyncpg.Pool, shown_url: str, exc: BaseException) -> None:
    """One pooled connection was dead: the others idle since then likely are too (the
    server restarted), so every connection is replaced on its next use."""
    log.info("session_store_reconnecting", url=shown_url, reason=describe(exc))
    await pool.expire_connections()


async def call(pool: asyncpg.Pool, shown_url: str, op: Callable[[Conn], Awaitable[T]]) -> T:
    """``op`` on a pooled connection; once more on a fresh one if the first was broken.

    Only for operations that may run twice (a read, or a write whose second run
    changes nothing more than the first): a connection can break after the server
    ran the statement and before its answer arrived.
    """
    async with _unavailable(shown_url):
        try:
            async with pool.acquire() as con:
                return await op(con)
        except _BROKEN as exc:
            await _reconnect(pool, shown_url, exc)
        async with pool.acquire() as con:
            return await op(con)


async def in_transaction(
    pool: asyncpg.Pool, shown_url: str, op: Callable[[Conn], Awaitable[T]]
) -> T:
    """``op`` in one transaction; on a fresh connection when the first was found broken at
    ``BEGIN`` (nothing ran yet), StoreUnavailable when it breaks later (nothing committed,
    unless the break hid the answer to ``COMMIT`` itself)."""
    async with _unavailable(shown_url):
        for attempt in (1, 2):
            async with pool.acquire() as con:
                transaction = con.transaction()
                try:
                    await transaction.start()
                except _BROKEN as exc:
                    if attempt == 2:
                        raise
                    await _reconnect(pool, shown_url, exc)
                    continue
                try:
                    result = await op(con)
                except BaseException:
                    with contextlib.suppress(*_UNREACHABLE):
                        await transaction.rollback()
                    raise
                await transaction.commit()
                return result
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


# ------------------------------------------------------------------ free text

#: The escape character: a private-use code point, doubled when it occurs itself.
_ESC: Final = "\ue000"
_UNESCAPE: Final = re.compile(f"{_ESC}(.)", re.S)


def to_db(text: str) -> str:
    """Free text as PostgreSQL stores it: NUL → ESC "0", ESC → ESC ESC (else unchanged)."""
    if "\x00" not in text and _ESC not in text:
        return text
    return text.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")


def from_db(text: str) -> str:
    """The inverse of :func:`to_db`."""
    if _ESC not in text:
        return text
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), text)


def storable(key: str) -> bool:
    """False for an id no row can have: PostgreSQL text holds no NUL (and creation refuses
    it), so looking it up would only make the server complain."""
    return "\x00" not in key


def record_of(row: asyncpg.Record) -> SessionRecord:
    """A ``sessions`` row (:data:`~.sql.rows.SESSION_COLUMNS`) as a record, text unescaped."""
    return record_from_row(row, from_db)


_SELECT_HISTORY_PAGE: Final = numbered(SELECT_HISTORY_PAGE)
_SELECT_HISTORY_RANGE: Final = numbered(SELECT_HISTORY_RANGE)
_SELECT_HISTORY_SIZES: Final = numbered(SELECT_HISTORY_SIZES.format(
    size=item_bytes_sql(lambda column: f"octet_length({column})")))
#: Where the item fields of a history row (:data:`~.sql.rows.HISTORY_COLUMNS`) end.
_ITEM_END: Final = 1 + len(ITEM_FIELDS)


def entry_of(row: asyncpg.Record) -> HistoryEntry:
    """A ``history`` row as an entry: role, the item fields (escaped free text), then seq,
    turn, created_at."""
    values: tuple[Any, ...] = (row[0], *map(from_db, row[1:_ITEM_END]), *row[_ITEM_END:])
    return HistoryEntry(*values)


async def read_history_page(session_id: str, after_seq: int, page: int,
                            con: Conn) -> list[HistoryEntry]:
    """At most ``page`` history items of ``session_id`` after ``after_seq``, oldest first."""
    return [entry_of(r) for r in await con.fetch(_SELECT_HISTORY_PAGE, session_id, after_seq,
                                                 page)]


async def read_history_sizes(session_id: str, after_seq: int, page: int,
                             con: Conn) -> list[tuple[int, int]]:
    """(seq, item bytes) of at most ``page`` rows after ``after_seq``, oldest first."""
    return [(int(r[0]), int(r[1]))
            for r in await con.fetch(_SELECT_HISTORY_SIZES, session_id, after_seq, page)]


async def read_history_range(session_id: str, after_seq: int, last_seq: int,
                             con: Conn) -> list[HistoryEntry]:
    """The history items with ``after_seq`` < seq <= ``last_seq``, oldest first."""
    return [entry_of(r) for r in await con.fetch(_SELECT_HISTORY_RANGE, session_id, after_seq,
                                                 last_seq)]
