"""An ``[agents.<alias>]`` entry made from an ACP Registry manifest (``agents add``).

``npx`` and ``uvx`` entries run the package at the manifest's version through the
runtime (``npx -y <pkg>@<version> …``, ``uvx <pkg>@<version> …``), so nothing is
installed ahead; a ``binary`` entry's command is where the user is told to unpack the
archive for this machine (``<config dir>/agents/<alias>/bin/``). The key variables of
the adapters acpgate knows go into ``pass_env``: the key stays out of config.toml.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acpgate.ops.adapters import adapter_keys, exact_version, split_npm_spec
from acpgate.ops.registry import PYPI_SPEC_RE, RegistryAgent, RegistryError

__all__ = ["AgentPlan", "host_platform", "plan_agent"]

_SYSTEMS = {"linux": "linux", "darwin": "darwin", "windows": "windows"}
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class AgentPlan:
    """What ``agents add`` writes for one registry agent, and what the user must do."""

    via: str
    values: dict[str, Any]
    #: The package the runtime fetches on first start (npx/uvx), e.g. ``@scope/pkg@1.2.3``.
    package: str = ""
    #: The API-key variables the adapter is known to read (put in ``pass_env``).
    keys: tuple[str, ...] = ()
    #: binary: the archive to download, and the directory to unpack it into.
    archive: str = ""
    unpack_into: Path | None = None
    env_names: tuple[str, ...] = field(default=())


def host_platform() -> str:
    """This machine as the registry names platforms (``linux-x86_64``), or ``""``."""
    system = _SYSTEMS.get(platform.system().lower(), "")
    machine = _MACHINES.get(platform.machine().lower(), "")
    return f"{system}-{machine}" if system and machine else ""


def _npx(agent: RegistryAgent) -> tuple[list[str], str]:
    assert agent.npx is not None
    name, version = split_npm_spec(agent.npx.package)
    spec = f"{name}@{version if exact_version(version) else agent.version}"
    return ["-y", spec, *agent.npx.args], spec


def _uvx(agent: RegistryAgent) -> tuple[list[str], str]:
    assert agent.uvx is not None
    match = PYPI_SPEC_RE.fullmatch(agent.uvx.package)
    assert match is not None  # checked when the registry was read
    pinned = match["op"] in ("==", "@") and exact_version(match["version"] or "")
    version = match["version"] if pinned else agent.version
    if match["extras"]:  # uvx NAME@V takes no extras: name the requirement with --from
        spec = f"{match['name']}{match['extras']}=={version}"
        return ["--from", spec, match["name"], *agent.uvx.args], spec
    spec = f"{match['name']}@{version}"
    return [spec, *agent.uvx.args], spec


def _binary(agent: RegistryAgent, alias: str, config_dir: Path, where: str) -> AgentPlan:
    target = agent.binary.get(where) if where else None
    if target is None:
        offered = ", ".join(sorted(agent.binary)) or "none"
        raise RegistryError(f"agent {agent.id!r} has no binary for this machine "
                            f"({where or platform.machine() or 'unknown'}; it offers: {offered})")
    unpack_into = config_dir / "agents" / alias / "bin"
    command = str(unpack_into / target.cmd.removeprefix("./"))
    values: dict[str, Any] = {"kind": "acp", "command": command}
    if target.args:
        values["args"] = list(target.args)
    if target.env:
        values["env"] = dict(target.env)
    keys = adapter_keys(command, target.args)
    if keys:
        values["pass_env"] = list(keys)
    return AgentPlan("binary", values, keys=keys, archive=target.archive,
                     unpack_into=unpack_into, env_names=tuple(target.env))


def plan_agent(agent: RegistryAgent, alias: str, config_dir: Path, *, via: str = "",
               where: str | None = None) -> AgentPlan:
    """The entry for ``agent`` under ``alias``: by ``via`` (npx, uvx, binary), else by the
    first the manifest offers; binaries for the platform ``where`` (default: this one)."""
    kinds = agent.kinds
    if via and via not in kinds:
        raise RegistryError(f"agent {agent.id!r} is not distributed by {via} (it offers: "
                            f"{', '.join(kinds)})")
    chosen = via or kinds[0]
    if chosen == "binary":
        return _binary(agent, alias, config_dir, host_platform() if where is None else where)
    dist = agent.npx if chosen == "npx" else agent.uvx
    assert dist is not None
    args, package = _npx(agent) if chosen == "npx" else _uvx(agent)
    values: dict[str, Any] = {"kind": "acp", "command": chosen, "args": args}
    if dist.env:
        values["env"] = dict(dist.env)
    keys = adapter_keys(chosen, args)
    if keys:
        values["pass_env"] = list(keys)
    return AgentPlan(chosen, values, package=package, keys=keys, env_names=tuple(dist.env))
