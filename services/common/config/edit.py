"""``acpgate config set/get/show``: one key at a time, comments kept (tomlkit).

``set`` type-checks the new value against the schema, edits the file in place
of its old value (keeping every comment and the rest of the layout), replaces
the file atomically and re-loads it: an edit that makes the whole config
invalid is rolled back. ``add_agent_section`` writes a whole ``[agents.<alias>]`` table
the same way (``acpgate agents add``). ``show`` never prints a secret.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, MutableMapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import tomlkit

from services.common.config.coerce import check_choice, coerce_value
from services.common.config.load import load_config
from services.common.config.schema import (
    CONFIG_FILE_NAME,
    SECTIONS,
    AgentSection,
    Config,
    ConfigError,
    field_types,
)
from services.common.mcp_servers import to_json
from services.common.private_files import private_dir, write_private_text
from services.common.urls import redact_url


def _schema_type(section: str, key: str) -> str:
    """The declared type of ``[section] key``; ConfigError naming the known ones if none."""
    if section.startswith("agents."):
        types = field_types(AgentSection)
    elif section in SECTIONS:
        types = field_types(SECTIONS[section])
    else:
        known = ", ".join(sorted([*SECTIONS, "agents.<alias>"]))
        raise ConfigError(f"unknown section {section!r} (known: {known})")
    if key not in types:
        raise ConfigError(f"[{section}] unknown key {key!r} (known keys: {', '.join(sorted(types))})")
    return types[key]


def _split_key(dotted: str) -> tuple[str, str]:
    """``"agents.a.model"`` → ``("agents.a", "model")``."""
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
    path = config_dir / CONFIG_FILE_NAME
    value = _typed_value(section, key, text, where=f"{path}: [{section}] {key}")
    new_text = _edited_text(path, section, key, value)
    _replace_and_reload(config_dir, path, new_text)
    return value


def _typed_value(section: str, key: str, text: str, *, where: str) -> Any:
    """``text`` parsed as the declared type of ``[section] key`` and checked against its choices."""
    value = coerce_value(text, _schema_type(section, key), where, from_text=True)
    check_choice("agents" if section.startswith("agents.") else section, key, value, where)
    return value


def _toml_form(value: Any, *, secrets: bool = True) -> Any:
    """A typed value as TOML: tuples as arrays, MCP servers as their ACP tables."""
    if isinstance(value, tuple):
        return [v if isinstance(v, str) else to_json(v, secrets=secrets) for v in value]
    return value


def _edited_text(path: Path, section: str, key: str, value: Any) -> str:
    """The file's text with ``[section] key = value`` set, comments and layout kept."""
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    except Exception as exc:  # tomlkit raises its own ParseError subclasses
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    table: Any = doc
    for part in section.split("."):
        if part not in table:
            table[part] = tomlkit.table(is_super_table=(part == "agents"))
        table = table[part]
    table[key] = _toml_form(value)
    new_text = tomlkit.dumps(doc)
    try:
        tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - tomlkit emits valid TOML
        raise ConfigError(f"{path}: edit would produce invalid TOML: {exc}") from None
    return new_text


#: An alias ``agents add`` writes: a plain name, so ``agents.<alias>.<key>`` stays one
#: dotted key and ``<config dir>/agents/<alias>`` one directory.
ALIAS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def add_agent_section(config_dir: Path, alias: str, values: Mapping[str, Any], *,
                      comment: str = "", replace: bool = False) -> Path:
    """Write a whole ``[agents.<alias>]`` table, keeping the rest of the file as it is.

    Every value is checked against the schema; an existing table of that alias is refused
    unless ``replace``; the result is re-loaded and rolled back when it does not load.
    Returns the file written.
    """
    path = config_dir / CONFIG_FILE_NAME
    if not ALIAS_RE.fullmatch(alias):
        raise ConfigError(f"alias {alias!r}: expected letters, digits, '-' or '_' (at most 64, "
                          "starting with a letter or digit)")
    section = f"agents.{alias}"
    table = tomlkit.table()
    if comment:
        table.add(tomlkit.comment(re.sub(r"[\x00-\x1f\x7f]", " ", comment)))
    for key, value in values.items():
        typed = coerce_value(value, _schema_type(section, key), f"[{section}] {key}",
                             from_text=False)
        check_choice("agents", key, typed, f"[{section}] {key}")
        if isinstance(value, Mapping):
            inline = tomlkit.inline_table()
            inline.update(value)
            table[key] = inline
        else:
            table[key] = _toml_form(typed)
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    except Exception as exc:  # tomlkit raises its own ParseError subclasses
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    if "agents" not in doc:
        doc["agents"] = tomlkit.table(is_super_table=True)
    agents: Any = doc["agents"]
    if not isinstance(agents, MutableMapping):
        raise ConfigError(f"{path}: [agents] expected a table of [agents.<alias>] tables")
    if alias in agents and not replace:
        raise ConfigError(f"{path} already has [agents.{alias}]: choose another name with "
                          "--alias NAME, or replace it with --force")
    agents[alias] = table
    _replace_and_reload(config_dir, path, tomlkit.dumps(doc))
    return path


def _replace_and_reload(config_dir: Path, path: Path, new_text: str) -> None:
    """Write ``new_text`` atomically; restore the old file if the result does not load."""
    private_dir(config_dir)
    old_text = path.read_text(encoding="utf-8") if path.exists() else None
    write_private_text(path, new_text)
    try:
        load_config(config_dir, environ={})
    except ConfigError:
        if old_text is None:
            path.unlink()
        else:
            path.write_text(old_text, encoding="utf-8")
        raise


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
    for name in SECTIONS:
        if name == "gateway.tls":
            continue
        section = getattr(cfg, name)
        table = tomlkit.table()
        for f in fields(section):
            if f.name == "tls":
                continue
            value = getattr(section, f.name)
            if (name, f.name) == ("store", "url") and value:
                value = redact_url(value)  # a URL may carry a password
            table[f.name] = list(value) if isinstance(value, tuple) else value
        doc[name] = table
    tls = tomlkit.table()
    for f in fields(cfg.gateway.tls):
        tls[f.name] = getattr(cfg.gateway.tls, f.name)
    doc["gateway"]["tls"] = tls
    doc["agents"] = _agents_table(cfg.agents)
    return f"# effective config (config file: {cfg.config_file}; data dir: {cfg.data_dir})\n" + (
        tomlkit.dumps(doc)
    )


def _agents_table(agents: Mapping[str, AgentSection]) -> Any:
    """``[agents.<alias>]`` tables for ``show``; env values are masked (they may hold secrets)."""
    out = tomlkit.table(is_super_table=True)
    for alias, agent in agents.items():
        table = tomlkit.table()
        for f in fields(agent):
            if f.name == "alias":
                continue
            value = getattr(agent, f.name)
            if isinstance(value, tuple):
                value = _toml_form(value, secrets=False)  # MCP env/header values may be secrets
            elif isinstance(value, Mapping):
                value = {k: "<set>" for k in value}  # env values may hold secrets
            table[f.name] = value
        out[alias] = table
    return out
