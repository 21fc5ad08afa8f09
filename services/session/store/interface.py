"""What a session store is: the operations the session service needs from a backend.

:class:`SessionStore` is the one seam between the gRPC servicer and the
database. The SQLite store (:mod:`.sqlite.store`) implements it, both on the
file and on the in-memory database used when the file cannot be opened; the
PostgreSQL store (:mod:`.postgres.store`) implements the same methods with the same
semantics — the same records, the same refusals, one transaction per turn.

Several gateway hosts may share one (PostgreSQL) store. The instance whose
process serves a session *claims* its row (:meth:`SessionStore.claim`): one
conditional update, so of two instances racing for one session exactly one
wins. The holder renews its claims while the sessions are active
(:meth:`SessionStore.renew_claims`); a claim that was not renewed in time has
expired — its host is dead or cut off — and any instance may take it over. A
backend that can tell a dead host at once (PostgreSQL: :mod:`.postgres.liveness`) also
ends the claims of a host whose liveness is gone, without waiting for the lease
(:meth:`SessionStore.hold_liveness`).

Every claim taken is the row's next *generation* (a renewal keeps it). A holder's
writes carry the generation it got (``holder`` + ``generation``): the row is
written only while that instance still holds the claim at that generation,
checked in the write's own transaction, so a host cut off past its lease can
never write after the host that took over (split brain).

History and the event log count against two byte quotas (:class:`~.records.Quota`): a
running total per row and per owner (``owner_usage``), checked in the write's transaction.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence

from services.session.store.event_log import EventLogStore
from services.session.store.records import (
    AppendResult,
    HistoryEntry,
    NewSession,
    Quota,
    SessionRecord,
    StoreStatusInfo,
    TurnUsage,
)

__all__ = ["DEFAULT_HISTORY_PAGE", "HISTORY_PAGE_BYTES", "Clock", "SessionStore",
           "wall_clock_ms"]

#: A clock in milliseconds since the epoch (injected so tests control time).
Clock = Callable[[], int]

#: How many history items a backend reads per query unless told otherwise.
DEFAULT_HISTORY_PAGE = 500
#: How many item bytes a backend reads per query of a big history (a larger item alone):
#: a session storing more than this is read in byte-bounded pages (:mod:`.sql.history`).
HISTORY_PAGE_BYTES = 4 * 1024 * 1024


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, from the system clock."""
    return int(time.time() * 1000)


