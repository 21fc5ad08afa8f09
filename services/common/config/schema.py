"""The configuration schema: every section as a frozen dataclass, and :class:`Config`.

Each field's annotation is its type and its value its default; ``SECTIONS``
names the table each section is read from (``choices.CHOICES`` the keys limited
to a fixed set). Checking values against this schema is ``coerce``'s job, reading
them from file and environment ``load``'s, editing the file ``edit``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from services.common.client_mcp import CLIENT_MCP_NONE
from services.common.config.defaults import DEFAULT_AUTO_APPROVE, DEFAULT_FORBIDDEN_PATHS
from services.common.mcp_servers import McpServerSpec
from services.common.protocol import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TIMEOUT_SECS

CONFIG_FILE_NAME = "config.toml"

#: ``[agents.<alias>] warm`` left unset: the agent kind's default.
WARM_BY_KIND = -1


class ConfigError(Exception):
    """A configuration problem, with a message fit for a person (no traceback)."""


# --------------------------------------------------------------------- sections


@dataclass(frozen=True)
class AcpSection:
    """``[acp]``: the dialect's limits and the default alias (SPEC §3, §9)."""

    default_agent: str = ""
    max_sessions: int = DEFAULT_MAX_SESSIONS
    #: Sessions one gateway token (with its spawned children) may hold at once;
    #: 0 = a quarter of ``max_sessions`` (at least 1). The local user has no share.
    max_sessions_per_token: int = 0
    session_timeout_secs: int = DEFAULT_SESSION_TIMEOUT_SECS


@dataclass(frozen=True)
class TlsSection:
    """``[gateway.tls]``: serve ``wss://`` and ``https://`` (ALPN h2) when both files are set."""

    cert_file: str = ""
    key_file: str = ""
    #: For the bridge: a CA bundle to trust (empty = system default).
    ca_file: str = ""

    @property
    def enabled(self) -> bool:
        """True when the gateway should terminate TLS."""
        return bool(self.cert_file and self.key_file)


#: ``[gateway] workers = "auto"`` runs one edge per core, at most this many (issue 28).
MAX_AUTO_WORKERS = 8
#: The most edge workers a count may ask for.
MAX_WORKERS = 64


def worker_count(workers: int | str, cores: int | None) -> int:
    """The edge processes ``[gateway] workers`` asks for on a machine of ``cores`` cores:
    the count, or for "auto" one per core up to :data:`MAX_AUTO_WORKERS`."""
    if isinstance(workers, int):
        return workers
    return max(1, min(MAX_AUTO_WORKERS, cores or 1))


@dataclass(frozen=True)
class GatewaySection:
    """``[gateway]``: the ``/acp`` endpoint, WebSocket and Streamable HTTP (SPEC §11)."""

    host: str = "127.0.0.1"
    port: int = 42617
    path_prefix: str = ""
    require_auth: bool = True
    max_frame_bytes: int = 16 * 1024 * 1024
    max_connections: int = 64
    #: Connections one token may hold at once; 0 = a quarter of ``max_connections``.
    max_connections_per_token: int = 0
    ping_interval_secs: int = 20
    #: permessage-deflate on /acp: off, it costs ~5 us of CPU a frame and small frames on
    #: loopback gain nothing; for slow links with large frames (bench/PROFILE.md, section 8).
    compression: bool = False
    #: The token database ("" = ``<data dir>/gateway/tokens.db``); hosts serving the same
    #: clients share one, so a token (and its sessions) is the same on every host.
    token_db: str = ""
    #: The ``mcpServers`` a gateway client may pass (issue 23): "none", "http" (HTTP/SSE) or
    #: "all" (stdio servers too, run confined). The local stdio user is not bound by it.
    client_mcp_servers: str = CLIENT_MCP_NONE
    #: Host names, addresses and CIDR networks a gateway client's HTTP/SSE MCP server may
    #: point at although they are not public (loopback, private, link-local, …).
    client_mcp_allow_hosts: tuple[str, ...] = ()
    #: Browser origins (``scheme://host[:port]`` or ``*``) whose pages may use /acp; any other
    #: ``Origin`` gets 403; clients sending none are not browsers (services/common/origins.py).
    allowed_origins: tuple[str, ...] = ()
    #: Seconds an idle Streamable HTTP connection (no stream, no request) lives on.
    idle_secs: int = 120
    #: Seconds a session outlives its gateway connection, detached (issue 27); 0 = released.
    detach_grace_secs: int = 600
    #: Edge processes ``acpgate serve`` runs on the one port (issue 28): a count, or
    #: "auto" — one per core up to :data:`MAX_AUTO_WORKERS`. 1 (the default): a session
    #: detached on one worker is not reattached by a reconnect landing on another yet.
    workers: int | str = 1
    #: Characters kept per live session for exact replay / queued per attached client (27),
    #: and by every session's ring together, each event counted ~160 more (ring_budget).
    replay_chars: int = 8 * 1024 * 1024
    attach_queue_chars: int = 4 * 1024 * 1024
    replay_budget_chars: int = 32 * 1024 * 1024
    #: This host's ``/acp`` as clients reach it ("" = none, never derived): -32007 names it (27).
    public_url: str = ""
    tls: TlsSection = field(default_factory=TlsSection)


