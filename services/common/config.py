"""acpgate configuration: ``<config dir>/config.toml``, env overrides, CLI flags.

Precedence, highest first: CLI flags > ``ACPGATE_<section>__<key>`` environment
variables > ``config.toml`` > defaults (SPEC §0). The schema below is the single
description of every key: its type, its default and its check. Loading never
raises anything but :class:`ConfigError`, whose message names the file, the key
and the expected type, so the CLI can print it instead of a traceback.

Agent entries live in ``[agents.<alias>]`` tables; their environment overrides
are ``ACPGATE_agents__<alias>__<key>``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import tomlkit

from services.common.protocol import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TIMEOUT_SECS

CONFIG_FILE_NAME = "config.toml"
ENV_CONFIG_DIR = "ACPGATE_CONFIG_DIR"
ENV_PREFIX = "ACPGATE_"

AUTONOMY_LEVELS = ("readonly", "supervised", "full")
VISIBILITY_LEVELS = ("self", "tree", "agent", "all")
AGENT_KINDS = ("builtin", "acp")
PROVIDERS = ("demo", "openai", "anthropic")

#: Tools that only read; they never ask in supervised mode unless listed in always_ask.
DEFAULT_AUTO_APPROVE = ("file_read", "glob", "content_search", "todo", "deliver_file")
#: Paths no agent touches unless they lie inside an allowed root: credentials
#: and kernel interfaces (``/proc/<pid>/environ`` holds API keys). Not all of
#: ``/etc``: a shell needs its resolver, certificates and libraries to work.
#: acpgate's own data dir and config file are always added (session policy).
DEFAULT_FORBIDDEN_PATHS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/root",
    "/proc",
    "/sys",
    "/boot",
    "/dev",
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.config/gcloud",
    "~/.netrc",
    "~/.git-credentials",
    "~/.pypirc",
    "~/.npmrc",
)

DEFAULT_CONFIG_TOML = f"""\
# acpgate configuration. See the README for every section.
# `acpgate config set KEY VALUE` edits this file and keeps your comments.

[acp]
default_agent = "assistant"
max_sessions = {DEFAULT_MAX_SESSIONS}
session_timeout_secs = {DEFAULT_SESSION_TIMEOUT_SECS}

# The built-in agent on the offline demo model: works without any API key.
# Point it at a real provider with, e.g.:
#   acpgate config set agents.assistant.provider openai
#   acpgate config set agents.assistant.model gpt-4o-mini
#   acpgate config set agents.assistant.api_key_env OPENAI_API_KEY
[agents.assistant]
kind = "builtin"
provider = "demo"
model = "demo"
"""


class ConfigError(Exception):
    """A configuration problem, with a message fit for a person (no traceback)."""


# --------------------------------------------------------------------- sections


@dataclass(frozen=True)
class AcpSection:
    """``[acp]``: the dialect's limits and the default alias (SPEC §3, §9)."""

    default_agent: str = ""
    max_sessions: int = DEFAULT_MAX_SESSIONS
    session_timeout_secs: int = DEFAULT_SESSION_TIMEOUT_SECS


@dataclass(frozen=True)
class TlsSection:
    """``[gateway.tls]``: serve ``wss://`` when both files are set."""

    cert_file: str = ""
    key_file: str = ""
    #: For the bridge: a CA bundle to trust (empty = system default).
    ca_file: str = ""

    @property
    def enabled(self) -> bool:
        """True when the gateway should terminate TLS."""
        return bool(self.cert_file and self.key_file)


@dataclass(frozen=True)
class GatewaySection:
    """``[gateway]``: the WebSocket ``/acp`` endpoint (SPEC §11)."""

    host: str = "127.0.0.1"
    port: int = 42617
    path_prefix: str = ""
    require_auth: bool = True
    max_frame_bytes: int = 16 * 1024 * 1024
    max_connections: int = 64
    ping_interval_secs: int = 20
    #: permessage-deflate on /acp. Off by default: measured, deflate costs the edge
    #: ~5 us of CPU per frame (17 -> 12 us/update relayed) and the client its inflate,
    #: while small JSON-RPC frames on the default loopback bind gain nothing from it.
    #: Turn it on for slow links carrying large frames (bench/PROFILE.md, section 8).
    compression: bool = False
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


@dataclass(frozen=True)
class AutonomySection:
    """``[autonomy]``: the default policy of every agent (SPEC §12)."""

    level: str = "supervised"
    forbidden_paths: tuple[str, ...] = DEFAULT_FORBIDDEN_PATHS
    auto_approve: tuple[str, ...] = DEFAULT_AUTO_APPROVE
    always_ask: tuple[str, ...] = ()


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
class LifecycleSection:
    """``[lifecycle]``: lease retention and the SIGTERM→SIGKILL grace (SPEC §13)."""

    lease_retention_secs: int = 7 * 24 * 3600
    term_grace_ms: int = 3000


