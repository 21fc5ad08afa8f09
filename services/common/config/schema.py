"""The configuration schema: every section as a frozen dataclass, and :class:`Config`.

Each field is one key: its annotation the type, and :func:`~.setting.setting` its
default, meaning, bounds, fixed choices and whether a reload applies it. ``SECTIONS``
names the table each section is read from. Checking values against this schema is
``coerce``'s job, reading them from file and environment ``load``'s, editing the file
``edit``'s; ``docs/configuration.md`` is generated from it (``make config-docs``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from services.common.client_mcp import CLIENT_MCP_CHOICES, CLIENT_MCP_NONE
from services.common.config import checks
from services.common.config.choices import (
    AGENT_KINDS,
    AUTONOMY_LEVELS,
    DATA_PATHS,
    LOG_FORMATS,
    LOG_LEVELS,
    PROVIDERS,
    VISIBILITY_LEVELS,
)
from services.common.config.defaults import DEFAULT_AUTO_APPROVE, DEFAULT_FORBIDDEN_PATHS
from services.common.config.setting import Setting, declared, setting
from services.common.mcp_servers import McpServerSpec
from services.common.protocol import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SUBAGENTS,
    DEFAULT_SESSION_TIMEOUT_SECS,
    MAX_WARM_ADAPTERS,
)

CONFIG_FILE_NAME = "config.toml"

#: ``[agents.<alias>] warm`` left unset: the agent kind's default.
WARM_BY_KIND = -1


#: ``[agents.<alias>] protocol``: ``"auto"``, or an ACP version number (1 or 2).
AgentProtocol = int | str


class ConfigError(Exception):
    """A configuration problem, with a message fit for a person (no traceback)."""


# --------------------------------------------------------------------- sections


@dataclass(frozen=True)
class AcpSection:
    """``[acp]``: the dialect's limits and the default alias (SPEC §3, §9)."""

    default_agent: str = setting(
        "", "the agent alias a session gets when the client names none", reload=True)
    max_sessions: int = setting(
        DEFAULT_MAX_SESSIONS, "sessions live at once, over every client", min=1, reload=True)
    max_sessions_per_token: int = setting(
        0, "sessions one gateway token (with its spawned children) may hold at once; the "
        "local user has no share", min=0, zero="a quarter of max_sessions", reload=True)
    session_timeout_secs: int = setting(
        DEFAULT_SESSION_TIMEOUT_SECS, "permission timeout, and how long an idle session lives",
        min=1, reload=True)
    max_subagents_per_session: int = setting(
        DEFAULT_MAX_SUBAGENTS, "child sessions a v2 agent may announce under one session, "
        "theirs included; past it, more are neither stored nor relayed (a warning is logged)",
        min=1, max=10_000)


@dataclass(frozen=True)
class TlsSection:
    """``[gateway.tls]``: serve ``wss://`` and ``https://`` (ALPN h2) when both files are set."""

    cert_file: str = setting("", "the certificate chain (PEM)")
    key_file: str = setting("", "the certificate's private key (PEM)")
    ca_file: str = setting("", "for the bridge: a CA bundle to trust (empty = system default)")

    @property
    def enabled(self) -> bool:
        """True when the gateway should terminate TLS."""
        return bool(self.cert_file and self.key_file)


