"""One-shot grants to take an attach's pipes over the fd socket.

An ``Attach`` stream opened with ``fd_pass`` gets a :class:`FdGrant` with its
first response: a random id, bound to the lease and to the attach (the
channel's generation: a later attacher of the same lease never inherits it).
It is redeemed at most once — any request naming it consumes it, a right proof
or not — and revoked when its stream ends or chooses the stream instead. The
proof (:func:`services.common.fd_channel.grant_proof`) is keyed with the
install's service credential, so a grant id alone is worth nothing.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from dataclasses import dataclass, field

from services.common.fd_channel import FdGrantRequest, channel_key, grant_proof
from services.lifecycle.attach.channel import AdapterChannel

__all__ = ["FdGrant", "FdGrants"]

#: Random bytes of a grant id.
GRANT_ID_BYTES = 16


@dataclass(eq=False)
class FdGrant:
    """An open grant: whose pipes, for which attach, and whether it was redeemed."""

    grant_id: str
    channel: AdapterChannel
    generation: int
    #: Set (to nothing) when the pipes were handed over on this grant.
    redeemed: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def lease_id(self) -> str:
        """The lease whose pipes the grant is for."""
        return self.channel.lease_id


class FdGrants:
    """The open grants of one lifecycle service, and the key their proofs are made with."""

    def __init__(self, credential: str) -> None:
        self._key = channel_key(credential)
        self._open: dict[str, FdGrant] = {}

    def issue(self, channel: AdapterChannel) -> FdGrant:
        """A grant for the attach that holds ``channel`` now."""
        grant = FdGrant(secrets.token_hex(GRANT_ID_BYTES), channel, channel.generation)
        self._open[grant.grant_id] = grant
        return grant

    def revoke(self, grant: FdGrant) -> None:
        """Forget ``grant`` (its stream ended, or chose the stream)."""
        self._open.pop(grant.grant_id, None)

    def redeem(self, request: FdGrantRequest) -> FdGrant | None:
        """The grant ``request`` redeems, consumed; None unless it names an open grant for
        that lease and attach, with the right proof, while that attach holds the channel."""
        grant = self._open.pop(request.grant_id, None)
        if grant is None:
            return None
        proof = grant_proof(self._key, grant.lease_id, grant.generation, grant.grant_id)
        if not hmac.compare_digest(request.proof.encode(), proof.encode()):
            return None
        if (request.lease_id, request.generation) != (grant.lease_id, grant.generation):
            return None
        channel = grant.channel
        if not channel.attached or channel.generation != grant.generation:
            return None
        return grant

    def __len__(self) -> int:
        return len(self._open)
