"""Which agent an alias means: the SPEC §3 alias chain, the §8 restore chain, launch specs.

Errors carry the exact client-facing messages of ``services.common.protocol``
(the edge forwards them verbatim as -32602).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.common.acp.v2.names import protocol_number
from services.common.config import AgentSection, Config
from services.common.protocol import MSG_AGENT_DISABLED, MSG_ALIAS_REQUIRED, MSG_UNKNOWN_AGENT

__all__ = [
    "AgentLaunch",
    "AliasError",
    "ensure_agent_workspace",
    "launch_in",
    "launch_spec",
    "make_agent_workspace",
    "resolve_alias",
    "resolve_restore_alias",
]


#: The built-in agent is acpgate's own code: isolated mode (``-I``: no working directory
#: or script dir on ``sys.path``, no ``PYTHON*`` variables, no user site), so a session
#: ``cwd`` holding ``services/agent/__main__.py`` never runs in its place.
BUILTIN_INTERPRETER_FLAGS = ("-I",)

#: What the built-in agent reads from acpgate's environment besides its API key variable:
#: the configuration overrides of the sections it reads, and acpgate's logging and loop
#: settings — never ``[services]``, ``[store]`` or ``[gateway]`` (addresses, credentials).
BUILTIN_PASS_ENV = (
    "ACPGATE_agents__*",
    "ACPGATE_acp__*",
    "ACPGATE_autonomy__*",
    "ACPGATE_paths__*",
    "ACPGATE_sessions__*",
    "ACPGATE_a2a__*",
    "ACPGATE_LOG_LEVEL",
    "ACPGATE_EVENT_LOOP",
)


class AliasError(Exception):
    """An alias could not be resolved; ``str(exc)`` is the exact SPEC message."""


@dataclass(frozen=True)
class AgentLaunch:
    """How to launch the adapter of one alias, and what it is."""

    alias: str
    kind: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    agent_workspace: str = ""
    autonomy: str = "supervised"
    default_model: str = ""
    #: Adapters to keep warm ([agents.<alias>] warm).
    warm: int = 0
    #: Files the adapter reads at start: changing one retires its warm adapters.
    watch_paths: tuple[str, ...] = ()
    #: Variables (names or ``*`` globs) passed from the lifecycle service's environment.
    pass_env: tuple[str, ...] = ()
    #: The ACP version spoken to the adapter: 0 = auto (offer 2), 1 or 2.
    protocol: int = 1


def _check_dispatchable(cfg: Config, alias: str) -> AgentSection:
    agent = cfg.agents.get(alias)
    if agent is None:
        raise AliasError(MSG_UNKNOWN_AGENT.format(alias=alias))
    if not agent.dispatchable:
        raise AliasError(MSG_AGENT_DISABLED.format(alias=alias))
    return agent


def _sole_alias(cfg: Config) -> str:
    """The only configured ``[agents.*]`` entry, or "" when there are zero or several."""
    return next(iter(cfg.agents)) if len(cfg.agents) == 1 else ""


def resolve_alias(cfg: Config, explicit_alias: str = "", connection_default: str = "") -> str:
    """SPEC §3: explicit → connection default → ``[acp] default_agent`` → the sole agent.

    Whichever step chose it, the alias must be configured and dispatchable.
    Raises :class:`AliasError` with the SPEC's message otherwise.
    """
    alias = (
        explicit_alias.strip()
        or connection_default.strip()
        or cfg.acp.default_agent.strip()
        or _sole_alias(cfg)
    )
    if not alias:
        raise AliasError(MSG_ALIAS_REQUIRED)
    _check_dispatchable(cfg, alias)
    return alias


def resolve_restore_alias(cfg: Config, stored_alias: str) -> str:
    """SPEC §8: the stored alias if still dispatchable, else ``[acp] default_agent``, else
    the sole agent — disabled candidates skipped. A connection default never rebinds.

    When nothing qualifies the error names why the stored alias was refused
    (unknown or not enabled), or asks for an alias when none was stored.
    """
    for candidate in (stored_alias.strip(), cfg.acp.default_agent.strip(), _sole_alias(cfg)):
        agent = cfg.agents.get(candidate) if candidate else None
        if agent is not None and agent.dispatchable:
            return candidate
    stored = stored_alias.strip()
    if stored:
        _check_dispatchable(cfg, stored)  # raises the precise message
    raise AliasError(MSG_ALIAS_REQUIRED)


def make_agent_workspace(cfg: Config, alias: str) -> Path:
    """The agent workspace (SPEC §0), created if missing; its real path (blocking; run
    off-loop)."""
    path = cfg.agent_workspace(alias)
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


async def ensure_agent_workspace(cfg: Config, alias: str) -> Path:
    """The agent workspace (SPEC §0), created on demand; returns its real path."""
    # One thread hop, not two: this runs on every session/new.
    return await asyncio.to_thread(make_agent_workspace, cfg, alias)


async def launch_spec(cfg: Config, alias: str) -> AgentLaunch:
    """How to launch ``alias`` (which must be dispatchable): builtin agents run this
    Python's ``-I -m services.agent``; acp agents run their configured command."""
    return launch_in(cfg, alias, await ensure_agent_workspace(cfg, alias))


def launch_in(cfg: Config, alias: str, workspace: Path) -> AgentLaunch:
    """:func:`launch_spec` with the agent workspace already made (``workspace``)."""
    agent = _check_dispatchable(cfg, alias)
    if agent.kind == "builtin":
        command = sys.executable
        args: tuple[str, ...] = (
            *BUILTIN_INTERPRETER_FLAGS, "-m", "services.agent",
            "--config-dir", str(cfg.config_dir), "--alias", alias,
        )
        # The built-in agent reads its config file when it starts.
        watch: tuple[str, ...] = (str(cfg.config_file),)
        key_env = (agent.api_key_env,) if agent.api_key_env else ()
        pass_env = (*key_env, *BUILTIN_PASS_ENV, *agent.pass_env)
    else:
        command, args, watch = agent.command, tuple(agent.args), ()
        pass_env = tuple(agent.pass_env)
    return AgentLaunch(
        alias=alias,
        kind=agent.kind,
        command=command,
        args=args,
        env=dict(agent.env),
        agent_workspace=str(workspace),
        autonomy=cfg.agent_autonomy(alias),
        default_model=agent.default_model,
        warm=agent.warm,
        watch_paths=watch,
        pass_env=pass_env,
        protocol=protocol_number(agent.protocol) if agent.kind != "builtin" else 1,
    )


async def warm_launches(cfg: Config) -> list[AgentLaunch]:
    """The launch specs of the dispatchable agents that keep adapters warm."""
    return [await launch_spec(cfg, alias) for alias, agent in cfg.agents.items()
            if agent.dispatchable and agent.warm > 0]
