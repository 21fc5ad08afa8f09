"""The ACP Registry's JSON, read and checked: what ``acpgate agents add`` builds from.

The registry (``https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json``,
built from github.com/agentclientprotocol/registry) is ``{"version", "agents": [...],
"extensions": [...]}``; each agent is ``{id, name, version, description, distribution}``
where ``distribution`` holds any of ``npx``/``uvx`` (``{package, args?, env?}``) and
``binary`` (``{<platform>: {archive, cmd, args?, env?}}``, platforms such as
``linux-x86_64``). A single ``agent.json`` is read as a registry of one.

Everything in it is someone else's text that ends up in argv and in config.toml, so it
is held to narrow shapes: ids and package names by pattern, no control characters,
bounded sizes, https archives, relative commands, and no environment variable that
makes a program load other code or fetch packages from elsewhere. Unknown fields are
ignored; anything else out of shape is a :class:`RegistryError` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.common.loader_env import is_loader_variable

__all__ = ["DISTRIBUTION_KINDS", "PLATFORMS", "BinaryTarget", "PackageDist", "Registry",
           "RegistryAgent", "RegistryError", "parse_registry"]

#: The distribution kinds acpgate can configure, in the order ``agents add`` prefers them.
DISTRIBUTION_KINDS = ("npx", "uvx", "binary")
#: The registry's platform keys for binary distributions.
PLATFORMS = ("darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64",
             "windows-aarch64", "windows-x86_64")

#: The registry's id pattern (agent.schema.json), bounded.
ID_RE = re.compile(r"[a-z][a-z0-9-]{0,63}")
#: A semantic version as the registry requires it (build/pre-release parts allowed).
VERSION_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+-]{0,64}")
#: An npm package spec: ``name``, ``@scope/name``, either with ``@<version or tag>``.
NPM_SPEC_RE = re.compile(r"(?P<name>(?:@[a-z0-9][a-z0-9._~-]{0,100}/)?[a-z0-9][a-z0-9._~-]{0,213})"
                         r"(?:@(?P<version>[~^]?[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}))?",
                         re.IGNORECASE)
#: A PyPI requirement for uvx: ``name``, ``name[extras]``, then ``==V``, ``@V`` or a range.
PYPI_SPEC_RE = re.compile(r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,200}[A-Za-z0-9])?)"
                          r"(?P<extras>\[[A-Za-z0-9._,-]{1,200}\])?"
                          r"(?:(?P<op>==|@|>=|<=|~=|!=|>|<)(?P<version>[0-9A-Za-z.*+!_-]{1,64}))?")
#: A binary's command inside its archive: a relative path of plain names.
CMD_RE = re.compile(r"(?:\./)?(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,100}/){0,8}"
                    r"[A-Za-z0-9_][A-Za-z0-9._-]{0,100}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: Variables a manifest may not set although they load no code: they send npx/uvx to
#: another package index, or change where programs are looked up.
_REDIRECTING_PREFIXES = ("NPM_CONFIG_", "UV_", "PIP_", "COREPACK_", "YARN_")
_REDIRECTING_NAMES = frozenset({"PATH", "HOME", "SHELL", "TMPDIR", "XDG_CONFIG_HOME",
                                "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
                                "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"})
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL, C1 (terminal escapes)
MAX_ARGS = 64
MAX_ARG_CHARS = 4096
MAX_ENV = 64
MAX_TEXT_CHARS = 2000


class RegistryError(Exception):
    """The registry (or one entry of it) cannot be used; the message says why and where."""


@dataclass(frozen=True)
class PackageDist:
    """An ``npx`` or ``uvx`` distribution: the package spec, its args and env."""

    package: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BinaryTarget:
    """One platform's archive of a ``binary`` distribution."""

    archive: str
    cmd: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RegistryAgent:
    """One agent of the registry, checked."""

    id: str
    name: str
    version: str
    description: str
    npx: PackageDist | None = None
    uvx: PackageDist | None = None
    binary: Mapping[str, BinaryTarget] = field(default_factory=dict)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The distribution kinds it offers, in preference order."""
        have = {"npx": self.npx is not None, "uvx": self.uvx is not None,
                "binary": bool(self.binary)}
        return tuple(k for k in DISTRIBUTION_KINDS if have[k])


@dataclass(frozen=True)
class Registry:
    """The agents that passed the checks, and why each other one did not."""

    agents: Mapping[str, RegistryAgent]
    #: Why each entry left out was left out, by its id (``agents[i]`` when it has none).
    problems: Mapping[str, str] = field(default_factory=dict)


def _text(value: Any, where: str, *, limit: int = MAX_TEXT_CHARS, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise RegistryError(f"{where}: expected a string, got {type(value).__name__}")
    if not value and not empty:
        raise RegistryError(f"{where}: must not be empty")
    if len(value) > limit:
        raise RegistryError(f"{where}: longer than {limit} characters")
    if _CONTROL_RE.search(value):
        raise RegistryError(f"{where}: contains control characters")
    return value


def _args(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ARGS:
        raise RegistryError(f"{where}: expected an array of at most {MAX_ARGS} strings")
    return tuple(_text(v, f"{where}[{i}]", limit=MAX_ARG_CHARS, empty=True)
                 for i, v in enumerate(value))


def _env(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_ENV:
        raise RegistryError(f"{where}: expected a table of at most {MAX_ENV} strings")
    out: dict[str, str] = {}
    for name, text in value.items():
        if not ENV_NAME_RE.fullmatch(name):
            raise RegistryError(f"{where}: {name!r} is not a variable name")
        upper = name.upper()
        if is_loader_variable(upper) or upper in _REDIRECTING_NAMES \
                or upper.startswith(_REDIRECTING_PREFIXES):
            raise RegistryError(f"{where}: refuses to set {name} (it makes the agent load code "
                                "or packages from elsewhere)")
        out[name] = _text(text, f"{where}.{name}", limit=MAX_ARG_CHARS, empty=True)
    return out


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RegistryError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _package(raw: Any, kind: str, where: str) -> PackageDist:
    table = _table(raw, where)
    package = _text(table.get("package"), f"{where}.package", limit=300)
    spec_re = NPM_SPEC_RE if kind == "npx" else PYPI_SPEC_RE
    if not spec_re.fullmatch(package):
        raise RegistryError(f"{where}.package: {package!r} is not a valid "
                            f"{'npm' if kind == 'npx' else 'PyPI'} package name")
    return PackageDist(package, _args(table.get("args"), f"{where}.args"),
                       _env(table.get("env"), f"{where}.env"))


def _binary(raw: Any, where: str) -> dict[str, BinaryTarget]:
    out: dict[str, BinaryTarget] = {}
    for platform, target in _table(raw, where).items():
        if platform not in PLATFORMS:
            continue  # a platform this schema version does not know: not ours to run
        at = f"{where}.{platform}"
        table = _table(target, at)
        archive = _text(table.get("archive"), f"{at}.archive")
        if not archive.lower().startswith("https://") or " " in archive:
            raise RegistryError(f"{at}.archive: expected an https:// URL")
        cmd = _text(table.get("cmd"), f"{at}.cmd", limit=300)
        if not CMD_RE.fullmatch(cmd) or ".." in cmd.split("/"):
            raise RegistryError(f"{at}.cmd: {cmd!r} is not a relative path inside the archive")
        out[platform] = BinaryTarget(archive, cmd, _args(table.get("args"), f"{at}.args"),
                                     _env(table.get("env"), f"{at}.env"))
    if not out:
        raise RegistryError(f"{where}: no known platform")
    return out


def parse_agent(raw: Any, where: str = "agent") -> RegistryAgent:
    """One registry entry, checked; :class:`RegistryError` naming the bad field."""
    table = _table(raw, where)
    agent_id = _text(table.get("id"), f"{where}.id", limit=64)
    if not ID_RE.fullmatch(agent_id):
        raise RegistryError(f"{where}.id: {agent_id!r} is not a registry id (lowercase letters, "
                            "digits and hyphens)")
    where = f"agent {agent_id!r}"
    version = _text(table.get("version"), f"{where}: version", limit=80)
    if not VERSION_RE.fullmatch(version):
        raise RegistryError(f"{where}: version {version!r} is not a semantic version")
    dist = _table(table.get("distribution"), f"{where}: distribution")
    npx = _package(dist["npx"], "npx", f"{where}: distribution.npx") if "npx" in dist else None
    uvx = _package(dist["uvx"], "uvx", f"{where}: distribution.uvx") if "uvx" in dist else None
    binary = _binary(dist["binary"], f"{where}: distribution.binary") if "binary" in dist else {}
    if npx is None and uvx is None and not binary:
        raise RegistryError(f"{where}: distribution offers none of {', '.join(DISTRIBUTION_KINDS)}")
    return RegistryAgent(
        id=agent_id, name=_text(table.get("name"), f"{where}: name", limit=200),
        version=version, description=_text(table.get("description", ""), f"{where}: description",
                                           empty=True),
        npx=npx, uvx=uvx, binary=binary)


def parse_registry(raw: Any, source: str) -> Registry:
    """The registry document (or one ``agent.json``) read from ``source``.

    A document that is neither is a :class:`RegistryError`; an entry out of shape is left
    out and named in ``problems`` (``agents add`` of that id reports it as the error).
    """
    if isinstance(raw, dict) and "distribution" in raw and "agents" not in raw:
        agent = parse_agent(raw, f"{source}")
        return Registry({agent.id: agent})
    if not isinstance(raw, dict) or not isinstance(raw.get("agents"), list):
        raise RegistryError(f"{source}: not an ACP registry (expected an object with an "
                            "\"agents\" array, or one agent.json)")
    agents: dict[str, RegistryAgent] = {}
    problems: dict[str, str] = {}
    for i, entry in enumerate(raw["agents"]):
        try:
            agent = parse_agent(entry, f"{source}: agents[{i}]")
        except RegistryError as exc:
            key = entry.get("id") if isinstance(entry, dict) else None
            problems[key if isinstance(key, str) and key else f"agents[{i}]"] = str(exc)
            continue
        agents.setdefault(agent.id, agent)
    return Registry(agents, problems)