class SessionStore(EventLogStore, ABC):
    """Session rows and their history (SPEC §8, §13), whatever holds them.

    Every method may be awaited concurrently with the others; a backend
    serializes what must be serialized. The event log's operations are
    :class:`~.event_log.EventLogStore`'s. Refusals are the exceptions of
    :mod:`.records`: ``SessionNotFound``, ``SessionExists``, ``InvalidItem``.
    """

    #: Persistent or in memory, and why (SPEC §2); fixed when the store is opened.
    status: StoreStatusInfo

    @property
    def persistent(self) -> bool:
        """True when rows outlive the process."""
        return self.status.persistent

    @abstractmethod
    async def close(self) -> None:
        """Release the database; a second call does nothing."""

    # -- sessions

    @abstractmethod
    async def create_session(self, new: NewSession) -> SessionRecord:
        """Write the row ``new`` describes (its claim, if any, in the same statement: a new
        id, nobody else can hold it yet).

        InvalidItem when an id, the alias or the workspace is empty, the state is
        unknown, ``mcp_servers_json`` is not a JSON array or the claim is one
        :meth:`claim` refuses; SessionExists when the id is taken.
        """

    @abstractmethod
    async def get_session(self, session_id: str) -> SessionRecord:
        """The row of ``session_id`` or SessionNotFound."""

    @abstractmethod
    async def find_by_session_key(self, session_key: str) -> SessionRecord | None:
        """The row whose SPEC §13 session key is ``session_key``, if stored ("" → None)."""

    @abstractmethod
    async def update_session(
        self,
        session_id: str,
        *,
        state: str | None = None,
        lease_id: str | None = None,
        adapter_session_id: str | None = None,
        plan_json: str | None = None,
        agent_alias: str | None = None,
        title: str | None = None,
        mcp_servers_json: str | None = None,
        mode_id: str | None = None,
        config_json: str | None = None,
        additional_directories: Sequence[str] | None = None,
        protocol_version: int | None = None,
        holder: str | None = None,
        generation: int = 0,
    ) -> SessionRecord:
        """Change the given fields (None = unchanged) and return the row.

        The title goes through ``make_title``; ``config_json`` must be a JSON object
        ({configId: value}, "" = none). A row without ownership (migrated from
        v1) gets its session key, agent id and owner on the first alias it is bound to.
        InvalidItem for an unknown state, an empty alias, a plan that is not JSON or an
        MCP server list that is not a JSON array, config values that are not a JSON
        object, or a NUL in an identifier. With ``holder``, only while that instance holds
        the claim or nobody does — with ``generation`` too, only while it holds the claim at
        that generation (fenced) — else SessionActiveElsewhere, nothing changed.
        """

    @abstractmethod
    async def touch(self, session_id: str) -> SessionRecord:
        """Bump last_activity to now (never backwards) and return the row."""

    @abstractmethod
    async def delete_session(self, session_id: str, *, holder: str | None = None) -> bool:
        """Remove the row with its history and turn usage in one transaction (its bytes
        leave its owner's total in it too); False if there was no such row.

        With ``holder`` (an instance id), only while no other instance holds a live
        claim on the row — free, ``holder``'s own or expired (else
        SessionActiveElsewhere, nothing removed): a session served by another host is
        not deleted from under it.
        """

    @abstractmethod
    async def list_sessions(
        self, *, cwd: str = "", after: tuple[int, str] | None = None, limit: int = 100,
        live: bool = False,
    ) -> list[SessionRecord]:
        """One page of rows in (last_activity DESC, id DESC) order, strictly after the
        ``(last_activity, session_id)`` position ``after``; only ``cwd``'s when given; with
        ``live``, only those an instance's claim holds now (operators' view of what runs)."""

    @abstractmethod
    async def fork_session(
        self,
        parent_id: str,
        session_id: str,
        *,
        agent_alias: str,
        gateway_instance_id: str,
        claim_ttl_ms: int,
        host: str = "",
        public_url: str = "",
        additional_directories: Sequence[str] | None = None,
        mcp_servers_json: str | None = None,
        quota: Quota | None = None,
    ) -> SessionRecord:
        """ACP ``session/fork``: a new row ``session_id`` whose history is a copy of
        ``parent_id``'s, written with the copy in one transaction (the parent is read under
        it: a turn of the parent is in the copy whole or not at all).

        The fork runs ``agent_alias`` in the parent's workspace, is owned like the parent
        (its owner, ``spawned_by`` and ``parent_session_key``: a sibling, never a child of
        it), keeps its title, plan, mode and config values, its extra roots and MCP server
        list unless given, and records ``forked_from``; it is created active and claimed by
        ``gateway_instance_id`` (generation 1). Its token totals start at 0 (the parent's
        turns were not its spending); its ``stored_bytes`` are the parent's history's (not
        its event log's, which is not copied), added to its owner's total — QuotaExceeded (nothing written) when ``quota`` refuses them.
        SessionNotFound for an unknown parent; SessionExists when ``session_id`` is taken;
        InvalidItem as :meth:`create_session` refuses.
        """

    # -- claims (several hosts, one store)

    async def hold_liveness(self, instance_id: str) -> None:
        """Vouch for ``instance_id``'s host for as long as this store is open: its claims
        stay live (until their lease) while this process lives, and end as soon as it dies,
        where the backend can tell (PostgreSQL); nothing elsewhere (SQLite: one host).
        The claiming methods call it for the instance they write a claim for."""
        del instance_id

    @abstractmethod
    async def claim(
        self, session_id: str, instance_id: str, *, host: str = "", ttl_ms: int,
        public_url: str = "",
    ) -> SessionRecord:
        """Make ``instance_id`` (on ``host``) the server of the session until now + ``ttl_ms``;
        the claim records ``public_url``, where clients reach that instance ("" = none).

        One conditional update: it succeeds when nobody holds the claim, when
        ``instance_id`` already does, or when the holder's claim has expired; else
        SessionActiveElsewhere with the live claim. Each success is the claim's next
        generation (``record.claim.generation``): a write fenced by an earlier one is
        refused from then on. SessionNotFound for an unknown id; InvalidItem for an empty
        instance id or a lease time that is not positive.
        """

    @abstractmethod
    async def renew_claims(
        self, instance_id: str, session_ids: Sequence[str], *, ttl_ms: int
    ) -> list[str]:
        """The heartbeat: extend to now + ``ttl_ms`` every claim of ``session_ids`` that
        ``instance_id`` still holds, in one transaction, keeping their generations; returns
        those ids (the others were taken over or are gone)."""

    @abstractmethod
    async def release_claim(self, session_id: str, instance_id: str,
                            generation: int = 0) -> bool:
        """The session stopped on ``instance_id``: mark it inactive and drop the claim, when
        that instance holds it (at ``generation``, when one is given) or nobody does. False
        (nothing changed) when another instance or generation holds it or the row is gone."""

    # -- agents

    @abstractmethod
    async def set_agent_capabilities(self, alias: str, capabilities_json: str) -> None:
        """Remember the ``agentCapabilities`` (JSON object text) ``alias``'s adapter
        advertised when it last started, replacing what was stored.

        InvalidItem when the alias is empty or holds a NUL, or the text is not a JSON
        object.
        """

    @abstractmethod
    async def get_agent_capabilities(self, alias: str) -> str:
        """The capabilities stored for ``alias`` ("" when none were recorded)."""

    # -- history

    @abstractmethod
    async def append_turn(
        self,
        session_id: str,
        items: Sequence[HistoryEntry],
        *,
        token_delta: int = 0,
        plan_json: str | None = None,
        usage: TurnUsage | None = None,
        holder: str | None = None,
        generation: int = 0,
        quota: Quota | None = None,
    ) -> AppendResult:
        """Append one completed turn in one transaction: every item or none (SPEC §8).

        Each item is checked with ``validate_item``; the first line of the first user
        text titles an untitled row (``prompt_title``); ``token_delta`` adds to the token
        count; ``usage`` is stored for the turn and added to the input/output totals; a
        plan replaces the stored one; the items' bytes (``item_bytes``) add to the row's
        and its owner's totals. With ``holder`` the turn is fenced like
        :meth:`update_session`'s write (SessionActiveElsewhere); with ``quota`` a turn that
        would take the row or its owner over a limit is QuotaExceeded. InvalidItem (empty
        turn, negative delta, bad item or plan), SessionNotFound and those two refusals
        leave the store unchanged: they are decided in the turn's own transaction.
        """

    @abstractmethod
    def iter_history_pages(
        self, session_id: str, *, after_seq: int = 0, page: int = DEFAULT_HISTORY_PAGE
    ) -> AsyncIterator[list[HistoryEntry]]:
        """The stored items after ``after_seq``, oldest first, as the backend reads them:
        one non-empty list of at most ``page`` items per read — and, for a session storing
        more than :data:`HISTORY_PAGE_BYTES`, of at most that many item bytes (a larger
        item alone) — so a big history is never held whole (SessionNotFound if no row)."""

    async def iter_history(
        self, session_id: str, *, after_seq: int = 0, page: int = DEFAULT_HISTORY_PAGE
    ) -> AsyncIterator[HistoryEntry]:
        """The stored items one by one (SessionNotFound if no such row)."""
        async for rows in self.iter_history_pages(session_id, after_seq=after_seq, page=page):
            for entry in rows:
                yield entry
