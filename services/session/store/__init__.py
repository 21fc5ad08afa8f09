"""The session store: session rows and their history, behind one interface.

- :mod:`.interface` — :class:`SessionStore`, the operations the servicer uses;
- :mod:`.records` — the records, refusals and validation every backend shares;
- :mod:`.opening` — :func:`open_store`: the SQLite file, or memory with a reason;
  :mod:`.unusable` — the refusal of a store that exists and cannot be used;
  :mod:`.diagnosis` and :mod:`.salvage` — ``acpgate store check`` and ``repair``;
- :mod:`.sqlite_store` (rows), :mod:`.sqlite_history` (turns, history) and
  :mod:`.sqlite_fork` (a session forked with its history),
  :mod:`.sqlite_schema`, :mod:`.sqlite_db` — the SQLite backend: queries, schema and
  migrations (down to the zeroclaw v1 file), plumbing;
- :mod:`.pg_store` (rows), :mod:`.pg_history` (turns, history), :mod:`.pg_fork`, :mod:`.pg_schema`,
  :mod:`.pg_db` — the PostgreSQL backend, the shared store of several hosts: queries,
  schema and migrations, pool and URL;
- :mod:`.sql_rows` — the statements and row decoding both SQL backends share;
  :mod:`.sql_claims` — their claim statements and the fence of a holder's write;
  :mod:`.sql_history` — their history pages, bounded by count and by bytes;
  :mod:`.sql_fork` — what a fork writes;
- :mod:`.event_log` — the session's event log: its records, the fence of a batch, and
  :mod:`.sqlite_events` / :mod:`.pg_events` behind the same interface.

Import from here; the names below are the store's public surface.
"""

from services.session.store.event_log import EventChunk, LoggedEvent, SessionBatch, TurnMark
from services.session.store.interface import Clock, SessionStore, wall_clock_ms
from services.session.store.opening import StoreTarget, open_store
from services.session.store.postgres.db import PostgresTarget
from services.session.store.records import (
    BACKEND,
    AppendResult,
    Claim,
    HistoryEntry,
    InvalidItem,
    NewSession,
    Ownership,
    Quota,
    QuotaExceeded,
    SchemaTooNew,
    SessionActiveElsewhere,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    StoreError,
    StoreStatusInfo,
    StoreUnavailable,
    TurnUsage,
    make_title,
    session_key_for,
)
from services.session.store.sqlite.schema import LATEST_SCHEMA_VERSION
from services.session.store.unusable import StoreUnusable

__all__ = [
    "BACKEND",
    "LATEST_SCHEMA_VERSION",
    "AppendResult",
    "Claim",
    "Clock",
    "EventChunk",
    "HistoryEntry",
    "InvalidItem",
    "LoggedEvent",
    "NewSession",
    "Ownership",
    "PostgresTarget",
    "Quota",
    "QuotaExceeded",
    "SchemaTooNew",
    "SessionActiveElsewhere",
    "SessionBatch",
    "SessionExists",
    "SessionNotFound",
    "SessionRecord",
    "SessionStore",
    "StoreError",
    "StoreStatusInfo",
    "StoreTarget",
    "StoreUnavailable",
    "StoreUnusable",
    "TurnMark",
    "TurnUsage",
    "make_title",
    "open_store",
    "session_key_for",
    "wall_clock_ms",
]
