"""Principals: who a session belongs to, as pure functions over owner keys.

A principal is the party sessions are owned by and visibility widens within:

- ``client:<token id>``: a gateway client authenticated by that token. The
  sessions it creates are owned by that key, and so are their spawned
  descendants (a child is owned by its parent's owner).
- ``local``: the machine's local user (stdio, and a gateway without auth). Its
  sessions are owned by their own session key, and their spawned descendants
  by their root's key — so every row whose owner is *not* a client key (its own
  key, a local ancestor's key, or empty) is the local principal's. Rows stored
  before principals existed follow the very same rule: nothing is migrated.

The session service (visibility) and the edge (grants, session shares) both
read a row's principal here, so there is one rule for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = [
    "CLIENT_PRINCIPAL_PREFIX",
    "LOCAL_PRINCIPAL",
    "client_principal",
    "is_principal_key",
    "owner_label",
    "principal_of_owner",
    "token_id_of",
]

#: The owner key prefix of a gateway client's sessions.
CLIENT_PRINCIPAL_PREFIX: Final = "client:"
#: The machine's local user: stdio sessions and every row no client owns.
LOCAL_PRINCIPAL: Final = "local"


def client_principal(token_id: str) -> str:
    """The principal of a gateway client authenticated by ``token_id``."""
    return f"{CLIENT_PRINCIPAL_PREFIX}{token_id}"


def token_id_of(principal: str) -> str:
    """The token id a ``client:<token id>`` principal stands for; "" for any other."""
    if principal.startswith(CLIENT_PRINCIPAL_PREFIX):
        return principal[len(CLIENT_PRINCIPAL_PREFIX):]
    return ""


def principal_of_owner(owner_session_key: str) -> str:
    """The principal of a row owned by ``owner_session_key``: the client key when a
    token owns it, else :data:`LOCAL_PRINCIPAL`."""
    if token_id_of(owner_session_key):
        return owner_session_key
    return LOCAL_PRINCIPAL


def owner_label(owner_session_key: str, names: Mapping[str, str]) -> str:
    """Who owns a row, for an operator: ``local``, or its token's name from ``names``
    (token id → name; ``token <id>`` when unnamed). Never the token itself."""
    principal = principal_of_owner(owner_session_key)
    if principal == LOCAL_PRINCIPAL:
        return "local"
    token_id = token_id_of(principal)
    return names.get(token_id) or f"token {token_id}"


def is_principal_key(key: str) -> bool:
    """True when ``key`` names a principal (``local``, ``client:<id>``) rather than a
    session (``agent:<alias>:…``)."""
    return key == LOCAL_PRINCIPAL or bool(token_id_of(key))