#: ``[gateway] workers = "auto"`` runs one edge per core, at most this many.
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

    host: str = setting("127.0.0.1", "the address the gateway listens on")
    port: int = setting(42617, "the port the gateway listens on", min=1, max=65535)
    path_prefix: str = setting(
        "", "served under this path (behind a proxy): `<prefix>/acp`", check=checks.path_prefix)
    require_auth: bool = setting(True, "every client needs a gateway token")
    max_frame_bytes: int = setting(16 * 1024 * 1024, "the largest WebSocket frame or request")
    max_connections: int = setting(
        64, "WebSocket and Streamable HTTP connections at once", reload=True)
    max_connections_per_token: int = setting(
        0, "connections one token may hold at once (over it: 503)", min=0,
        zero="a quarter of max_connections", reload=True)
    ping_interval_secs: int = setting(20, "WebSocket pings and SSE keepalives")
    #: Off by default: ~5 us of CPU a frame, and small frames on loopback gain nothing.
    compression: bool = setting(
        False, "permessage-deflate on /acp when the client offers it (slow links, large frames)")
    token_db: str = setting(
        "", "the token database (empty = `<data dir>/gateway/tokens.db`); hosts serving the "
        "same clients share one")
    client_mcp_servers: str = setting(
        CLIENT_MCP_NONE, "the `mcpServers` a gateway client may pass (stdio ones run "
        "confined); the local stdio user is not bound by it", choices=CLIENT_MCP_CHOICES,
        reload=True)
    client_mcp_allow_hosts: tuple[str, ...] = setting(
        (), "non-public hosts a gateway client's HTTP/SSE MCP server may point at",
        check=checks.host_allow_list, reload=True)
    allowed_origins: tuple[str, ...] = setting(
        (), "browser origins whose pages may use /acp (any other `Origin`: 403)",
        check=checks.origin_list)
    idle_secs: int = setting(
        120, "how long a Streamable HTTP connection with no stream or request lives on", min=1)
    detach_grace_secs: int = setting(
        600, "how long a session outlives its dropped gateway connection, detached", min=0,
        zero="sessions are released when their connection goes", reload=True)
    workers: int | str = setting(
        1, "edge processes `acpgate serve` runs on the one port (`auto`: one per core, up to "
        f"{MAX_AUTO_WORKERS})", min=1, max=MAX_WORKERS, choices=("auto",))
    replay_chars: int = setting(
        8 * 1024 * 1024, "characters of updates each live session keeps for an exact replay",
        min=1)
    attach_queue_chars: int = setting(
        4 * 1024 * 1024, "characters that may wait for one attached client before it is "
        "dropped as too slow", min=1, reload=True)
    replay_budget_chars: int = setting(
        32 * 1024 * 1024, "what every session's replay keeps together, each update counted "
        "~160 more; split between workers", min=1)
    public_url: str = setting(
        "", "this host's /acp as clients reach it (never derived); named to a client sent "
        "to the host where its session is live", check=checks.public_url)
    tls: TlsSection = field(default_factory=TlsSection)


@dataclass(frozen=True)
class PathsSection:
    """``[paths]``: where data lives."""

    data_dir: str = setting("", "sessions, leases, tokens and logs (empty = `<config dir>/data`)")


@dataclass(frozen=True)
class ServicesSection:
    """``[services]``: addresses of the gRPC services.

    Empty addresses mean "embedded": ``acpgate acp`` then runs both services in
    its own process on private unix sockets. Addresses are ``unix:/path`` or
    ``host:port``.
    """

    session_addr: str = setting("", "the session service (empty = embedded)")
    lifecycle_addr: str = setting("", "the lifecycle service (empty = embedded)")
    token_env: str = setting(
        "", "the variable holding the token every gRPC call carries (empty = the install's "
        "key file)")
    data_path: str = setting(
        "auto", "how adapter output reaches the edge: its pipes handed over where the "
        "lifecycle address is a unix socket, or every line over gRPC", choices=DATA_PATHS)


@dataclass(frozen=True)
class StoreSection:
    """``[store]``: where session rows live — SQLite in the data dir, or PostgreSQL.

    An empty ``url`` is the SQLite file ``<data dir>/sessions/acp-sessions.db``;
    ``postgresql://user@host:port/db`` a PostgreSQL database several gateway hosts may
    share. Keep the password out of the URL: name a variable in ``password_env``.
    """

    url: str = setting("", "where session rows live", check=checks.store_url)
    password_env: str = setting(
        "", "the variable holding the database password (empty = the URL's, or none)")
    lease_secs: int = setting(
        30, "how long a host's claim on a session lasts without a heartbeat", min=1)
    pool_size: int = setting(10, "connections each session service keeps to PostgreSQL", min=1)
    connect_timeout_secs: int = setting(
        10, "how long the session service waits at start for PostgreSQL", min=1)
    max_session_bytes: int = setting(
        256 * 1024 * 1024, "history and event log one session may store (a turn past it is "
        "refused)", min=0,
        zero="unlimited", reload=True)
    max_token_bytes: int = setting(
        1024 * 1024 * 1024, "history and event log all sessions of one gateway token may "
        "store", min=0,
        zero="unlimited", reload=True)
    outage_buffer_bytes: int = setting(
        64 * 1024 * 1024, "events an edge keeps while the store is unreachable, sent once it "
        "answers (past them a session's log stops and its running turn fails)", min=1)

    @property
    def is_postgres(self) -> bool:
        """True when ``url`` names a PostgreSQL database."""
        return checks.is_postgres_url(self.url)


