"""Session visibility (SPEC §14): pure functions over row metadata, no lookups.

:func:`can_see` decides whether a :class:`Requester` may act on (list, read the
history of, send to, or ask the status of) a session row. It draws the
principal boundary first (:mod:`services.common.principals`): every row belongs
to one principal — its owning gateway token, or the local user — and

- the operator (the machine's local user at its own client, operator tools)
  sees every row;
- a row of another principal is invisible — unless the requester's principal
  holds the operator grant ``see-all``, and then only to the read actions
  (list, history, status): nobody sends into another principal's session;
- a principal requester (a client connection acting for ``client:<id>`` or
  ``local``) sees every row of its own principal;
- a session requester sees the rows of its own principal that SPEC §14's
  :func:`can_see_session_row` shows it.

``can_see_session_row(row, requester_session_key, visibility, a2a_policy)``
is SPEC §14's check *among the rows of one principal*. The same check guards
every action.

- ``owned(row)``: the requester is the row's ``ownerSessionKey``, ``spawnedBy``
  or ``parentSessionKey``.
- ``self``: the requester's own session only.
- ``tree``: own session + owned rows (same agent or cross-agent).
- ``agent``: same-agent rows, plus rows explicitly owned by the requester.
- ``all``: same-agent rows, cross-agent rows the a2a policy allows, and owned
  cross-agent rows even when a2a is disabled — so ``tree`` ⇒ ``all``.

The requester's agent id is parsed from its session key
(``agent:<agentId>:…``) unless the caller passes it explicitly (the servicer
does when the requester's own row is stored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.common.config import VISIBILITY_LEVELS
from services.common.principals import is_principal_key, principal_of_owner

__all__ = [
    "ACTIONS",
    "READ_ACTIONS",
    "A2aPolicy",
    "Requester",
    "VisibilityRow",
    "agent_id_from_session_key",
    "can_see",
    "can_see_session_row",
    "glob_match",
]

#: The four actions of SPEC §14; the same check guards each.
ACTIONS = ("list", "history", "send", "status")
#: The actions a ``see-all`` grant extends to other principals' rows (never "send").
READ_ACTIONS = ("list", "history", "status")


@dataclass(frozen=True)
class VisibilityRow:
    """The ownership metadata of one session row that visibility looks at (SPEC §13)."""

    key: str
    agent_id: str
    owner_session_key: str = ""
    spawned_by: str = ""
    parent_session_key: str = ""

    @property
    def principal(self) -> str:
        """The principal the row belongs to (its owner's; see services.common.principals)."""
        return principal_of_owner(self.owner_session_key)


@dataclass(frozen=True)
class Requester:
    """Who asks, as the servicer resolved it from the request and the stored rows.

    ``key`` is the requesting session's key, or a principal key (``client:<id>``,
    ``local``) for a client connection; ``principal`` whom it acts for ("" =
    unknown: it sees nothing); ``agent_id`` the requesting session's agent ("" =
    parse it from ``key``). ``operator`` sees every row; ``see_all`` (the
    principal's operator grant) extends the read actions to other principals.
    """

    key: str
    principal: str
    agent_id: str = ""
    operator: bool = False
    see_all: bool = False


@dataclass(frozen=True)
class A2aPolicy:
    """``[a2a]``: cross-agent visibility. An empty allow list with ``enabled`` allows all."""

    enabled: bool = False
    allow: tuple[str, ...] = ()

    def allows(self, requester_agent_id: str, target_agent_id: str) -> bool:
        """True when a session of one agent may see a session of the other."""
        if requester_agent_id and requester_agent_id == target_agent_id:
            return True
        if not self.enabled:
            return False
        if not self.allow:
            return True
        return _allowed(self.allow, requester_agent_id) and _allowed(self.allow, target_agent_id)


def _allowed(patterns: Sequence[str], agent_id: str) -> bool:
    return any(glob_match(p, agent_id) for p in patterns)


def glob_match(pattern: str, name: str) -> bool:
    """Match ``name`` against an a2a allow pattern.

    ``*`` matches any run of characters; there is no other metacharacter.
    Exact patterns (no ``*``) compare case-sensitively; globs case-insensitively.
    A blank pattern matches nothing. Runs in linear passes with ``str.find`` —
    no regex, so no catastrophic backtracking however many ``*`` there are:
    with only ``*`` wildcards, taking each literal segment at its leftmost
    possible position is always a correct strategy.
    """
    pattern = pattern.strip()
    if not pattern:
        return False
    if "*" not in pattern:
        return pattern == name
    pat = pattern.casefold()
    text = name.casefold()
    segments = pat.split("*")
    head, *middle, tail = segments
    if not text.startswith(head):
        return False
    pos = len(head)
    for seg in middle:
        if not seg:
            continue
        found = text.find(seg, pos)
        if found < 0:
            return False
        pos = found + len(seg)
    # The tail must fit after everything already consumed, at the very end.
    return len(text) - len(tail) >= pos and text.endswith(tail)


def agent_id_from_session_key(session_key: str) -> str:
    """``agent:<agentId>:…`` → ``agentId``; "" for keys of any other shape."""
    parts = session_key.split(":")
    if len(parts) >= 3 and parts[0] == "agent" and parts[1]:
        return parts[1]
    return ""


def can_see(row: VisibilityRow, requester: Requester, visibility: str,
            a2a_policy: A2aPolicy, action: str = "list") -> bool:
    """Whether ``requester`` may ``action`` ``row`` (rules: the module doc).

    Pure. Unknown visibility levels and actions raise ``ValueError`` (callers
    validate input first).
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    if visibility not in VISIBILITY_LEVELS:
        raise ValueError(f"unknown visibility {visibility!r}")
    if requester.operator:
        return True
    if not requester.principal:
        return False
    if row.principal != requester.principal:
        return requester.see_all and action in READ_ACTIONS
    if is_principal_key(requester.key):
        return requester.key == requester.principal
    return can_see_session_row(row, requester.key, visibility, a2a_policy,
                               requester_agent_id=requester.agent_id or None)


def can_see_session_row(
    row: VisibilityRow,
    requester_session_key: str,
    visibility: str,
    a2a_policy: A2aPolicy,
    *,
    requester_agent_id: str | None = None,
) -> bool:
    """Whether ``requester_session_key`` may see ``row`` under ``visibility`` (SPEC §14),
    both of one principal (:func:`can_see` draws that boundary first).

    Pure: decides from the row's metadata alone. Unknown visibility levels
    raise ``ValueError`` (callers validate input first). An empty requester key
    sees nothing.
    """
    if visibility not in VISIBILITY_LEVELS:
        raise ValueError(f"unknown visibility {visibility!r}")
    if not requester_session_key:
        return False
    own = row.key == requester_session_key
    if visibility == "self":
        return own
    owned = requester_session_key in (
        row.owner_session_key,
        row.spawned_by,
        row.parent_session_key,
    )
    if visibility == "tree":
        return own or owned
    req_agent = (
        requester_agent_id
        if requester_agent_id is not None
        else agent_id_from_session_key(requester_session_key)
    )
    same_agent = bool(req_agent) and row.agent_id == req_agent
    if visibility == "agent":
        return own or owned or same_agent
    # all
    return own or owned or same_agent or a2a_policy.allows(req_agent, row.agent_id)