@dataclass(frozen=True)
class PathsSection:
    """``[paths]``: where data lives (default ``<config dir>/data``)."""

    data_dir: str = ""


@dataclass(frozen=True)
class ServicesSection:
    """``[services]``: addresses of the gRPC services.

    Empty addresses mean "embedded": ``acpgate acp`` then runs both services in
    its own process on private unix sockets. Addresses are ``unix:/path`` or
    ``host:port``.
    """

    session_addr: str = ""
    lifecycle_addr: str = ""
    #: Optional shared token every gRPC call must carry (TCP deployments).
    token_env: str = ""
    #: How adapter output reaches the edge: "auto" — its pipes, handed over the lifecycle
    #: service's fd socket where the lifecycle address is a unix socket — or "grpc" (Attach).
    data_path: str = "auto"


#: URL schemes of ``[store] url`` that name a PostgreSQL database.
STORE_URL_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class StoreSection:
    """``[store]``: where session rows live — SQLite in the data dir, or PostgreSQL.

    An empty ``url`` is the SQLite file ``<data dir>/sessions/acp-sessions.db``;
    ``postgresql://user@host:port/db`` a PostgreSQL database several gateway hosts may
    share. Keep the password out of the URL: name a variable in ``password_env``.
    """

    url: str = ""
    #: Environment variable holding the database password ("" = the URL's, or none).
    password_env: str = ""
    #: How long a host's claim on an active session lasts without a heartbeat (then a dead
    #: host's session may be loaded on another).
    lease_secs: int = 30
    pool_size: int = 10  # connections each session service keeps to PostgreSQL at most
    #: How long the session service waits at start for PostgreSQL to answer.
    connect_timeout_secs: int = 10
    #: Bytes of history one session may store (a turn past it is refused; 0 = unlimited).
    max_session_bytes: int = 256 * 1024 * 1024
    #: Bytes of history all sessions of one owner (a gateway token) may store (0 = unlimited).
    max_token_bytes: int = 1024 * 1024 * 1024
    #: Bytes of events an edge keeps while the store is unreachable, sent once it answers
    #: (past them a session's log stops and its running turn fails).
    outage_buffer_bytes: int = 64 * 1024 * 1024

    @property
    def is_postgres(self) -> bool:
        """True when ``url`` names a PostgreSQL database."""
        return self.url.split("://", 1)[0].lower() in STORE_URL_SCHEMES and "://" in self.url


