"""Loading the effective configuration: defaults < ``config.toml`` < env < CLI flags.

The config dir is ``--config-dir``, else ``$ACPGATE_CONFIG_DIR``, else
``~/.acpgate`` (SPEC §0); a first run writes a default ``config.toml`` with one
offline demo agent. Environment overrides are ``ACPGATE_<section>__<key>``
(agents: ``ACPGATE_agents__<alias>__<key>``); CLI flags arrive as dotted keys
with typed values. Loading raises nothing but :class:`ConfigError`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from services.common.config.coerce import build_section
from services.common.config.schema import (
    CONFIG_FILE_NAME,
    SECTIONS,
    AgentSection,
    Config,
    ConfigError,
    TlsSection,
)
from services.common.net_targets import HostAllowList
from services.common.origins import OriginList
from services.common.private_files import (
    PRIVATE_FILE_MODE,
    private_dir,
    tighten,
    write_private_text,
)
from services.common.protocol import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_TIMEOUT_SECS,
    MAX_WARM_ADAPTERS,
)
from services.common.public_url import public_url_problem

ENV_CONFIG_DIR = "ACPGATE_CONFIG_DIR"
#: A longer adoption window would keep an unsupervised adapter alive for minutes.
MAX_ADOPT_SECS = 300
ENV_PREFIX = "ACPGATE_"

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
    private_dir(config_dir)
    write_private_text(path, DEFAULT_CONFIG_TOML)
    return True


@dataclass
class _Layers:
    """The keyword arguments of every section and agent entry, each layer applied over
    the ones below it."""

    sections: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {name: {} for name in SECTIONS}
    )
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)


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
    origin = str(path)
    layers = _Layers()
    _apply_file(layers, _read_toml(path), origin)
    _apply_env(layers, _env_overrides(env))
    _apply_flags(layers, overrides or {})
    cfg = _assemble(config_dir, layers)
    _validate(cfg, origin)
    return cfg


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; {} when there is none. A file others may read is made owner-only:
    it holds agents' ``env`` (API keys)."""
    tighten(path, PRIVATE_FILE_MODE)
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


def _apply_file(layers: _Layers, raw: Mapping[str, Any], origin: str) -> None:
    """The tables of ``config.toml``: known sections only, every key type-checked."""
    for section, table in raw.items():
        if section == "agents":
            _apply_file_agents(layers, table, origin)
            continue
        if section not in SECTIONS:
            known = ", ".join(sorted([*SECTIONS, "agents"]))
            raise ConfigError(f"{origin}: unknown section [{section}] (known: {known})")
        if not isinstance(table, dict):
            raise ConfigError(f"{origin}: [{section}] expected a table")
        layers.sections[section].update(
            build_section(SECTIONS[section], section, table, origin, from_text=False)
        )
        if section == "gateway" and "tls" in table:
            tls = table["tls"]
            if not isinstance(tls, dict):
                raise ConfigError(f"{origin}: [gateway.tls] expected a table")
            layers.sections["gateway.tls"].update(
                build_section(TlsSection, "gateway.tls", tls, origin, from_text=False)
            )


