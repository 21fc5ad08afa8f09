"""``acpgate agents add | list | search``: the configured agents, and new ones from the
ACP Registry.

``add <id>`` installs nothing and runs nothing: it reads the registry (the public URL, or
``--registry FILE``), writes one ``[agents.<alias>]`` table into config.toml (the rest of
the file kept, the result checked against the schema) and says what is left to do — the
runtime it needs, the archive to unpack, the key variables and whether they are set
(never their values).
"""

from __future__ import annotations

import difflib
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from acpgate.ops.agent_entry import AgentPlan, plan_agent
from acpgate.ops.client import relative_home
from acpgate.ops.registry import Registry, RegistryAgent, RegistryError
from acpgate.ops.registry_fetch import read_registry
from services.common import config as config_mod
from services.common.config import AgentSection, Config

__all__ = ["add_agent", "list_agents", "search_registry"]

#: Characters of a description ``agents search`` shows.
_DESCRIPTION_CHARS = 60


def _find(registry: Registry, agent_id: str, source: str) -> RegistryAgent:
    agent = registry.agents.get(agent_id)
    if agent is not None:
        return agent
    if agent_id in registry.problems:
        raise RegistryError(f"the registry's entry for {agent_id!r} cannot be used: "
                            f"{registry.problems[agent_id]}")
    close = difflib.get_close_matches(agent_id, list(registry.agents), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise RegistryError(f"no agent {agent_id!r} in the registry {source}{hint}; "
                        "`acpgate agents search` lists them")


def _key_line(keys: tuple[str, ...], environ: Mapping[str, str]) -> str:
    if not keys:
        return ("keys: the registry names no key variable; the agent signs in itself (ACP "
                "authenticate, or its own login). If it reads one, add it to pass_env")
    states = ", ".join(f"{k} {'is set' if environ.get(k, '').strip() else 'is not set'}"
                       for k in keys)
    return f"keys: {states} here (pass_env hands it to the agent; or sign in with the agent)"


def _todo(plan: AgentPlan, alias: str) -> list[str]:
    if plan.via == "binary":
        assert plan.unpack_into is not None
        return [f"nothing was installed: download {plan.archive}",
                f"  and unpack it into {relative_home(plan.unpack_into)}/ so that "
                f"{relative_home(plan.values['command'])} exists and is executable"]
    runtime = "Node.js (npx)" if plan.via == "npx" else "uv (uvx)"
    return [f"nothing was installed: {plan.via} fetches {plan.package} when a session first "
            f"starts {alias}; it needs {runtime} on PATH"]


def add_agent(config_dir: Path, agent_id: str, *, alias: str = "", registry: str | None = None,
              via: str = "", force: bool = False, environ: Mapping[str, str] | None = None
              ) -> int:
    """``acpgate agents add``: write the entry, print it and what is left to do."""
    env = os.environ if environ is None else environ
    source = registry or "(the public ACP Registry)"
    agent = _find(read_registry(registry), agent_id, source)
    alias = alias or agent.id
    plan = plan_agent(agent, alias, config_dir, via=via)
    config_mod.ensure_default_config(config_dir)
    path = config_mod.add_agent_section(
        config_dir, alias, plan.values, replace=force,
        comment=f"from the ACP Registry: {agent.id} {agent.version} ({plan.via})")
    values = plan.values
    print(f"added [agents.{alias}] to {relative_home(path)}: {agent.name} {agent.version} "
          f"(registry id {agent.id}, via {plan.via})")
    print(f"  command = {values['command']}")
    print(f"  args    = {shlex.join(values.get('args', [])) or '(none)'}")
    if plan.env_names:
        print(f"  env     = {', '.join(plan.env_names)} (from the manifest)")
    for line in [*_todo(plan, alias), _key_line(plan.keys, env)]:
        print(line)
    print(f"use it: \"agentAlias\": \"{alias}\" in session/new, or "
          f"acpgate config set acp.default_agent {alias}; check it: acpgate doctor")
    return 0


def _runs(agent: AgentSection) -> str:
    if agent.kind == "builtin":
        return f"built-in, {agent.default_model or '(no provider/model)'}"
    return shlex.join([agent.command, *agent.args]) if agent.command else "(no command)"


def list_agents(cfg: Config) -> int:
    """``acpgate agents list``: the configured agents, the default one marked."""
    if not cfg.agents:
        print(f"no agents in {relative_home(cfg.config_file)}; add one: acpgate agents add <id>",
              file=sys.stderr)
        return 0
    width = max(len(a) for a in cfg.agents) + 2
    for alias, agent in sorted(cfg.agents.items()):
        mark = "*" if alias == cfg.acp.default_agent else " "
        state = "" if agent.enabled else " (disabled)"
        print(f"{mark} {alias:<{width}}{agent.kind:<9}{_runs(agent)}{state}")
    return 0


def search_registry(text: str = "", registry: str | None = None) -> int:
    """``acpgate agents search [TEXT]``: what the registry offers (id, version, how)."""
    found = read_registry(registry)
    wanted = text.lower()
    rows = [a for _, a in sorted(found.agents.items())
            if not wanted or wanted in f"{a.id} {a.name} {a.description}".lower()]
    width = max((len(a.id) for a in rows), default=0) + 2
    for agent in rows:
        about = agent.description
        if len(about) > _DESCRIPTION_CHARS:
            about = about[:_DESCRIPTION_CHARS - 1] + "…"
        print(f"{agent.id:<{width}}{agent.version:<10}{','.join(agent.kinds):<12}"
              f"{agent.name}: {about}")
    for problem in found.problems.values():
        print(f"acpgate: left out: {problem}", file=sys.stderr)
    if not rows:
        print("no agent matches" if text else "the registry lists no agents", file=sys.stderr)
    return 0
