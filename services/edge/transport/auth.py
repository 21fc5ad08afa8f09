"""Gateway authentication before the WebSocket upgrade (SPEC §11).

The token comes from, in this order: ``Authorization: Bearer <t>``, a
``Sec-WebSocket-Protocol`` entry ``bearer.<t>``, ``?token=<t>``. The first
source present is the one checked (a wrong header token is not rescued by a
right query token). Tokens never appear in logs or error bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from urllib.parse import parse_qs, urlsplit

from services.edge.caller import LOCAL_OPERATOR, Caller, client_caller
from services.edge.tokens import TokenStore

BEARER_SUBPROTOCOL_PREFIX = "bearer."


class TokenSource(Enum):
    """Where a presented token was found."""

    HEADER = "authorization-header"
    SUBPROTOCOL = "subprotocol"
    QUERY = "query"


@dataclass(frozen=True)
class PresentedToken:
    """A token a client presented and where it came from (the secret is not for logs)."""

    secret: str
    source: TokenSource

    def __repr__(self) -> str:
        # Keep the secret out of any accidental log line or traceback.
        return f"PresentedToken(source={self.source.value}, secret=<redacted>)"


def offered_subprotocols(header_values: Iterable[str]) -> list[str]:
    """Every entry of the (possibly repeated, comma-separated) ``Sec-WebSocket-Protocol``."""
    out: list[str] = []
    for value in header_values:
        out.extend(p.strip() for p in value.split(",") if p.strip())
    return out


def choose_subprotocol(offered: Iterable[str], preferred: str) -> str | None:
    """``preferred`` when offered, else the first ``bearer.<t>`` entry (a browser that
    offered only its token must get one of its offers back), else none."""
    offers = list(offered)
    if preferred in offers:
        return preferred
    return next((p for p in offers if p.startswith(BEARER_SUBPROTOCOL_PREFIX)), None)


def extract_token(
    authorization: str | None, subprotocols: Iterable[str], path: str
) -> PresentedToken | None:
    """The first token present in header, subprotocol list, then query string."""
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return PresentedToken(value.strip(), TokenSource.HEADER)
    for proto in subprotocols:
        if proto.startswith(BEARER_SUBPROTOCOL_PREFIX) and len(proto) > len(BEARER_SUBPROTOCOL_PREFIX):
            return PresentedToken(proto[len(BEARER_SUBPROTOCOL_PREFIX):], TokenSource.SUBPROTOCOL)
    query = parse_qs(urlsplit(path).query, keep_blank_values=True)
    for value in query.get("token", []):
        if value:
            return PresentedToken(value, TokenSource.QUERY)
    return None


class Authenticator:
    """Decides whether a handshake may upgrade; ``require_auth = false`` admits everyone."""

    def __init__(self, store: TokenStore, *, require_auth: bool = True) -> None:
        self._store = store
        self.require_auth = require_auth

    async def admit(self, token: PresentedToken | None) -> bool:
        """True when the connection may proceed (the store is read off the event loop)."""
        return await self.caller(token) is not None

    async def caller(self, token: PresentedToken | None) -> Caller | None:
        """Who the connection acts as, or None when it may not proceed.

        With auth on, a connection is the principal ``client:<token id>``: the
        sessions it creates are owned by that key, and session/list or a load
        sees only those (SPEC §8 "visible to the caller", §14). With
        auth off every connection is the local operator, as on stdio: whoever
        may connect may run agents on this machine anyway.
        """
        if not self.require_auth:
            return LOCAL_OPERATOR
        if token is None:
            return None
        token_id = await asyncio.to_thread(self._store.identify, token.secret)
        return None if token_id is None else client_caller(token_id)
