"""Who a client connection acts as: its principal, and whether it is the operator.

Every connection has a :class:`Caller`, set by its front door and never
guessed from an absence:

- stdio, and a gateway with ``require_auth = false``: :data:`LOCAL_OPERATOR`,
  the machine's local user (principal ``local``) — the operator, who lists and
  loads every stored session (it owns every file anyway);
- an authenticated gateway client: ``client:<token id>``, who sees and drives
  only the sessions of that token (a ``see-all`` grant adds read-only sight of
  other principals' sessions, looked up per request: :mod:`services.edge.tokens`);
- the stand-in connection of sessions the edge runs for another session
  (:class:`services.edge.sessions.hosted_port.HostedPort`): that session's principal, never
  the operator.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.principals import LOCAL_PRINCIPAL, client_principal, token_id_of

__all__ = ["LOCAL_OPERATOR", "Caller", "client_caller"]


@dataclass(frozen=True)
class Caller:
    """A connection's principal (``local`` or ``client:<token id>``) and operator flag."""

    principal: str
    #: The machine's operator: reads every stored row (session/list, load, resume, delete).
    operator: bool = False

    @property
    def token_id(self) -> str:
        """The gateway token the caller authenticated with ("" for the local user)."""
        return token_id_of(self.principal)

    @property
    def owner_key(self) -> str:
        """The ``owner_session_key`` of the sessions it creates: the client key; "" for the
        local principal, whose sessions own themselves (services.common.principals)."""
        return self.principal if self.token_id else ""


#: The machine's local user at its own client (stdio; a gateway without auth).
LOCAL_OPERATOR = Caller(LOCAL_PRINCIPAL, operator=True)


def client_caller(token_id: str) -> Caller:
    """The caller of a gateway client authenticated by ``token_id``."""
    return Caller(client_principal(token_id))