@dataclass(frozen=True)
class AutonomySection:
    """``[autonomy]``: the default policy of every agent (SPEC §12)."""

    level: str = setting(
        "supervised", "what an agent may do without asking", choices=AUTONOMY_LEVELS,
        reload=True)
    forbidden_paths: tuple[str, ...] = setting(
        DEFAULT_FORBIDDEN_PATHS, "paths no agent touches unless inside an allowed root "
        "(credentials, kernel interfaces)", reload=True)
    auto_approve: tuple[str, ...] = setting(
        DEFAULT_AUTO_APPROVE, "tools that never ask in supervised mode (those that only read)",
        reload=True)
    always_ask: tuple[str, ...] = setting((), "tools that always ask", reload=True)
    allow_cwd: tuple[str, ...] = setting(
        (), "directories that may be a session workspace although they are, hold or lie in "
        "acpgate's state or a credential store (exact paths)", reload=True)


@dataclass(frozen=True)
class SessionsSection:
    """``[sessions]``: visibility of sessions to internal requesters (SPEC §14)."""

    visibility: str = setting(
        "tree", "which sessions the agents' session tools reach, within one token's",
        choices=VISIBILITY_LEVELS, reload=True)


@dataclass(frozen=True)
class A2aSection:
    """``[a2a]``: cross-agent visibility policy (SPEC §14)."""

    enabled: bool = setting(False, "agents may reach other agents' sessions", reload=True)
    allow: tuple[str, ...] = setting((), "glob patterns of the agents they may reach", reload=True)


@dataclass(frozen=True)
class LoggingSection:
    """``[logging]``: what acpgate's own processes log, how, and where (docs/operating.md "Logs")."""

    level: str = setting(
        "", "that level everywhere (empty: info to the file and a service's stderr, warnings "
        "on a stdio command's stderr)", choices=LOG_LEVELS, reload=True)
    format: str = setting(
        "", "that format everywhere (empty: text on a terminal's stderr, else JSON)",
        choices=LOG_FORMATS, reload=True)
    file: str = setting(
        "", "the log file every process of the install appends to (empty = "
        "`<data dir>/logs/acpgate.log`; `none` = no file)", reload=True)
    file_max_bytes: int = setting(
        10 * 1024 * 1024, "the file is rotated when a line would take it past this", min=1024,
        reload=True)
    file_keep: int = setting(5, "rotated files kept (`acpgate.log.1` newest)", min=0, reload=True)


#: A longer adoption window would keep an unsupervised adapter alive for minutes.
MAX_ADOPT_SECS = 300


@dataclass(frozen=True)
class LifecycleSection:
    """``[lifecycle]``: lease retention, the SIGTERM→SIGKILL grace (SPEC §13), adoption."""

    lease_retention_secs: int = setting(7 * 24 * 3600, "how long closed or lost leases (and their stderr logs) are kept")
    term_grace_ms: int = setting(3000, "SIGTERM to SIGKILL grace of an agent process", min=0)
    adopt_secs: int = setting(
        5, "how long an agent outlives a dead lifecycle service, waiting to be re-adopted "
        "(`acpgate acp`: always 0)", min=0, max=MAX_ADOPT_SECS, zero="stopped at once")