@dataclass(frozen=True)
class AutonomySection:
    """``[autonomy]``: the default policy of every agent (SPEC §12)."""

    level: str = "supervised"
    forbidden_paths: tuple[str, ...] = DEFAULT_FORBIDDEN_PATHS
    auto_approve: tuple[str, ...] = DEFAULT_AUTO_APPROVE
    always_ask: tuple[str, ...] = ()
    #: Directories that may be a session workspace although they are, lie inside or
    #: contain acpgate's own state or a credential store (exact paths; ``~`` expanded).
    allow_cwd: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionsSection:
    """``[sessions]``: visibility of sessions to internal requesters (SPEC §14)."""

    visibility: str = "tree"


@dataclass(frozen=True)
class A2aSection:
    """``[a2a]``: cross-agent visibility policy (SPEC §14)."""

    enabled: bool = False
    allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoggingSection:
    """``[logging]``: what acpgate's own processes log, how, and where (README "Logs")."""

    #: "" (the default): info into the log file and on a service's stderr, but only
    #: warnings and errors on the stderr of a stdio command (``acp``, ``agent``,
    #: ``bridge``), which an editor reads. Set: that level everywhere.
    level: str = ""
    #: "json", "text" (aligned, local time), or "" = text on a terminal's stderr, else JSON.
    format: str = ""
    #: The log file every acpgate process of the install appends to ("" =
    #: ``<data dir>/logs/acpgate.log``; "none" = no file; ``~`` expanded).
    file: str = ""
    #: The file is rotated when a line would take it past this size ...
    file_max_bytes: int = 10 * 1024 * 1024
    #: ... keeping this many rotated files (``acpgate.log.1`` newest).
    file_keep: int = 5


@dataclass(frozen=True)
class LifecycleSection:
    """``[lifecycle]``: lease retention, the SIGTERM→SIGKILL grace (SPEC §13), and how long
    a wrapper whose service died waits to be re-adopted (0: none; ``acpgate acp``: 0)."""

    lease_retention_secs: int = 7 * 24 * 3600
    term_grace_ms: int = 3000
    adopt_secs: int = 5


@dataclass(frozen=True)
class AgentSection:
    """One ``[agents.<alias>]`` entry. ``kind = "builtin"`` runs the built-in agent
    (``provider`` and ``model`` required); ``kind = "acp"`` runs any ACP agent command over
    stdio (``command`` required). ``description``: one line clients are told
    (``_acpgate/agents/list``), never a secret.
    """

    alias: str
    kind: str = "builtin"
    enabled: bool = True
    workspace: str = ""
    #: Per-agent autonomy override ("" = the [autonomy] level).
    autonomy: str = ""
    #: Adapters kept spawned ahead of any session (the lifecycle service's warm pool);
    #: they count against ``max_sessions`` only once a session takes one.
    #: Unset (-1): 1 for the built-in agent, 0 for an external one.
    warm: int = WARM_BY_KIND
    description: str = ""
    # builtin
    provider: str = ""
    model: str = ""
    base_url: str = ""
    api_key_env: str = ""
    max_tool_iterations: int = 20
    context_budget_chars: int = 200_000
    request_timeout_secs: int = 120
    max_retries: int = 3
    #: MCP servers every session of this agent starts, before the client's (ACP shapes).
    mcp_servers: tuple[McpServerSpec, ...] = ()
    mcp_startup_timeout_secs: int = 30
    mcp_call_timeout_secs: int = 300
    #: More models the client may switch to (ACP config option ``model``); ``model`` first.
    models: tuple[str, ...] = ()
    # acp
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: Variables (names, or ``*`` globs) the adapter gets from acpgate's own environment,
    #: on top of the clean base (PATH, HOME, locale, TMPDIR…) and ``env``. Nothing else of
    #: acpgate's environment reaches an adapter (issue 23: keys, service addresses).
    pass_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.warm == WARM_BY_KIND:  # the kind's default, also for sections built in code
            object.__setattr__(self, "warm", 1 if self.kind == "builtin" else 0)

    @property
    def dispatchable(self) -> bool:
        """Enabled and complete for its kind (SPEC §3)."""
        if not self.enabled:
            return False
        if self.kind == "builtin":
            return bool(self.provider and self.model)
        if self.kind == "acp":
            return bool(self.command)
        return False

    @property
    def default_model(self) -> str:
        """``provider/model`` for builtin agents, "" otherwise."""
        if self.kind == "builtin" and self.provider and self.model:
            return f"{self.provider}/{self.model}"
        return ""


