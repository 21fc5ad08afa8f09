"""The session service's records and arguments as the edge reads and writes them.

:class:`SessionRow` (with its :class:`Claim` and :class:`Ownership`) and the composite
answers are frozen dataclasses, converted once by :mod:`.session`. The messages the edge
builds or reads item by item on hot paths (``HistoryItem``, which the shared turn
accumulator builds; ``LogEvent``, read by the thousand in a replay) are the contract's own
types, named here so that callers import them from the backend rather than from the
generated code. A resolved agent's sealed launch spec is carried as the contract's opaque
``SealedLaunch``: the edge only hands it on to the lifecycle service. Enum values are the
contract's numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from acpgate_contracts.session.v1 import session_pb2
from services.common.policy import SecurityPolicy

__all__ = [
    "ACTIVITY_IDLE", "ACTIVITY_SETTING_UP", "ACTIVITY_TURN", "ACTIVITY_WAITING",
    "OPERATION_EXECUTE", "OPERATION_READ", "OPERATION_WRITE", "SESSION_ACTIVE",
    "SLOT_CONNECTION", "SLOT_SESSION", "SLOT_SESSION_RELEASABLE",
    "AgentList", "AgentSummary", "Claim", "EventBatch", "EventPage", "Forked", "HistoryItem",
    "LiveSession", "LogEvent", "NewSession", "OperationVerdict", "Ownership", "Reader",
    "ResolvedAgent", "RowUpdate", "SentTo", "SessionActivity", "SessionPage", "SessionRow",
    "SessionStatus", "SlotGrant", "Spawned", "StoreStatus", "TurnUsage", "WorkerCounters",
    "Workspace",
]

# The contract's messages the edge uses as they are (see the module doc).
HistoryItem = session_pb2.HistoryItem
LogEvent = session_pb2.LogEvent

#: ``SessionRow.state`` of a session some host serves.
SESSION_ACTIVE: Final[int] = session_pb2.SESSION_STATE_ACTIVE
#: What a session is doing, in ``SessionActivity.state``.
ACTIVITY_SETTING_UP: Final[int] = session_pb2.ACTIVITY_STATE_SETTING_UP
ACTIVITY_IDLE: Final[int] = session_pb2.ACTIVITY_STATE_IDLE
ACTIVITY_TURN: Final[int] = session_pb2.ACTIVITY_STATE_TURN
ACTIVITY_WAITING: Final[int] = session_pb2.ACTIVITY_STATE_WAITING
#: What a slot shared by several edge workers counts.
SLOT_CONNECTION: Final[int] = session_pb2.SLOT_KIND_CONNECTION
SLOT_SESSION: Final[int] = session_pb2.SLOT_KIND_SESSION
SLOT_SESSION_RELEASABLE: Final[int] = session_pb2.SLOT_KIND_SESSION_RELEASABLE
#: The operations ``CheckOperation`` judges.
OPERATION_READ: Final[int] = session_pb2.OPERATION_READ
OPERATION_WRITE: Final[int] = session_pb2.OPERATION_WRITE
OPERATION_EXECUTE: Final[int] = session_pb2.OPERATION_EXECUTE


@dataclass(frozen=True, slots=True)
class ResolvedAgent:
    """An agent alias as the session service resolved it for a session or a pool."""

    alias: str = ""
    #: ``builtin`` or ``acp`` (services.common.protocol's agent kinds).
    kind: str = ""
    command: str = ""
    args: tuple[str, ...] = ()
    #: The configured environment values (secrets: scrubbed from the adapter's stderr).
    env: Mapping[str, str] = field(default_factory=dict)
    agent_workspace: str = ""
    autonomy: str = ""
    default_model: str = ""
    #: What the alias's adapter advertised last, as the service recorded it ("" none).
    adapter_capabilities_json: str = ""
    #: Warm adapters its pool keeps (0: none).
    warm: int = 0
    watch_paths: tuple[str, ...] = ()
    #: The sealed launch spec, handed on to the lifecycle service as it is.
    launch: bytes = b""
    pass_env: tuple[str, ...] = ()
    #: The ACP protocol version the adapter speaks (0: the default).
    protocol: int = 0

    @classmethod
    def of(cls, a: session_pb2.ResolvedAgent) -> ResolvedAgent:
        return cls(
            alias=a.alias, kind=a.kind, command=a.command, args=tuple(a.args),
            env=dict(a.env), agent_workspace=a.agent_workspace, autonomy=a.autonomy,
            default_model=a.default_model,
            adapter_capabilities_json=a.adapter_capabilities_json, warm=a.warm,
            watch_paths=tuple(a.watch_paths), launch=a.launch.SerializeToString(), pass_env=tuple(a.pass_env),
            protocol=a.protocol)


@dataclass(frozen=True, slots=True)
class AgentSummary:
    """One agent a connection may choose."""

    alias: str
    kind: str
    description: str
    default_model: str


@dataclass(frozen=True, slots=True)
class Claim:
    """Which host serves a session, until when, and at which generation."""

    instance_id: str = ""
    host: str = ""
    until: int = 0
    generation: int = 0
    public_url: str = ""

    @classmethod
    def of(cls, c: session_pb2.Claim) -> Claim:
        return cls(c.instance_id, c.host, c.until, c.generation, c.public_url)


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who a session belongs to and who spawned it."""

    session_key: str = ""
    spawned_by: str = ""
    parent_session_key: str = ""
    owner_session_key: str = ""
    agent_id: str = ""
    backend: str = ""
    gateway_instance_id: str = ""
    created_at: int = 0

    @classmethod
    def of(cls, o: session_pb2.Ownership) -> Ownership:
        return cls(o.session_key, o.spawned_by, o.parent_session_key, o.owner_session_key,
                   o.agent_id, o.backend, o.gateway_instance_id, o.created_at)


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A stored session, as the session service returned it."""

    session_id: str = ""
    agent_alias: str = ""
    workspace_dir: str = ""
    created_at: int = 0
    last_activity: int = 0
    token_count: int = 0
    plan_json: str = ""
    state: int = 0
    lease_id: str = ""
    adapter_session_id: str = ""
    title: str = ""
    ownership: Ownership = field(default_factory=Ownership)
    mcp_servers_json: str = ""
    claim: Claim = field(default_factory=Claim)
    additional_directories: tuple[str, ...] = ()
    mode_id: str = ""
    config_json: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    stored_bytes: int = 0
    forked_from: str = ""
    #: A child session an agent runs under its parent: never restored itself.
    subagent: bool = False
    #: The ACP version its agent speaks, as its ``initialize`` chose it (0: not recorded).
    protocol_version: int = 0

    @classmethod
    def of(cls, r: session_pb2.SessionRow) -> SessionRow:
        return cls(
            session_id=r.session_id, agent_alias=r.agent_alias, workspace_dir=r.workspace_dir,
            created_at=r.created_at, last_activity=r.last_activity, token_count=r.token_count,
            plan_json=r.plan_json, state=r.state, lease_id=r.lease_id,
            adapter_session_id=r.adapter_session_id, title=r.title,
            ownership=Ownership.of(r.ownership), mcp_servers_json=r.mcp_servers_json,
            claim=Claim.of(r.claim), additional_directories=tuple(r.additional_directories),
            mode_id=r.mode_id, config_json=r.config_json, input_tokens=r.input_tokens,
            output_tokens=r.output_tokens, stored_bytes=r.stored_bytes,
            forked_from=r.forked_from, subagent=r.subagent,
            protocol_version=r.protocol_version)


@dataclass(frozen=True, slots=True)
class SessionActivity:
    """What a session served here is doing, as reported to the session service."""

    session_id: str
    state: int = 0
    #: Questions to its client still open.
    waiting_requests: int = 0
    #: Wall clock, milliseconds.
    last_activity: int = 0
    lease_id: str = ""
    attached_clients: int = 0
    detached: bool = False

    @classmethod
    def of(cls, a: session_pb2.SessionActivity) -> SessionActivity:
        return cls(a.session_id, a.state, a.waiting_requests, a.last_activity, a.lease_id,
                   a.attached_clients, a.detached)


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """The tokens one turn used."""

    input_tokens: int = 0
    output_tokens: int = 0
    thought_tokens: int = 0
    cached_read_tokens: int = 0
    cached_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads stored sessions: the operator (any row), or a principal (its own rows;
    to list, every principal's with the ``see-all`` grant). Never empty by accident."""

    operator: bool = False
    requester_session_key: str = ""
    see_all_principals: bool = False


