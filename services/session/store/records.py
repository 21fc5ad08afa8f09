"""The store's vocabulary: records, refusals, and the rules every backend applies.

A backend (:mod:`.sqlite.store`, :mod:`.postgres.store`) reads and writes these frozen dataclasses;
the rules here — which roles, states and tool statuses exist, what a valid
turn item is, how titles and SPEC §13 session keys are made — hold whatever
database is underneath, so a new backend reuses them instead of restating them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from services.common.protocol import (
    MSG_SESSION_ALREADY_ACTIVE,
    MSG_SESSION_NOT_FOUND,
    MSG_SESSION_QUOTA,
    MSG_TOKEN_QUOTA,
    session_key_for,
)

__all__ = [
    "BACKEND",
    "ITEM_FIELDS",
    "LATEST_SCHEMA_VERSION",
    "NO_CLAIM",
    "STATES",
    "TITLE_MAX",
    "TOOL_STATUSES",
    "TURN_STATUSES",
    "AppendResult",
    "Claim",
    "HistoryEntry",
    "InvalidItem",
    "NewSession",
    "Ownership",
    "Quota",
    "QuotaExceeded",
    "SessionActiveElsewhere",
    "SessionExists",
    "SessionNotFound",
    "SessionRecord",
    "StoreError",
    "StoreStatusInfo",
    "StoreUnavailable",
    "TurnUsage",
    "item_bytes",
    "item_values",
    "make_title",
    "prompt_title",
    "refusal",
    "session_key_for",
]

#: ``Ownership.backend`` of every row (SPEC §13).
BACKEND: Final = "acpx"
STATES: Final = ("active", "inactive")
TOOL_STATUSES: Final = ("", "pending", "in_progress", "completed", "failed")
#: A user item's status: "" for a turn that ended normally, "cancelled" for a turn the
#: client cancelled, stored with what was streamed before the cancel.
TURN_STATUSES: Final = ("", "cancelled")
TITLE_MAX: Final = 80


def make_title(text: str) -> str:
    """A one-line title of at most 80 characters (whitespace collapsed, ``…`` when cut)."""
    line = " ".join(text.split())
    if len(line) <= TITLE_MAX:
        return line
    return line[: TITLE_MAX - 1].rstrip() + "…"


def prompt_title(text: str) -> str:
    """The title a session gets from its first prompt: the first non-blank line."""
    for line in text.splitlines():
        if line.strip():
            return make_title(line)
    return ""


# ------------------------------------------------------------------ refusals


class StoreError(Exception):
    """Base class of the store's refusals."""


#: The schema version both backends migrate a store to, and the newest they open: a new
#: version adds one migration step to each backend (their version numbers are shared).
LATEST_SCHEMA_VERSION: Final = 12


class SchemaTooNew(StoreError):
    """The database was written by a newer acpgate (past :data:`LATEST_SCHEMA_VERSION`):
    never downgraded, never opened."""


