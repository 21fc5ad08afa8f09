"""The session store: session rows and their history, behind one interface.

- :mod:`.interface` — :class:`SessionStore`, the operations the servicer uses;
- :mod:`.records` — the records, refusals and validation every backend shares;
  :mod:`.checks` — the rules every backend applies to what it is asked to write;
- :mod:`.event_log` — the session's event log: its records, the fence of a batch;
  :mod:`.log_quota` — its storage quotas;
- :mod:`.opening` — :func:`open_store`: SQLite, PostgreSQL, or memory with a reason;
  :mod:`.unusable` — the refusal of a store that exists and cannot be used;
- :mod:`.sqlite` — the backend on one SQLite file (schema and migrations down to the
  zeroclaw v1 file), and ``acpgate store check`` / ``repair`` of that file;
- :mod:`.postgres` — the backend on PostgreSQL, the shared store of several hosts, and
  the hosts' liveness;
- :mod:`.sql` — the statements and row decoding both SQL backends share.

Import from here; the names below are the store's public surface.
"""

from services.session.store.event_log import (
    TURN_RUNNING,
    EventChunk,
    LoggedEvent,
    SessionBatch,
    TurnMark,
)
from services.session.store.interface import Clock, SessionStore, wall_clock_ms
from services.session.store.opening import StoreTarget, open_store
from services.session.store.postgres.db import PostgresTarget
from services.session.store.records import (
    BACKEND,
    LATEST_SCHEMA_VERSION,
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
from services.session.store.unusable import StoreUnusable

__all__ = [
    "BACKEND",
    "LATEST_SCHEMA_VERSION",
    "TURN_RUNNING",
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
