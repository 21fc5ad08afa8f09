"""Gateway bearer tokens: minted once, stored hashed, revocable (SPEC §11).

A token is ``acpg_<43 url-safe characters>`` (256 random bits). Only its
SHA-256 digest is stored, in a small SQLite file (in the data dir, or where
``[gateway] token_db`` says); the secret itself is returned once by
:meth:`TokenStore.create` and never again. The
alphabet (``A-Z a-z 0-9 _ -``) is valid in an HTTP header, in a
``Sec-WebSocket-Protocol`` entry (``bearer.<t>``) and in a URL query unescaped.

The store is synchronous sqlite3: the CLI calls it directly, async code calls
it through :func:`asyncio.to_thread`. Every call opens its own connection, so a
revoke by ``acpgate token revoke`` in another process takes effect on the next
check without any cache to invalidate. Connections that are already open are
the :class:`TokenWatch`'s business: it tells cheaply when the table changed.

Operator grants live beside the tokens, in table ``grants`` (schema
version 2; a store from before gets the empty table on its next open, its
tokens untouched). One grant is :data:`GRANT_HOST` (the host view, below); the other is
:data:`GRANT_SEE_ALL`: the token's clients,
and the agents of its sessions, may list, read the history of and ask the
status of other principals' sessions — read-only: no grant lets one principal
drive (prompt, send to, load, resume, delete, spawn into) another's session.
A grant counts only while its token is active.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.common.config import Config

TOKEN_PREFIX = "acpg_"
#: Random bytes per secret (256 bits).
SECRET_BYTES = 32

#: The operator grant that shows other principals' sessions, read-only.
GRANT_SEE_ALL = "see-all"
#: The operator grant of the host view: ``_acpgate/host/*`` on ``/acp`` — every
#: live session of the install, its owner and processes, and closing or cancelling them.
#: ``acpgate token create --admin`` mints a token holding it.
GRANT_HOST = "host"
#: Every grant a token may hold.
GRANTS = (GRANT_SEE_ALL, GRANT_HOST)
#: ``PRAGMA user_version`` of the current schema (1: tokens only; 2: + grants).
SCHEMA_VERSION = 2

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS tokens (
    token_id   TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    digest     TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
)
""",
    """
CREATE TABLE IF NOT EXISTS grants (
    token_id   TEXT NOT NULL,
    name       TEXT NOT NULL,
    granted_at INTEGER NOT NULL,
    PRIMARY KEY (token_id, name)
)
""",
)


