"""Which configuration keys a running process applies on reload, and which need a restart.

A reload (``SIGHUP``, ``acpgate config set``) compares the running config with the
one just loaded, key by key (dotted names: ``acp.max_sessions``, ``agents.new`` for an
agent added or removed, ``agents.x.command`` for one key of one). The keys whose field
declares ``reload=True`` (:data:`RELOADABLE`) are taken from the new config; every other changed key
keeps its running value until the process restarts (what was bound, opened or spawned
from it — ports, the data dir, the store, the workers — cannot change under it), and
is reported as needing a restart. Only key names are reported, never values (an
agent's ``env`` holds API keys).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

from services.common.config.schema import SECTIONS, AgentSection, Config, settings

__all__ = ["RELOADABLE", "ConfigChange", "changed_keys", "describe", "needs_restart",
           "reloaded"]

def _reloadable_keys() -> frozenset[str]:
    """The keys whose field declares ``reload=True``; a section (``agents`` too) every key
    of which does is reloadable whole, so adding or removing an agent applies as well."""
    out: set[str] = set()
    tables: dict[str, type] = {**SECTIONS, "agents": AgentSection}
    for name, cls in tables.items():
        declared = settings(cls)
        live = {key for key, setting in declared.items() if setting.reload}
        if live and live == set(declared):
            out.add(name)
        else:
            out |= {f"{name}.{key}" for key in live}
    return frozenset(out)


#: The keys (a whole section, or ``section.key``) a running process applies. Agents:
#: the session service resolves every new session against them (new sessions use the
#: new entry, running ones keep their agent process).
RELOADABLE: frozenset[str] = _reloadable_keys()


def needs_restart(key: str) -> bool:
    """True unless ``key`` (dotted) or its section is :data:`RELOADABLE`."""
    parts = key.split(".")
    return not any(".".join(parts[:n]) in RELOADABLE for n in range(1, len(parts) + 1))


def _section_keys(prefix: str, old: Any, new: Any) -> list[str]:
    """The dotted keys whose value differs between two sections (nested ones walked)."""
    out: list[str] = []
    for f in fields(old):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a == b:
            continue
        if is_dataclass(a) and is_dataclass(b):
            out += _section_keys(f"{prefix}.{f.name}", a, b)
        else:
            out.append(f"{prefix}.{f.name}")
    return out


def changed_keys(old: Config, new: Config) -> tuple[str, ...]:
    """Every key whose effective value differs, sorted; an agent added or removed is
    ``agents.<alias>``, a changed one its changed keys."""
    out: list[str] = []
    for f in fields(old):
        if f.name == "agents":
            for alias in sorted(set(old.agents) | set(new.agents)):
                a, b = old.agents.get(alias), new.agents.get(alias)
                if a is None or b is None:
                    out.append(f"agents.{alias}")
                elif a != b:
                    out += _section_keys(f"agents.{alias}", a, b)
        elif f.name == "config_dir":
            if old.config_dir != new.config_dir:
                out.append("config_dir")
        else:
            out += _section_keys(f.name, getattr(old, f.name), getattr(new, f.name))
    return tuple(sorted(out))


@dataclass(frozen=True)
class ConfigChange:
    """What one reload changed: the keys applied and those that wait for a restart."""

    applied: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing differs."""
        return not (self.applied or self.restart)


def describe(old: Config, new: Config) -> ConfigChange:
    """The changed keys of ``old`` → ``new``, split into applied and restart-only."""
    keys = changed_keys(old, new)
    return ConfigChange(applied=tuple(k for k in keys if not needs_restart(k)),
                        restart=tuple(k for k in keys if needs_restart(k)))


def _keep_restart_keys(prefix: str, old: Any, new: Any) -> Any:
    """``new`` with every field that needs a restart taken back from ``old``."""
    if prefix in RELOADABLE:
        return new
    kept: dict[str, Any] = {}
    for f in fields(old):
        key = f"{prefix}.{f.name}"
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a == b or key in RELOADABLE:
            continue
        kept[f.name] = _keep_restart_keys(key, a, b) if is_dataclass(a) else a
    return replace(new, **kept) if kept else new


def reloaded(running: Config, new: Config) -> Config:
    """The config a running process switches to: ``new``'s reloadable keys, ``running``'s
    value for every key that needs a restart."""
    sections = {f.name: _keep_restart_keys(f.name, getattr(running, f.name),
                                           getattr(new, f.name))
                for f in fields(running) if f.name not in ("config_dir", "agents")}
    return replace(running, agents=new.agents, **sections)