class SessionNotFound(StoreError):
    """No row with that session id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(MSG_SESSION_NOT_FOUND.format(session_id=session_id))
        self.session_id = session_id


class SessionExists(StoreError):
    """A row with that session id already exists."""


class InvalidItem(StoreError):
    """A turn item (or the turn itself) is malformed; the whole turn was rolled back."""


class SessionActiveElsewhere(StoreError):
    """Another gateway instance holds an unexpired claim on the session (multi-host)."""

    def __init__(self, session_id: str, claim: Claim) -> None:
        super().__init__(MSG_SESSION_ALREADY_ACTIVE.format(session_id=session_id))
        self.session_id = session_id
        self.claim = claim


class StoreUnavailable(StoreError):
    """The database cannot be reached right now (a shared server down or unreachable)."""


class QuotaExceeded(StoreError):
    """A turn would take its session (``scope`` "session") or its owner (``scope`` "owner")
    over the store's byte quota; nothing of it was written. ``used`` is what would be stored
    with the turn, ``limit`` the quota."""

    def __init__(self, scope: str, used: int, limit: int) -> None:
        template = MSG_SESSION_QUOTA if scope == "session" else MSG_TOKEN_QUOTA
        super().__init__(template.format(used=used, limit=limit))
        self.scope = scope
        self.used = used
        self.limit = limit


# ------------------------------------------------------------------ records


@dataclass(frozen=True)
class NewSession:
    """A session row to create (``SessionStore.create_session``).

    The owner defaults to ``spawned_by``, else the session itself (SPEC §13);
    ``additional_directories`` are its extra roots, already resolved; a non-blank
    ``title`` goes through :func:`make_title`. With ``claim_ttl_ms`` the row is written
    claimed by ``gateway_instance_id`` on ``host`` (reachable at ``public_url``) for that
    long, as ``claim`` would take it.
    """

    session_id: str
    agent_alias: str
    workspace_dir: str
    spawned_by: str = ""
    parent_session_key: str = ""
    owner_session_key: str = ""
    gateway_instance_id: str = ""
    state: str = "active"
    mcp_servers_json: str = ""
    additional_directories: Sequence[str] = ()
    title: str = ""
    host: str = ""
    claim_ttl_ms: int | None = None
    public_url: str = ""
    #: A child session an agent runs under its parent (a v2 agent's subagent): no agent
    #: session of its own to restore.
    subagent: bool = False


@dataclass(frozen=True)
class Ownership:
    """The ownership metadata of SPEC §13."""

    session_key: str = ""
    spawned_by: str = ""
    parent_session_key: str = ""
    owner_session_key: str = ""
    agent_id: str = ""
    backend: str = BACKEND
    gateway_instance_id: str = ""
    created_at: int = 0


@dataclass(frozen=True)
class Claim:
    """Which gateway instance (on which host) runs the session's live process, until when.

    Several hosts may share one store; the instance serving a session holds its claim
    and renews it (a heartbeat) while the session is active there. A claim whose
    ``until`` has passed is dead — its host stopped renewing — and any instance may
    take the session over. An empty ``instance_id`` is no claim.
    """

    instance_id: str = ""
    host: str = ""
    #: Milliseconds since the epoch; the claim is live while ``now <= until``.
    until: int = 0
    #: How many times the row's claim was taken (a renewal keeps it): the fence a holder's
    #: writes carry, so a host that lost the claim cannot write after the new holder.
    generation: int = 0
    #: The holder's ``[gateway] public_url`` when it took the claim ("" = none configured):
    #: where a client reconnects to reach the session.
    public_url: str = ""

    def live(self, now: int) -> bool:
        """True while an instance holds the claim and has renewed it in time."""
        return bool(self.instance_id) and now <= self.until


NO_CLAIM: Final = Claim()


@dataclass(frozen=True)
class SessionRecord:
    """One stored session row (SPEC §8, §13)."""

    session_id: str
    agent_alias: str
    workspace_dir: str
    created_at: int
    last_activity: int
    token_count: int = 0
    plan_json: str = ""
    state: str = "inactive"
    lease_id: str = ""
    adapter_session_id: str = ""
    title: str = ""
    ownership: Ownership = field(default_factory=Ownership)
    #: Number of stored history items.
    message_count: int = 0
    #: The client's last ``mcpServers`` (a JSON array; "" = none stored).
    mcp_servers_json: str = ""
    #: The instance serving the session right now, if any (multi-host).
    claim: Claim = NO_CLAIM
    #: ACP additionalDirectories: extra roots (real paths), in the order given.
    additional_directories: tuple[str, ...] = ()
    #: The adapter's last reported or accepted session mode ("" = its default).
    mode_id: str = ""
    #: The adapter's last reported or accepted config values, JSON {configId: value}.
    config_json: str = ""
    #: Token totals over the stored turns.
    input_tokens: int = 0
    output_tokens: int = 0
    #: Bytes of the stored history items (:func:`item_bytes` summed) and of the logged events'
    #: payloads: what the quotas count.
    stored_bytes: int = 0
    #: The session this one was forked from (ACP ``session/fork``; "" = not a fork).
    forked_from: str = ""
    #: A child session an agent runs under its parent (:attr:`NewSession.subagent`).
    subagent: bool = False
    #: The ACP version its agent speaks, as its ``initialize`` chose it (0: not recorded).
    protocol_version: int = 0


@dataclass(frozen=True)
class Quota:
    """The store's byte quotas on history (``[store] max_session_bytes`` and
    ``max_token_bytes``); 0 is unlimited."""

    session_bytes: int = 0
    owner_bytes: int = 0


@dataclass(frozen=True)
class TurnUsage:
    """Token counts of one turn, as the agent reported them (all ≥ 0)."""

    input_tokens: int = 0
    output_tokens: int = 0
    thought_tokens: int = 0
    cached_read_tokens: int = 0
    cached_write_tokens: int = 0

    @property
    def total(self) -> int:
        """Input plus output tokens (what ``token_count`` adds up)."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class HistoryEntry:
    """One stored conversation item; ``seq``/``turn``/``created_at`` are set by the store."""

    role: str
    text: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    tool_kind: str = ""
    title: str = ""
    arguments_json: str = ""
    output: str = ""
    status: str = ""
    content_json: str = ""
    seq: int = 0
    turn: int = 0
    created_at: int = 0


#: What a caller says about an item besides its role, in field order. The same names
#: are fields of ``session_pb2.HistoryItem`` and columns of the history table.
ITEM_FIELDS: Final = (
    "text", "tool_call_id", "tool_name", "tool_kind", "title", "arguments_json", "output",
    "status", "content_json",
)
#: The :data:`ITEM_FIELDS` values of an entry (or of a message with those fields), as a tuple.
item_values: Final = operator.attrgetter(*ITEM_FIELDS)


def _utf8_len(text: str) -> int:
    # ASCII (the common case) needs no encoding pass; lone surrogates are counted, not refused.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def item_bytes(entry: HistoryEntry) -> int:
    """What one history item counts against the quotas: the UTF-8 bytes of its role and
    of every :data:`ITEM_FIELDS` value (as SQL ``octet_length`` counts the stored text)."""
    return _utf8_len(entry.role) + sum(map(_utf8_len, item_values(entry)))


@dataclass(frozen=True)
class AppendResult:
    """Where a turn landed: its number and the seq range of its items."""

    turn: int
    first_seq: int
    last_seq: int


@dataclass(frozen=True)
class StoreStatusInfo:
    """Whether the store is persistent, where, and why not (SPEC §2).

    ``db_path`` is the SQLite file, or the PostgreSQL URL without its password.
    """

    persistent: bool
    db_path: str
    fallback_reason: str
    schema_version: int
    #: "sqlite" or "postgresql".
    backend: str = "sqlite"


def refusal(session_id: str, rec: SessionRecord | None) -> StoreError:
    """Why a conditional write on ``session_id`` changed nothing, given the row as it is
    now: no row, or another instance's claim."""
    if rec is None:
        return SessionNotFound(session_id)
    return SessionActiveElsewhere(session_id, rec.claim)