@dataclass(frozen=True)
class AgentSection:
    """One ``[agents.<alias>]`` entry. ``kind = "builtin"`` runs the built-in agent
    (``provider`` and ``model`` required); ``kind = "acp"`` runs any ACP agent command over
    stdio (``command`` required). Every key applies on reload to new sessions; running
    ones keep their agent process.
    """

    alias: str
    kind: str = setting("builtin", "the built-in agent, or an ACP agent command",
                        choices=AGENT_KINDS, reload=True)
    enabled: bool = setting(True, "clients may start sessions of it", reload=True)
    workspace: str = setting(
        "", "its default workspace (empty = `<config dir>/agents/<alias>/workspace`)",
        reload=True)
    autonomy: str = setting("", "overrides `[autonomy] level` (empty = that level)",
                            choices=("", *AUTONOMY_LEVELS), reload=True)
    #: They count against ``max_sessions`` only once a session takes one.
    warm: int = setting(
        WARM_BY_KIND, "adapters kept spawned ahead of any session (unset: 1 for builtin, 0 "
        "for acp)", min=0, max=MAX_WARM_ADAPTERS, reload=True)
    description: str = setting(
        "", "one line clients are told (`_acpgate/agents/list`), never a secret", reload=True)
    # builtin
    provider: str = setting("", "builtin: the model provider", choices=("", *PROVIDERS),
                            reload=True)
    model: str = setting("", "builtin: the model", reload=True)
    base_url: str = setting("", "builtin: the provider's API address (empty = its own)",
                            reload=True)
    api_key_env: str = setting("", "builtin: the variable holding the API key", reload=True)
    max_tool_iterations: int = setting(20, "builtin: model calls (each with its tool calls) in one turn", reload=True)
    context_budget_chars: int = setting(
        200_000, "builtin: characters of history the model sees (newest whole turns)", reload=True)
    request_timeout_secs: int = setting(120, "builtin: one model request", reload=True)
    max_retries: int = setting(3, "builtin: retries of a failed model request", reload=True)
    mcp_servers: tuple[McpServerSpec, ...] = setting(
        (), "builtin: MCP servers every session starts, before the client's (ACP shapes)",
        reload=True)
    mcp_startup_timeout_secs: int = setting(30, "builtin: an MCP server's start", reload=True)
    mcp_call_timeout_secs: int = setting(300, "builtin: one MCP tool call", reload=True)
    models: tuple[str, ...] = setting(
        (), "builtin: more models a client may switch to (`model` first)", reload=True)
    # acp
    command: str = setting("", "acp: the agent command", reload=True)
    args: tuple[str, ...] = setting((), "acp: its arguments", reload=True)
    env: Mapping[str, str] = setting(factory=dict, doc="acp: variables set for it",
                                     reload=True)
    #: On top of the clean base (PATH, HOME, locale, TMPDIR…) and ``env``: nothing else of
    #: acpgate's environment (keys, service addresses) reaches an adapter.
    pass_env: tuple[str, ...] = setting(
        (), "variables of acpgate's own environment the agent gets (names or `*` globs)",
        reload=True)
    # (ruff cannot tell the alias is immutable: int | str)
    protocol: AgentProtocol = setting(  # noqa: RUF009
        1, "acp: the ACP version spoken to it: 1, 2, or \"auto\" (offer 2, take what it "
        "answers; a refusal falls back to 1); 1 by default, as v2 costs v1 clients diffs, "
        "terminal output and fs/* (docs/agents.md, ACP v2 agents)", reload=True)

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


def settings(cls: type) -> dict[str, Setting]:
    """The declaration of each settable field of a section."""
    return {f.name: declared(f) for f in fields(cls) if f.name not in ("alias", "tls")}


def sections_of(cfg: Config) -> Iterator[tuple[str, Any]]:
    """Every section of ``cfg`` with the table it is read from, ``[gateway.tls]`` and each
    ``[agents.<alias>]`` included."""
    for name in SECTIONS:
        head, _, nested = name.partition(".")
        section = getattr(cfg, head)
        yield name, getattr(section, nested) if nested else section
    for alias, agent in cfg.agents.items():
        yield f"agents.{alias}", agent
