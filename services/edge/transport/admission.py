"""Who may hold a gateway connection now: the global limit and each token's share (SPEC §11).

``[gateway] max_connections`` bounds the whole gateway; ``max_connections_per_token``
(default: a quarter of it) bounds one token, so that a single client holding
every socket cannot lock all the others out. :class:`LiveConnections` is the
table both checks read — and the one the revocation watch finds a revoked
token's connections in. A connection without a token (``require_auth = false``)
counts against the global limit only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Generic, TypeVar

from services.common.config import GatewaySection
from services.edge.backends.session_types import SLOT_CONNECTION
from services.edge.sessions.worker_link import Held, WorkerLink

__all__ = ["TOO_MANY", "TOO_MANY_FOR_TOKEN", "LiveConnections", "Refusal", "token_share"]

C = TypeVar("C")


#: The ``reason`` labels of ``acpgate_ws_rejected_total`` this table decides.
TOO_MANY = "too_many_connections"
TOO_MANY_FOR_TOKEN = "too_many_connections_for_token"


def token_share(gw: GatewaySection) -> int:
    """The connections one token may hold: ``max_connections_per_token``, else (0) a
    quarter of ``max_connections``, at least one."""
    if gw.max_connections_per_token > 0:
        return gw.max_connections_per_token
    return max(1, gw.max_connections // 4)


@dataclass(frozen=True)
class Refusal:
    """Why a handshake may not become a connection now (answered with 503)."""

    #: ``TOO_MANY`` or ``TOO_MANY_FOR_TOKEN``.
    reason: str
    #: The limit that was reached.
    limit: int

    @property
    def body(self) -> str:
        """The 503 response body."""
        whose = " for this token" if self.reason == TOO_MANY_FOR_TOKEN else ""
        return f"Too many connections{whose} (limit {self.limit})\n"


class LiveConnections(Generic[C]):
    """The open connections, by the token they authenticated with ("" = none)."""

    def __init__(self, max_connections: int, per_token: int) -> None:
        self.max_connections = max_connections
        self.per_token = per_token
        self._token_of: dict[C, str] = {}
        self._per_token: Counter[str] = Counter()
        #: Refusals so far, by reason (for ``/metrics``).
        self.rejected: Counter[str] = Counter({TOO_MANY: 0, TOO_MANY_FOR_TOKEN: 0})
        #: This edge's link to the other workers on its port (None: the only edge).
        self.shared: WorkerLink | None = None

    def __len__(self) -> int:
        return len(self._token_of)

    def refusal(self, token_id: str) -> Refusal | None:
        """Why one more connection of ``token_id`` may not open now (counted), or ``None``."""
        refusal = None
        if len(self._token_of) >= self.max_connections:
            refusal = Refusal(TOO_MANY, self.max_connections)
        elif token_id and self._per_token[token_id] >= self.per_token:
            refusal = Refusal(TOO_MANY_FOR_TOKEN, self.per_token)
        if refusal is not None:
            self.rejected[refusal.reason] += 1
        return refusal

    async def admit(self, conn: C, token_id: str) -> Refusal | None:
        """Count ``conn`` as open for ``token_id`` if this edge's limits and — with several
        workers — the host's allow it; else the refusal (counted), nothing held."""
        refusal = self.refusal(token_id)
        if refusal is not None:
            return refusal
        self.add(conn, token_id)
        if self.shared is None:
            return None
        refused = await self.shared.take(
            SLOT_CONNECTION, token_id, self.shared.counted(),
            limit=self.max_connections, share=self.per_token if token_id else 0)
        if refused is None:
            return None
        self.discard(conn)
        refusal = Refusal(TOO_MANY_FOR_TOKEN if refused.per_principal else TOO_MANY,
                          refused.limit)
        self.rejected[refusal.reason] += 1
        return refusal

    def picture(self) -> Held:
        """The connections held, by token ("" = without one), for the worker's report."""
        held: Held = Counter({(SLOT_CONNECTION, t): n
                              for t, n in self._per_token.items()})
        untokened = len(self._token_of) - sum(self._per_token.values())
        if untokened:
            held[(SLOT_CONNECTION, "")] = untokened
        return held

    def add(self, conn: C, token_id: str) -> None:
        """Count ``conn`` as open for ``token_id``."""
        self._token_of[conn] = token_id
        if token_id:
            self._per_token[token_id] += 1

    def discard(self, conn: C) -> None:
        """``conn`` closed (a connection never added is ignored)."""
        token_id = self._token_of.pop(conn, None)
        if token_id is not None and self.shared is not None:
            self.shared.changed()
        if token_id:
            self._per_token[token_id] -= 1
            if self._per_token[token_id] <= 0:
                del self._per_token[token_id]

    def token_ids(self) -> set[str]:
        """The tokens that hold at least one connection."""
        return set(self._per_token)

    def of_tokens(self, token_ids: set[str]) -> list[C]:
        """The open connections of any of ``token_ids``."""
        return [conn for conn, token_id in self._token_of.items() if token_id in token_ids]