def _apply_file_agents(layers: _Layers, table: Any, origin: str) -> None:
    """The ``[agents.<alias>]`` tables of ``config.toml``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: [agents] expected a table of [agents.<alias>] tables")
    for alias, entry in table.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{origin}: [agents.{alias}] expected a table")
        layers.agents[alias] = build_section(
            AgentSection, f"agents.{alias}", entry, origin, from_text=False
        )


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


def _apply_env(layers: _Layers, env_tables: Mapping[str, Mapping[str, str]]) -> None:
    """Environment overrides, parsed from text and type-checked."""
    where = "environment"
    for section, table in env_tables.items():
        if section.startswith("agents."):
            alias = section.split(".", 1)[1]
            layers.agents.setdefault(alias, {}).update(
                build_section(AgentSection, section, table, where, from_text=True)
            )
        elif section in SECTIONS:
            layers.sections[section].update(
                build_section(SECTIONS[section], section, table, where, from_text=True)
            )
        # Unknown ACPGATE_* names are ignored: the environment is shared with other tools.


def _apply_flags(layers: _Layers, overrides: Mapping[str, Any]) -> None:
    """CLI flags: dotted keys with values the CLI already typed."""
    for dotted, value in overrides.items():
        section, _, key = dotted.rpartition(".")
        if section.startswith("agents."):
            layers.agents.setdefault(section.split(".", 1)[1], {})[key] = value
        elif section in layers.sections:
            layers.sections[section][key] = value
        else:
            raise ConfigError(f"command line: unknown key {dotted!r}")


def _assemble(config_dir: Path, layers: _Layers) -> Config:
    """Build the frozen sections (``gateway.tls`` inside ``gateway``) and the Config."""
    values = dict(layers.sections)
    tls = TlsSection(**values.pop("gateway.tls"))
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        if name == "gateway.tls":
            continue
        kwargs = values[name]
        if name == "gateway":
            kwargs = {**kwargs, "tls": tls}
        sections[name] = cls(**kwargs)
    agents = {alias: AgentSection(alias=alias, **entry) for alias, entry in layers.agents.items()}
    return Config(config_dir=config_dir, agents=agents, **sections)


def _validate(cfg: Config, origin: str) -> None:
    """Cross-field checks that a type alone cannot express."""
    if cfg.acp.max_sessions < 1:
        raise ConfigError(f"{origin}: [acp] max_sessions: expected an integer ≥ 1")
    if cfg.acp.max_sessions_per_token < 0:
        raise ConfigError(f"{origin}: [acp] max_sessions_per_token: expected an integer ≥ 0 "
                          "(0 = a quarter of max_sessions)")
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
    if cfg.gateway.max_connections_per_token < 0:
        raise ConfigError(f"{origin}: [gateway] max_connections_per_token: expected an integer "
                          "≥ 0 (0 = a quarter of max_connections)")
    if cfg.gateway.detach_grace_secs < 0:
        raise ConfigError(f"{origin}: [gateway] detach_grace_secs: expected an integer "
                          "≥ 0 (0 = sessions are released when their connection goes)")
    for key in ("replay_chars", "attach_queue_chars", "replay_budget_chars"):
        if getattr(cfg.gateway, key) < 1:
            raise ConfigError(f"{origin}: [gateway] {key}: expected an integer ≥ 1")
    try:
        HostAllowList.parse(cfg.gateway.client_mcp_allow_hosts)
    except ValueError as exc:
        raise ConfigError(f"{origin}: [gateway] client_mcp_allow_hosts: {exc}") from None
    try:
        OriginList.parse(cfg.gateway.allowed_origins)
    except ValueError as exc:
        raise ConfigError(f"{origin}: [gateway] allowed_origins: {exc}") from None
    if (problem := public_url_problem(cfg.gateway.public_url)) is not None:
        # Never echo the value: a refused one may carry a credential.
        raise ConfigError(f"{origin}: [gateway] public_url: {problem} (expected e.g. "
                          "wss://gateway.example.com/acp, or '' for none)")
    if cfg.gateway.idle_secs < 1:
        raise ConfigError(f"{origin}: [gateway] idle_secs: expected an integer ≥ 1")
    if cfg.lifecycle.term_grace_ms < 0:
        raise ConfigError(f"{origin}: [lifecycle] term_grace_ms: expected an integer ≥ 0")
    if not 0 <= cfg.lifecycle.adopt_secs <= MAX_ADOPT_SECS:
        raise ConfigError(f"{origin}: [lifecycle] adopt_secs: expected an integer from 0 to "
                          f"{MAX_ADOPT_SECS}")
    if cfg.store.url and not cfg.store.is_postgres:
        # Never echo the value: a URL may carry a password.
        raise ConfigError(
            f"{origin}: [store] url: expected '' (SQLite in the data dir) or a "
            "postgresql://user@host:port/database URL"
        )
    for key in ("lease_secs", "pool_size", "connect_timeout_secs", "outage_buffer_bytes"):
        if getattr(cfg.store, key) < 1:
            raise ConfigError(f"{origin}: [store] {key}: expected an integer ≥ 1")
    for key in ("max_session_bytes", "max_token_bytes"):
        if getattr(cfg.store, key) < 0:
            raise ConfigError(f"{origin}: [store] {key}: expected an integer ≥ 0 (0 = unlimited)")
    if cfg.logging.file_max_bytes < 1024:
        raise ConfigError(f"{origin}: [logging] file_max_bytes: expected an integer ≥ 1024")
    if cfg.logging.file_keep < 0:
        raise ConfigError(f"{origin}: [logging] file_keep: expected an integer ≥ 0")
    for alias, agent in cfg.agents.items():
        if not 0 <= agent.warm <= MAX_WARM_ADAPTERS:
            raise ConfigError(
                f"{origin}: [agents.{alias}] warm: expected an integer in 0..{MAX_WARM_ADAPTERS}")


def with_overrides(cfg: Config, **sections: Any) -> Config:
    """A copy of ``cfg`` with whole sections replaced (for tests and CLI flags)."""
    return replace(cfg, **sections)