@dataclass(frozen=True)
class Config:
    """The whole effective configuration of one acpgate install."""

    config_dir: Path
    acp: AcpSection = field(default_factory=AcpSection)
    gateway: GatewaySection = field(default_factory=GatewaySection)
    paths: PathsSection = field(default_factory=PathsSection)
    services: ServicesSection = field(default_factory=ServicesSection)
    store: StoreSection = field(default_factory=StoreSection)
    autonomy: AutonomySection = field(default_factory=AutonomySection)
    sessions: SessionsSection = field(default_factory=SessionsSection)
    a2a: A2aSection = field(default_factory=A2aSection)
    lifecycle: LifecycleSection = field(default_factory=LifecycleSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    agents: Mapping[str, AgentSection] = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        """``<config dir>/config.toml``."""
        return self.config_dir / CONFIG_FILE_NAME

    @property
    def data_dir(self) -> Path:
        """``[paths] data_dir``, default ``<config dir>/data``."""
        if self.paths.data_dir:
            return Path(os.path.expanduser(self.paths.data_dir))
        return self.config_dir / "data"

    @property
    def session_db_path(self) -> Path:
        """``<data dir>/sessions/acp-sessions.db`` (SPEC §0; unused with ``[store] url``)."""
        return self.data_dir / "sessions" / "acp-sessions.db"

    @property
    def token_db_path(self) -> Path:
        """Where the hashed gateway tokens live: ``[gateway] token_db``, default
        ``<data dir>/gateway/tokens.db``."""
        if self.gateway.token_db:
            return Path(os.path.expanduser(self.gateway.token_db))
        return self.data_dir / "gateway" / "tokens.db"

    @property
    def log_file(self) -> Path | None:
        """``[logging] file``: default ``<data dir>/logs/acpgate.log``; None for "none"."""
        chosen = self.logging.file
        if chosen.strip().lower() == "none":
            return None
        if chosen:
            path = Path(os.path.expanduser(chosen))
            return path if path.is_absolute() else self.config_dir / path
        return self.data_dir / "logs" / "acpgate.log"

    @property
    def lifecycle_state_dir(self) -> Path:
        """``<data dir>/lifecycle``: instance id, leases.db, stderr logs."""
        return self.data_dir / "lifecycle"

    def agent_workspace(self, alias: str) -> Path:
        """``[agents.<alias>] workspace``, default ``<config dir>/agents/<alias>/workspace``."""
        agent = self.agents.get(alias)
        if agent is not None and agent.workspace:
            return Path(os.path.expanduser(agent.workspace))
        return self.config_dir / "agents" / alias / "workspace"

    def agent_autonomy(self, alias: str) -> str:
        """The effective autonomy level of an agent (per-agent override or [autonomy])."""
        agent = self.agents.get(alias)
        if agent is not None and agent.autonomy:
            return agent.autonomy
        return self.autonomy.level


# --------------------------------------------------------------------- the schema

#: The table each section is read from (``gateway.tls`` nests inside ``[gateway]``).
SECTIONS: dict[str, type] = {
    "acp": AcpSection,
    "gateway": GatewaySection,
    "gateway.tls": TlsSection,
    "paths": PathsSection,
    "services": ServicesSection,
    "store": StoreSection,
    "autonomy": AutonomySection,
    "sessions": SessionsSection,
    "a2a": A2aSection,
    "lifecycle": LifecycleSection,
    "logging": LoggingSection,
}

def field_types(cls: type) -> dict[str, str]:
    """The annotation of each settable field of a section, as a string."""
    out: dict[str, str] = {}
    for f in fields(cls):
        if f.name in ("alias", "tls"):
            continue
        out[f.name] = str(f.type)
    return out