@dataclass(frozen=True)
class AgentSection:
    """One ``[agents.<alias>]`` entry.

    ``kind = "builtin"`` runs the built-in agent (``provider`` and ``model``
    required); ``kind = "acp"`` runs any ACP agent command over stdio
    (``command`` required).
    """

    alias: str
    kind: str = "builtin"
    enabled: bool = True
    workspace: str = ""
    #: Per-agent autonomy override ("" = the [autonomy] level).
    autonomy: str = ""
    # builtin
    provider: str = ""
    model: str = ""
    base_url: str = ""
    api_key_env: str = ""
    max_tool_iterations: int = 20
    context_budget_chars: int = 200_000
    request_timeout_secs: int = 120
    max_retries: int = 3
    # acp
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

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
    autonomy: AutonomySection = field(default_factory=AutonomySection)
    sessions: SessionsSection = field(default_factory=SessionsSection)
    a2a: A2aSection = field(default_factory=A2aSection)
    lifecycle: LifecycleSection = field(default_factory=LifecycleSection)
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
        """``<data dir>/sessions/acp-sessions.db`` (SPEC §0)."""
        return self.data_dir / "sessions" / "acp-sessions.db"

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

_SECTIONS: dict[str, type] = {
    "acp": AcpSection,
    "gateway": GatewaySection,
    "gateway.tls": TlsSection,
    "paths": PathsSection,
    "services": ServicesSection,
    "autonomy": AutonomySection,
    "sessions": SessionsSection,
    "a2a": A2aSection,
    "lifecycle": LifecycleSection,
}

#: Keys whose value must be one of a fixed set.
_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("autonomy", "level"): AUTONOMY_LEVELS,
    ("sessions", "visibility"): VISIBILITY_LEVELS,
    ("agents", "kind"): AGENT_KINDS,
    ("agents", "autonomy"): ("", *AUTONOMY_LEVELS),
    ("agents", "provider"): ("", *PROVIDERS),
}

_TYPE_NAMES = {
    "int": "integer",
    "bool": "boolean",
    "str": "string",
    "tuple[str, ...]": "array of strings",
    "Mapping[str, str]": "table of strings",
}


def _field_types(cls: type) -> dict[str, str]:
    """The annotation of each settable field of a section, as a string."""
    out: dict[str, str] = {}
    for f in fields(cls):
        if f.name in ("alias", "tls"):
            continue
        out[f.name] = str(f.type)
    return out


