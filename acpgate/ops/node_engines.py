"""The Node.js version an npm adapter declares it needs (``engines.node`` in its
``package.json``), and whether a given ``node`` satisfies it.

The declaration is read where the package is on this machine: beside the installed
command (``npm install -g`` puts a link to ``node_modules/<pkg>/…`` on ``PATH``), in npx's
cache (``<npm cache>/_npx/*/node_modules/<pkg>``) or in node's global ``lib/node_modules``.
A package npx has not fetched yet has no known requirement. Only files are read here;
nothing is run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from acpgate.ops.adapters import npx_package
from services.common.config import AgentSection

__all__ = ["NodeRequirement", "node_requirement", "satisfies"]

#: A package.json larger than this is not read.
_MAX_PACKAGE_JSON = 1024 * 1024
#: How many directories above an installed command its package.json may lie.
_MAX_UP = 6
_PART_RE = re.compile(r"(?P<op>>=|<=|>|<|=|\^|~)?v?(?P<ver>[0-9xX*]+(?:\.[0-9xX*]+){0,2})"
                      r"(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?")

Version = tuple[int, int, int]


@dataclass(frozen=True)
class NodeRequirement:
    """``engines.node`` of ``package`` ``version``, read from ``source``."""

    package: str
    version: str
    node_range: str
    source: Path


def _parse_version(text: str) -> Version | None:
    match = re.match(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?", text.strip())
    if not match:
        return None
    return (int(match[1]), int(match[2] or 0), int(match[3] or 0))


def _bounds(op: str, ver: str) -> list[tuple[str, Version]] | None:
    """One comparator as ``(op, version)`` bounds, partial versions widened as npm does."""
    nums: list[int] = []
    for piece in ver.split("."):
        if not piece.isdigit():  # x, X, *: any from here on
            break
        nums.append(int(piece))
    if not nums:
        return [] if op in ("", "=", ">=", "^", "~", "<=") else None
    major, minor, patch = (*nums, 0, 0, 0)[:3]
    low: Version = (major, minor, patch)
    up_major, up_minor = (major + 1, 0, 0), (major, minor + 1, 0)
    # The first version past a partial one: 22 → 23.0.0, 22.3 → 22.4.0.
    past = up_major if len(nums) == 1 else up_minor if len(nums) == 2 else None
    if op in ("", "="):
        return [(">=", low), ("<", past)] if past else [("=", low)]
    if op == "^":
        top = up_major if major or len(nums) == 1 else up_minor if minor or len(nums) == 2 \
            else (0, 0, patch + 1)
        return [(">=", low), ("<", top)]
    if op == "~":
        return [(">=", low), ("<", up_major if len(nums) == 1 else up_minor)]
    if op == ">":
        return [(">=", past)] if past else [(">", low)]
    if op == "<=":
        return [("<", past)] if past else [("<=", low)]
    return [(op, low)]  # >=, <


def _holds(version: Version, op: str, bound: Version) -> bool:
    return {"=": version == bound, ">=": version >= bound, ">": version > bound,
            "<": version < bound, "<=": version <= bound}[op]


def satisfies(node_version: str, node_range: str) -> bool | None:
    """Whether ``node_version`` (``v20.11.1``) is in the npm range ``node_range``
    (``>=22``, ``^20.19.0 || >=22.12.0``, ``18 - 22``); None when either cannot be read."""
    version = _parse_version(node_version)
    if version is None or not node_range.strip():
        return None
    for alternative in node_range.split("||"):
        text = re.sub(r"\s+-\s+", " - ", alternative.strip())
        if " - " in text:  # a hyphen range: A - B
            low, _, high = text.partition(" - ")
            text = f">={low.strip()} <={high.strip()}"
        bounds: list[tuple[str, Version]] = []
        for token in re.sub(r"(>=|<=|>|<|=|\^|~)\s+", r"\1", text).split():
            match = _PART_RE.fullmatch(token)
            found = _bounds(match["op"] or "", match["ver"]) if match else None
            if found is None:
                return None
            bounds += found
        if all(_holds(version, op, bound) for op, bound in bounds):
            return True
    return False


def _read_package_json(path: Path) -> Mapping[str, object] | None:
    try:
        if path.stat().st_size > _MAX_PACKAGE_JSON:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _requirement(path: Path, name: str = "", version: str = "") -> NodeRequirement | None:
    """The requirement of the package.json at ``path`` when it is ``name`` (at ``version``)."""
    data = _read_package_json(path)
    if data is None or (name and data.get("name") != name):
        return None
    if version and data.get("version") != version:
        return None
    engines = data.get("engines")
    node_range = engines.get("node") if isinstance(engines, dict) else None
    if not isinstance(node_range, str) or not node_range.strip():
        return None
    return NodeRequirement(str(data.get("name", "")), str(data.get("version", "")),
                           node_range.strip(), path)


def _beside_command(command: str) -> NodeRequirement | None:
    """The package an installed command belongs to: the first package.json above its real
    path that names a package."""
    found = shutil.which(os.path.expanduser(command))
    if not found:
        return None
    here = Path(os.path.realpath(found)).parent
    for _ in range(_MAX_UP):
        candidate = here / "package.json"
        if candidate.is_file():
            data = _read_package_json(candidate)
            if data and data.get("name"):
                return _requirement(candidate)
        if here.parent == here:
            break
        here = here.parent
    return None


def _npm_cache(environ: Mapping[str, str]) -> Path:
    chosen = environ.get("npm_config_cache") or environ.get("NPM_CONFIG_CACHE")
    return Path(os.path.expanduser(chosen)) if chosen else Path.home() / ".npm"


def _for_npx(name: str, version: str, environ: Mapping[str, str]) -> NodeRequirement | None:
    """The requirement of ``name`` (``version`` when pinned) as npx or npm -g has it."""
    places = sorted((_npm_cache(environ) / "_npx").glob(f"*/node_modules/{name}/package.json"))
    node = shutil.which("node")
    if node:
        prefix = Path(os.path.realpath(node)).parent.parent
        places.append(prefix / "lib" / "node_modules" / name / "package.json")
    for place in places:
        if (found := _requirement(place, name, version)) is not None:
            return found
    return None


def node_requirement(agent: AgentSection, environ: Mapping[str, str]) -> NodeRequirement | None:
    """What the Node.js package ``agent`` runs declares it needs, where that can be read."""
    package = npx_package(agent.command, agent.args)
    if package is not None:
        return _for_npx(*package, environ)
    return _beside_command(agent.command)