@dataclass(frozen=True, slots=True)
class RowUpdate:
    """The fields of a row one ``UpdateSession`` changes (None: left as stored), fenced by
    the writer's claim ``(holder_instance_id, claim_generation)``."""

    session_id: str
    holder_instance_id: str = ""
    claim_generation: int = 0
    state: int | None = None
    lease_id: str | None = None
    adapter_session_id: str | None = None
    agent_alias: str | None = None
    title: str | None = None
    mcp_servers_json: str | None = None
    mode_id: str | None = None
    config_json: str | None = None
    #: An empty sequence is a change too (no extra roots any more).
    additional_directories: Sequence[str] | None = None
    #: The ACP version the session's agent speaks (:attr:`SessionRow.protocol_version`).
    protocol_version: int | None = None


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """How the session service stores sessions."""

    persistent: bool
    fallback_reason: str
    claim_ttl_ms: int


@dataclass(frozen=True, slots=True)
class Workspace:
    """A client's ``cwd`` and extra roots as the session service resolved them."""

    workspace_dir: str
    is_agent_workspace: bool
    additional_directories: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OperationVerdict:
    """``CheckOperation``'s answer for one file or terminal operation."""

    allowed: bool
    reason: str
    resolved_path: str


@dataclass(frozen=True, slots=True)
class AgentList:
    """The agents a connection may choose, and the one it gets without choosing."""

    agents: tuple[AgentSummary, ...]
    default_alias: str