def _coerce(value: Any, type_name: str, where: str, *, from_text: bool) -> Any:
    """Check (and, for env/CLI text, parse) one value against its declared type."""
    expected = _TYPE_NAMES.get(type_name, type_name)
    if type_name == "int":
        if from_text and isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise ConfigError(f"{where}: expected {expected}, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        return value
    if type_name == "bool":
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        return value
    if type_name == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        return value
    if type_name == "tuple[str, ...]":
        if from_text and isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = tomllib.loads(f"v = {text}")["v"]
                except tomllib.TOMLDecodeError:
                    raise ConfigError(f"{where}: expected {expected}, got {value!r}") from None
            else:
                value = [p.strip() for p in text.split(",") if p.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        return tuple(value)
    if type_name == "Mapping[str, str]":
        if from_text and isinstance(value, str):
            try:
                value = tomllib.loads(f"v = {value.strip()}")["v"]
            except tomllib.TOMLDecodeError:
                raise ConfigError(f"{where}: expected {expected}, got {value!r}") from None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        return dict(value)
    raise ConfigError(f"{where}: unsupported type {type_name}")  # pragma: no cover


def _check_choice(section: str, key: str, value: Any, where: str) -> None:
    choices = _CHOICES.get((section, key))
    if choices is not None and value not in choices:
        shown = ", ".join(repr(c) for c in choices if c)
        raise ConfigError(f"{where}: expected one of {shown}, got {value!r}")


def _build_section(
    cls: type, section: str, raw: Mapping[str, Any], origin: str, *, from_text: bool
) -> dict[str, Any]:
    """Validate one table's keys; unknown keys are errors (typos must not pass silently)."""
    types = _field_types(cls)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if section == "gateway" and key == "tls":
            continue
        where = f"{origin}: [{section}] {key}"
        if key not in types:
            known = ", ".join(sorted(types))
            raise ConfigError(f"{origin}: [{section}] unknown key {key!r} (known keys: {known})")
        coerced = _coerce(value, types[key], where, from_text=from_text)
        _check_choice(section.split(".")[0] if section.startswith("agents") else section, key,
                      coerced, where)
        out[key] = coerced
    return out


# --------------------------------------------------------------------- loading


def resolve_config_dir(flag: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """``--config-dir``, else ``$ACPGATE_CONFIG_DIR``, else ``~/.acpgate`` (SPEC §0)."""
    env = os.environ if environ is None else environ
    if flag:
        return Path(os.path.expanduser(flag)).absolute()
    if env.get(ENV_CONFIG_DIR):
        return Path(os.path.expanduser(env[ENV_CONFIG_DIR])).absolute()
    return Path(os.path.expanduser("~/.acpgate")).absolute()


def ensure_default_config(config_dir: Path) -> bool:
    """Write the default config (one demo built-in agent) if none exists. True if written."""
    path = config_dir / CONFIG_FILE_NAME
    if path.exists():
        return False
    config_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(DEFAULT_CONFIG_TOML, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``ACPGATE_<section>__<key>`` → {section: {key: text}} (agents: ``agents.<alias>``)."""
    out: dict[str, dict[str, str]] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = name[len(ENV_PREFIX):].split("__")
        if len(parts) < 2 or not all(parts):
            continue
        section = ".".join(parts[:-1])
        out.setdefault(section, {})[parts[-1]] = value
    return out


def load_config(
    config_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Load the effective config: defaults < config.toml < env < ``overrides`` (CLI flags).

    ``overrides`` maps dotted keys (``"acp.max_sessions"``) to already-typed values.
    """
    env = os.environ if environ is None else environ
    path = config_dir / CONFIG_FILE_NAME
    raw = _read_toml(path)
    origin = str(path)

    values: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    agents_raw: dict[str, dict[str, Any]] = {}

    for section, table in raw.items():
        if section == "agents":
            if not isinstance(table, dict):
                raise ConfigError(f"{origin}: [agents] expected a table of [agents.<alias>] tables")
            for alias, entry in table.items():
                if not isinstance(entry, dict):
                    raise ConfigError(f"{origin}: [agents.{alias}] expected a table")
                agents_raw[alias] = _build_section(
                    AgentSection, f"agents.{alias}", entry, origin, from_text=False
                )
            continue
        if section not in _SECTIONS:
            known = ", ".join(sorted([*_SECTIONS, "agents"]))
            raise ConfigError(f"{origin}: unknown section [{section}] (known: {known})")
        if not isinstance(table, dict):
            raise ConfigError(f"{origin}: [{section}] expected a table")
        values[section].update(
            _build_section(_SECTIONS[section], section, table, origin, from_text=False)
        )
        if section == "gateway" and "tls" in table:
            tls = table["tls"]
            if not isinstance(tls, dict):
                raise ConfigError(f"{origin}: [gateway.tls] expected a table")
            values["gateway.tls"].update(
                _build_section(TlsSection, "gateway.tls", tls, origin, from_text=False)
            )

    for section, table in _env_overrides(env).items():
        where = "environment"
        if section.startswith("agents."):
            alias = section.split(".", 1)[1]
            agents_raw.setdefault(alias, {}).update(
                _build_section(AgentSection, section, table, where, from_text=True)
            )
        elif section in _SECTIONS:
            values[section].update(
                _build_section(_SECTIONS[section], section, table, where, from_text=True)
            )
        # Unknown ACPGATE_* names are ignored: the environment is shared with other tools.

    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.rpartition(".")
        if section.startswith("agents."):
            agents_raw.setdefault(section.split(".", 1)[1], {})[key] = value
        elif section in values:
            values[section][key] = value
        else:
            raise ConfigError(f"command line: unknown key {dotted!r}")

    tls = TlsSection(**values.pop("gateway.tls"))
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        if name == "gateway.tls":
            continue
        kwargs = values[name]
        if name == "gateway":
            kwargs = {**kwargs, "tls": tls}
        sections[name] = cls(**kwargs)
    agents = {alias: AgentSection(alias=alias, **entry) for alias, entry in agents_raw.items()}
    cfg = Config(config_dir=config_dir, agents=agents, **sections)
    _validate(cfg, origin)
    return cfg


def _validate(cfg: Config, origin: str) -> None:
    """Cross-field checks that a type alone cannot express."""
    if cfg.acp.max_sessions < 1:
        raise ConfigError(f"{origin}: [acp] max_sessions: expected an integer ≥ 1")
    if cfg.acp.session_timeout_secs < 1:
        raise ConfigError(f"{origin}: [acp] session_timeout_secs: expected an integer ≥ 1")
    if not 0 < cfg.gateway.port < 65536:
        raise ConfigError(f"{origin}: [gateway] port: expected an integer in 1..65535")
    prefix = cfg.gateway.path_prefix
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise ConfigError(
            f"{origin}: [gateway] path_prefix: expected '' or a path like '/acpgate' "
            "(leading slash, no trailing slash)"
        )
    if cfg.lifecycle.term_grace_ms < 0:
        raise ConfigError(f"{origin}: [lifecycle] term_grace_ms: expected an integer ≥ 0")


def with_overrides(cfg: Config, **sections: Any) -> Config:
    """A copy of ``cfg`` with whole sections replaced (for tests and CLI flags)."""
    return replace(cfg, **sections)


# --------------------------------------------------------------------- config set/get


def _schema_type(section: str, key: str) -> str:
    if section.startswith("agents."):
        types = _field_types(AgentSection)
    elif section in _SECTIONS:
        types = _field_types(_SECTIONS[section])
    else:
        known = ", ".join(sorted([*_SECTIONS, "agents.<alias>"]))
        raise ConfigError(f"unknown section {section!r} (known: {known})")
    if key not in types:
        raise ConfigError(f"[{section}] unknown key {key!r} (known keys: {', '.join(sorted(types))})")
    return types[key]


def _split_key(dotted: str) -> tuple[str, str]:
    section, _, key = dotted.strip().rpartition(".")
    if not section or not key:
        raise ConfigError(f"expected a dotted key like acp.max_sessions, got {dotted!r}")
    return section, key


def set_value(config_dir: Path, dotted: str, text: str) -> Any:
    """``acpgate config set``: type-check ``text`` and write it, keeping the rest of the file.

    Returns the typed value written. The file is replaced atomically and the
    result is re-loaded, so an edit that makes the whole config invalid is refused.
    """
    section, key = _split_key(dotted)
    type_name = _schema_type(section, key)
    where = f"{config_dir / CONFIG_FILE_NAME}: [{section}] {key}"
    value = _coerce(text, type_name, where, from_text=True)
    _check_choice("agents" if section.startswith("agents.") else section, key, value, where)

    path = config_dir / CONFIG_FILE_NAME
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    except Exception as exc:  # tomlkit raises its own ParseError subclasses
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    table: Any = doc
    for part in section.split("."):
        if part not in table:
            table[part] = tomlkit.table(is_super_table=(part == "agents"))
        table = table[part]
    table[key] = list(value) if isinstance(value, tuple) else value
    new_text = tomlkit.dumps(doc)
    try:
        tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - tomlkit emits valid TOML
        raise ConfigError(f"{path}: edit would produce invalid TOML: {exc}") from None
    config_dir.mkdir(parents=True, exist_ok=True)
    old_text = path.read_text(encoding="utf-8") if path.exists() else None
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(new_text, encoding="utf-8")
    os.replace(tmp, path)
    try:
        load_config(config_dir, environ={})
    except ConfigError:
        if old_text is None:
            path.unlink()
        else:
            path.write_text(old_text, encoding="utf-8")
        raise
    return value


def get_value(cfg: Config, dotted: str) -> Any:
    """``acpgate config get``: the effective value of a dotted key."""
    section, key = _split_key(dotted)
    _schema_type(section, key)
    if section.startswith("agents."):
        alias = section.split(".", 1)[1]
        if alias not in cfg.agents:
            raise ConfigError(f"no [agents.{alias}] entry configured")
        obj: Any = cfg.agents[alias]
    elif section == "gateway.tls":
        obj = cfg.gateway.tls
    else:
        obj = getattr(cfg, section)
    return getattr(obj, key)


def show(cfg: Config) -> str:
    """``acpgate config show``: the effective config as TOML, secrets never included.

    Only the *name* of an API key variable is stored in config, never the key.
    """
    doc = tomlkit.document()
    for name in _SECTIONS:
        if name == "gateway.tls":
            continue
        section = getattr(cfg, name)
        table = tomlkit.table()
        for f in fields(section):
            if f.name == "tls":
                continue
            value = getattr(section, f.name)
            table[f.name] = list(value) if isinstance(value, tuple) else value
        doc[name] = table
    tls = tomlkit.table()
    for f in fields(cfg.gateway.tls):
        tls[f.name] = getattr(cfg.gateway.tls, f.name)
    doc["gateway"]["tls"] = tls
    agents = tomlkit.table(is_super_table=True)
    for alias, agent in cfg.agents.items():
        table = tomlkit.table()
        for f in fields(agent):
            if f.name == "alias":
                continue
            value = getattr(agent, f.name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = {k: "<set>" for k in value}  # env values may hold secrets
            table[f.name] = value
        agents[alias] = table
    doc["agents"] = agents
    return f"# effective config (config file: {cfg.config_file}; data dir: {cfg.data_dir})\n" + (
        tomlkit.dumps(doc)
    )