class UnknownGrant(ValueError):
    """A grant name acpgate does not know; ``str(exc)`` names the known ones."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown grant {name!r} (known: {', '.join(GRANTS)})")


def check_grant(name: str) -> str:
    """``name`` if it is a known grant, else :class:`UnknownGrant`."""
    if name not in GRANTS:
        raise UnknownGrant(name)
    return name


def token_db_path(cfg: Config) -> Path:
    """Where the hashed tokens live: ``[gateway] token_db``, default
    ``<data dir>/gateway/tokens.db``."""
    return cfg.token_db_path


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    """What ``acpgate token list`` shows: never the secret, never its digest."""

    token_id: str
    name: str
    #: ISO-8601 UTC creation time.
    created_at: str
    revoked: bool
    #: The operator grants it holds (names from :data:`GRANTS`).
    grants: tuple[str, ...] = ()


class TokenStore:
    """The token table in one SQLite file (created with owner-only permissions)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _connect(self, *, create: bool) -> Iterator[sqlite3.Connection | None]:
        """A connection with the schema in place; ``None`` when reading a missing store."""
        if not create and not self.path.exists():
            yield None
            return
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self.path.exists():
                # Create the file owner-only before sqlite writes anything into it.
                fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
        with closing(sqlite3.connect(self.path, timeout=10.0)) as conn:
            _migrate(conn)
            yield conn
            conn.commit()

    def create(self, name: str = "", grants: Iterable[str] = ()) -> tuple[str, str]:
        """Mint a token labelled ``name`` holding ``grants``; returns ``(token_id, secret)``.
        Show the secret once. An unknown grant is :class:`UnknownGrant` (nothing minted)."""
        wanted = sorted({check_grant(g) for g in grants})
        secret = TOKEN_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
        token_id = secrets.token_hex(6)
        now = int(time.time())
        with self._connect(create=True) as conn:
            assert conn is not None
            conn.execute(
                "INSERT INTO tokens (token_id, name, digest, created_at) VALUES (?, ?, ?, ?)",
                (token_id, name, _digest(secret), now),
            )
            conn.executemany("INSERT INTO grants (token_id, name, granted_at) VALUES (?, ?, ?)",
                             [(token_id, g, now) for g in wanted])
        return token_id, secret

    def grant(self, token_id: str, grant: str) -> bool:
        """Give token ``token_id`` the operator grant ``grant`` (twice is once). False when
        no such token exists; :class:`UnknownGrant` for an unknown grant."""
        check_grant(grant)
        with self._connect(create=False) as conn:
            if conn is None or not _exists(conn, token_id):
                return False
            conn.execute("INSERT OR IGNORE INTO grants (token_id, name, granted_at) "
                         "VALUES (?, ?, ?)", (token_id, grant, int(time.time())))
            return True

    def revoke_grant(self, token_id: str, grant: str) -> bool:
        """Take ``grant`` from token ``token_id`` (one it does not hold: nothing to do).
        False when no such token exists; :class:`UnknownGrant` for an unknown grant."""
        check_grant(grant)
        with self._connect(create=False) as conn:
            if conn is None or not _exists(conn, token_id):
                return False
            conn.execute("DELETE FROM grants WHERE token_id = ? AND name = ?", (token_id, grant))
            return True

    def grants_of(self, token_id: str) -> frozenset[str]:
        """The grants an *active* token holds (none for a revoked or unknown one)."""
        with self._connect(create=False) as conn:
            if conn is None:
                return frozenset()
            rows = conn.execute(
                "SELECT g.name FROM grants g JOIN tokens t ON t.token_id = g.token_id "
                "WHERE g.token_id = ? AND t.revoked_at IS NULL", (token_id,)).fetchall()
        return frozenset(row[0] for row in rows)

    def list(self) -> list[TokenInfo]:
        """Every token, oldest first, revoked ones included (marked)."""
        with self._connect(create=False) as conn:
            if conn is None:
                return []
            rows = conn.execute(
                "SELECT token_id, name, created_at, revoked_at FROM tokens "
                "ORDER BY created_at, token_id"
            ).fetchall()
            held: dict[str, list[str]] = {}
            for token_id, grant in conn.execute(
                    "SELECT token_id, name FROM grants ORDER BY name").fetchall():
                held.setdefault(token_id, []).append(grant)
        return [
            TokenInfo(
                token_id=row[0],
                name=row[1],
                created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row[2])),
                revoked=row[3] is not None,
                grants=tuple(held.get(row[0], ())),
            )
            for row in rows
        ]

    def revoke(self, token_id: str) -> bool:
        """Revoke by id. False when no such token exists; revoking twice is True."""
        with self._connect(create=False) as conn:
            if conn is None:
                return False
            cur = conn.execute(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE token_id = ?",
                (int(time.time()), token_id),
            )
            return cur.rowcount > 0

    def verify(self, secret: str) -> bool:
        """True when ``secret`` is an active (not revoked) token."""
        return self.identify(secret) is not None

    def identify(self, secret: str) -> str | None:
        """The id of the active token ``secret`` is, or None.

        The presented digest is compared with every active digest using
        :func:`hmac.compare_digest` and without an early exit, so the time taken
        does not depend on which (if any) token matched.
        """
        if not secret:
            return None
        presented = _digest(secret)
        with self._connect(create=False) as conn:
            if conn is None:
                return None
            rows = conn.execute(
                "SELECT token_id, digest FROM tokens WHERE revoked_at IS NULL"
            ).fetchall()
        matched: str | None = None
        for token_id, digest in rows:
            if hmac.compare_digest(presented, digest):
                matched = token_id
        return matched


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the store to :data:`SCHEMA_VERSION` (tables are only ever added: the tokens of
    an older store stay as they are)."""
    for statement in _SCHEMA:
        conn.execute(statement)
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) < SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _exists(conn: sqlite3.Connection, token_id: str) -> bool:
    return conn.execute("SELECT 1 FROM tokens WHERE token_id = ?", (token_id,)).fetchone() \
        is not None


class TokenWatch:
    """A read-only look at the token table that is cheap when nothing changed.

    It keeps one read-only connection and asks SQLite's ``PRAGMA data_version``,
    which moves whenever another connection — any process, e.g. ``acpgate token
    revoke`` — committed to the file. Only then is the table read again. Like
    the store it is synchronous: call it through ``asyncio.to_thread``, from one
    caller at a time. :meth:`close` may come from another thread while a read runs
    (a caller cancelled at shutdown leaves its thread reading): the read then closes
    the connection when it is done — closing it under a running statement crashes
    the process.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        #: Held while the connection is in use; :meth:`close` never waits for it.
        self._busy = threading.Lock()
        self._close_pending = False

    def _open(self) -> sqlite3.Connection | None:
        if self._conn is None and self.path.exists():
            try:
                self._conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro",
                                             uri=True, timeout=10.0, check_same_thread=False)
            except sqlite3.Error:
                return None
        return self._conn

    def active_ids_if_changed(self) -> set[str] | None:
        """The ids of the active tokens when the table changed since the last call (the
        first call counts as a change), else ``None``. No store yet: no active token."""
        with self._busy:
            try:
                return self._read()
            finally:
                if self._close_pending:
                    self._drop()

    def _read(self) -> set[str] | None:
        conn = self._open()
        if conn is None:
            first, self._version = self._version is None, -1
            return set() if first else None
        try:
            version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._version:
                return None
            rows = conn.execute("SELECT token_id FROM tokens WHERE revoked_at IS NULL").fetchall()
        except sqlite3.Error:
            # Created but empty, or mid-write: look again next time.
            self._version = None
            return None
        self._version = version
        return {row[0] for row in rows}

    def close(self) -> None:
        """Close the connection (a later call opens a new one); never waits: a read in
        progress on another thread closes it when it ends."""
        self._close_pending = True
        if self._busy.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._busy.release()

    def _drop(self) -> None:
        self._close_pending = False
        if self._conn is not None:
            self._conn.close()
            self._conn = None