@dataclass(frozen=True, slots=True)
class NewSession:
    """The service's decision for a new session and its row, created claimed."""

    agent: ResolvedAgent
    workspace: Workspace
    policy: SecurityPolicy
    row: SessionRow


@dataclass(frozen=True, slots=True)
class Forked:
    """A fork's new row (claimed by the forking host), its agent, policy and parent."""

    session: SessionRow
    agent: ResolvedAgent
    policy: SecurityPolicy
    parent: SessionRow


@dataclass(frozen=True, slots=True)
class Spawned:
    """A session spawned for another one: its row (claimed), agent and policy."""

    session: SessionRow
    agent: ResolvedAgent
    policy: SecurityPolicy


@dataclass(frozen=True, slots=True)
class SentTo:
    """The target of a send between sessions, and the autonomy its turn runs under."""

    session: SessionRow
    autonomy_cap: str


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """A visible row and how many history items it holds."""

    session: SessionRow
    message_count: int


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a session listing ("" ``next_cursor``: the last)."""

    rows: tuple[SessionRow, ...]
    next_cursor: str


@dataclass(frozen=True, slots=True)
class LiveSession:
    """A session some host reports serving, with what it is doing."""

    session: SessionRow
    activity: SessionActivity
    reported_at: int


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page of a session's event log: history items (when asked for) and events."""

    items: Sequence[HistoryItem]
    events: Sequence[LogEvent]


#: One packed log chunk: first and last event id, turn id, kind, prefix, payload, at (ms),
#: form (the fields of the contract's ``EventChunk``, in that order).
Chunk = tuple[int, int, int, str, bytes, bytes, int, int]


@dataclass(slots=True)
class EventBatch:
    """One session's share of an ``AppendEvents``: its chunks and turn marks
    ``(turn id, state, at ms)``, fenced by the writer's claim."""

    session_id: str
    holder_instance_id: str
    claim_generation: int
    chunks: Sequence[Chunk]
    turns: Sequence[tuple[int, str, int]]


@dataclass(frozen=True, slots=True)
class SlotGrant:
    """``TakeSlot``'s answer: granted, or the shared limit that refused it."""

    granted: bool
    limit: int
    per_principal: bool
    releasing: bool


@dataclass(frozen=True, slots=True)
class WorkerCounters:
    """The last counters a worker of a pool reported."""

    worker: str
    counters: dict[str, int]

