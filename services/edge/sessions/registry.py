"""The edge's active sessions and their slots: ``max_sessions`` and each token's share (SPEC §9).

``[acp] max_sessions`` bounds the sessions one edge runs or sets up at once;
``max_sessions_per_token`` (default: ``max_sessions`` divided among the active
tokens, :func:`token_session_share`) bounds those of one gateway token's principal,
so that one token — or one spawn chain, whose children belong to their root's
token — cannot take every slot and lock the other tokens out. Counted per principal:
the active sessions whose row it owns (hosted ones too: sessions the edge runs for
another session run adapters like any) plus the slots reserved for it while a
session is set up (new, load/resume, spawn). The local principal (stdio, a gateway without
auth) has no share of its own: ``max_sessions`` bounds it.

An install with one token — one person's bridge, console and scripts — lets it use
every slot; with several tokens each is sure of its part, whatever the others hold (the
parts add up to at most ``max_sessions``). :class:`TokenShares` reads the count from the
token store (``TokenWatch``: one cheap ``PRAGMA data_version`` when nothing changed), so
``acpgate token create`` / ``revoke`` change the share from the next session on; a
token already above a smaller share keeps its sessions and opens no more.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from services.common.config import AcpSection
from services.common.principals import token_id_of
from services.edge.backends.session_types import SLOT_SESSION, SessionActivity
from services.edge.sessions.activity import (
    Reported,
    Shape,
    activity_of,
    setting_up,
    shape,
    shape_of,
)
from services.edge.tokens import TokenWatch

__all__ = ["Registered", "SessionRegistry", "SlotRefusal", "TokenShares", "token_session_share"]


class Registered(Reported, Protocol):
    """What the registry reads of an active session (an ``EdgeSession``): what its
    heartbeat reports, and the principal its slot counts against."""

    @property
    def principal(self) -> str:
        """The principal the session belongs to."""


R = TypeVar("R", bound=Registered)


def token_session_share(acp: AcpSection, active_tokens: int = 1) -> int:
    """The sessions one token's principal may hold: ``max_sessions_per_token``, else (0)
    ``max_sessions`` divided among the ``active_tokens`` (every slot with one), at least
    one (services.edge.sessions.shares)."""
    if acp.max_sessions_per_token > 0:
        return acp.max_sessions_per_token
    return max(1, acp.max_sessions // max(1, active_tokens))


class TokenShares:
    """The current share, from the number of active tokens in the token store."""

    def __init__(self, acp: AcpSection, token_db: Path) -> None:
        self._acp = acp
        self._watch = TokenWatch(token_db)
        self._lock = asyncio.Lock()
        self._active = 1

    async def current(self) -> int:
        """The share now (the store read again only when it changed)."""
        if self._acp.max_sessions_per_token > 0:
            return self._acp.max_sessions_per_token
        async with self._lock:
            ids = await asyncio.to_thread(self._watch.active_ids_if_changed)
        if ids is not None:
            self._active = max(1, len(ids))
        return token_session_share(self._acp, self._active)

    def use(self, acp: AcpSection) -> None:
        """A reloaded ``[acp]``: its share rule holds from the next session on."""
        self._acp = acp

    def close(self) -> None:
        """Close the store's read connection."""
        self._watch.close()


@dataclass(frozen=True)
class SlotRefusal:
    """Why no slot was taken: the limit reached, and whether it was the token's share."""

    limit: int
    per_token: bool


@dataclass
class SessionRegistry(Generic[R]):
    """Active sessions of this edge plus reserved slots (new/restoring), SPEC §9."""

    max_sessions: int
    #: The share of one token's principal (``token_session_share``; kept current by
    #: ``TokenShares`` before each reservation).
    per_token: int = 0
    active: dict[str, R] = field(default_factory=dict)
    reserved: int = 0
    #: Reserved slots by the principal they count against.
    reserved_by: Counter[str] = field(default_factory=Counter)
    #: Session ids being restored right now (a second load/resume must not race them).
    restoring: set[str] = field(default_factory=set)
    #: Session ids of new sessions being set up.
    creating: set[str] = field(default_factory=set)
    #: Called when a slot is let go or a session starts (an edge worker then reports at
    #: once).
    on_change: Callable[[], None] | None = None

    def picture(self) -> Counter[tuple[int, str]]:
        """The sessions held — active and reserved — by principal, as
        ``(SLOT_KIND_SESSION, principal)`` (an edge worker's report)."""
        held = Counter(s.principal for s in self.active.values())
        held.update(self.reserved_by)
        return Counter({(SLOT_SESSION, p): n for p, n in held.items() if n})

    def changed(self) -> None:
        """A slot was let go, or a session started."""
        if self.on_change is not None:
            self.on_change()

    def serving(self) -> dict[str, SessionActivity]:
        """Every session this edge serves or is setting up — the claims it must renew —
        with what each is doing (what the heartbeat reports, services.edge.sessions.activity)."""
        out = {sid: activity_of(session) for sid, session in self.active.items()}
        for sid in (*self.restoring, *self.creating):
            out.setdefault(sid, setting_up(sid))
        return out

    def shapes(self) -> set[Shape]:
        """What :meth:`serving` would report, less the last-activity times (cheaper: no
        report is built; the heartbeat compares it between its reports)."""
        out = {shape_of(session) for session in self.active.values()}
        setting = [sid for sid in (*self.restoring, *self.creating) if sid not in self.active]
        return out | shape(setting_up(sid) for sid in setting) if setting else out

    def held_by(self, principal: str) -> int:
        """The sessions ``principal`` holds: active ones it owns and slots reserved for it."""
        active = sum(1 for s in self.active.values() if s.principal == principal)
        return active + self.reserved_by[principal]

    def refusal(self, principal: str) -> SlotRefusal | None:
        """Why one more session of ``principal`` may not be set up now, or None."""
        if len(self.active) + self.reserved >= self.max_sessions:
            return SlotRefusal(self.max_sessions, per_token=False)
        if self.per_token and token_id_of(principal) and \
                self.held_by(principal) >= self.per_token:
            return SlotRefusal(self.per_token, per_token=True)
        return None

    def try_reserve(self, principal: str) -> SlotRefusal | None:
        """Take a slot for a session of ``principal`` being created or restored; the refusal
        when the edge or the principal's share is full (nothing taken then)."""
        refused = self.refusal(principal)
        if refused is None:
            self.reserved += 1
            self.reserved_by[principal] += 1
        return refused

    def move(self, from_principal: str, to_principal: str) -> SlotRefusal | None:
        """Count a reserved slot against ``to_principal`` instead (a restore learns whose
        session it brings up only from its row); the refusal, and nothing moved, when
        that principal's share is full."""
        if from_principal == to_principal:
            return None
        if self.per_token and token_id_of(to_principal) and \
                self.held_by(to_principal) >= self.per_token:
            return SlotRefusal(self.per_token, per_token=True)
        self._drop(from_principal)
        self.reserved_by[to_principal] += 1
        return None

    def unreserve(self, principal: str) -> None:
        """Give back a slot reserved for ``principal``."""
        self.reserved = max(0, self.reserved - 1)
        self._drop(principal)
        self.changed()

    def force_move(self, from_principal: str, to_principal: str) -> None:
        """Count a reserved slot against ``to_principal`` whatever its share (a move undone)."""
        self._drop(from_principal)
        self.reserved_by[to_principal] += 1
        self.changed()

    def _drop(self, principal: str) -> None:
        self.reserved_by[principal] -= 1
        if self.reserved_by[principal] <= 0:
            del self.reserved_by[principal]
