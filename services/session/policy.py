"""The per-session security policy of SPEC §12 — one implementation, imported verbatim.

The session service *decides* a policy (:func:`policy_for`) and the built-in
agent *enforces* it with the check functions below; neither copies the rules.
Every function here is pure apart from reading the file system to resolve real
paths (symlinks), so callers on an event loop should run the path checks via
``asyncio.to_thread`` when the file system may be slow.

Path rules, in order:

1. The raw path is refused when it contains a NUL byte, a ``..`` component,
   ``~user`` (another user's home), or percent-encoded traversal (``%2e%2e``,
   ``%2f``, ``%5c``, ``%00``, also double-encoded).
2. ``~`` / ``~/…`` expand to the home directory; a relative path is taken
   relative to the session workspace. The real path is then resolved (symlinks
   followed; for a not-yet-existing write target the nearest existing parent is
   resolved and the rest appended), so a symlink cannot escape.
3. A real path inside an allowed root (the workspace or ``allowed_roots``) is
   allowed — roots beat forbidden paths.
4. Otherwise a path under a forbidden path is refused — forbidden paths beat
   everything else (also in ``full`` autonomy).
5. Otherwise, with ``workspace_only`` (every level but ``full``) the path is
   outside the roots and refused.
6. ``readonly`` refuses every write and the shell.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from services.common.config import AUTONOMY_LEVELS

if TYPE_CHECKING:
    from services.common.config import Config

__all__ = [
    "PolicyViolation",
    "SecurityPolicy",
    "check_read",
    "check_write",
    "may_read",
    "may_run_shell",
    "may_write",
    "needs_approval",
    "policy_for",
]

#: How many rounds of percent-decoding are undone when looking for hidden traversal.
_MAX_DECODE_ROUNDS = 4


class PolicyViolation(Exception):
    """A path or action the policy refuses; ``str(exc)`` is the reason, fit for the model."""


@dataclass(frozen=True)
class SecurityPolicy:
    """The policy of one session (SPEC §12).

    ``workspace_dir`` is the session boundary; ``allowed_roots`` are extra roots
    (the agent workspace); ``forbidden_paths`` may start with ``~`` (the home dir).
    """

    workspace_dir: str
    allowed_roots: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    autonomy: str = "supervised"  # readonly | supervised | full
    auto_approve: tuple[str, ...] = ()
    always_ask: tuple[str, ...] = ()
    workspace_only: bool = True

    def to_json(self) -> dict[str, Any]:
        """The ``_meta.acpgate.policy`` form: camelCase keys, lists for tuples."""
        return {
            "workspaceDir": self.workspace_dir,
            "allowedRoots": list(self.allowed_roots),
            "forbiddenPaths": list(self.forbidden_paths),
            "autonomy": self.autonomy,
            "autoApprove": list(self.auto_approve),
            "alwaysAsk": list(self.always_ask),
            "workspaceOnly": self.workspace_only,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SecurityPolicy:
        """Parse the ``_meta.acpgate.policy`` form; a malformed value raises ``ValueError``.

        Missing optional keys take the dataclass defaults; ``workspaceDir`` is required.
        """
        if not isinstance(d, Mapping):
            raise ValueError("policy must be an object")
        workspace = d.get("workspaceDir")
        if not isinstance(workspace, str) or not workspace:
            raise ValueError("policy.workspaceDir must be a non-empty string")
        autonomy = d.get("autonomy", "supervised")
        if autonomy not in AUTONOMY_LEVELS:
            raise ValueError(f"policy.autonomy must be one of {', '.join(AUTONOMY_LEVELS)}")
        workspace_only = d.get("workspaceOnly", autonomy != "full")
        if not isinstance(workspace_only, bool):
            raise ValueError("policy.workspaceOnly must be a boolean")
        return cls(
            workspace_dir=workspace,
            allowed_roots=_str_tuple(d, "allowedRoots"),
            forbidden_paths=_str_tuple(d, "forbiddenPaths"),
            autonomy=autonomy,
            auto_approve=_str_tuple(d, "autoApprove"),
            always_ask=_str_tuple(d, "alwaysAsk"),
            workspace_only=workspace_only,
        )


def _str_tuple(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = d.get(key, [])
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"policy.{key} must be an array of strings")
    return tuple(value)


# ------------------------------------------------------------------ raw-path checks


def _has_dotdot(path: str) -> bool:
    """True if any component (split on ``/`` and, conservatively, ``\\``) is ``..``."""
    return any(part == ".." for part in path.replace("\\", "/").split("/"))


def _reject_raw(path: str) -> None:
    """Rule 1: refuse NUL, ``..``, ``~user`` and percent-encoded traversal."""
    if not path:
        raise PolicyViolation("empty path")
    if "\x00" in path:
        raise PolicyViolation("path contains a NUL byte")
    if _has_dotdot(path):
        raise PolicyViolation(f"path contains a '..' component: {path}")
    if path.startswith("~") and not (path == "~" or path.startswith("~/")):
        raise PolicyViolation(f"paths into another user's home (~user) are not allowed: {path}")
    # Undo percent-encoding a few times: %2e%2e, ..%2f, %252e%252e, %00 all hide traversal.
    decoded = path
    for _ in range(_MAX_DECODE_ROUNDS):
        nxt = unquote(decoded)
        if nxt == decoded:
            break
        decoded = nxt
    if decoded != path:
        if "\x00" in decoded or _has_dotdot(decoded):
            raise PolicyViolation(f"path contains percent-encoded traversal: {path}")
        if decoded.count("/") != path.count("/") or ("\\" in decoded and "\\" not in path):
            raise PolicyViolation(f"path contains a percent-encoded separator: {path}")
        if decoded.startswith("~") and not path.startswith("~"):
            raise PolicyViolation(f"path contains a percent-encoded '~': {path}")


# ------------------------------------------------------------------ resolution


def _expand_home(path: str) -> str:
    """``~`` and ``~/x`` → the home directory (``~user`` is refused before this)."""
    if path == "~" or path.startswith("~/"):
        return os.path.expanduser(path)
    return path


def _real(path: str) -> str:
    """The real path: symlinks resolved; missing tails appended to the nearest existing parent."""
    return os.path.realpath(path)


def _within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or below it (both real, absolute)."""
    if root == os.sep:
        return True
    return path == root or path.startswith(root + os.sep)


def _roots(policy: SecurityPolicy) -> list[str]:
    """Real paths of the workspace and the allowed roots (roots that exist or not)."""
    out: list[str] = []
    for root in (policy.workspace_dir, *policy.allowed_roots):
        if root:
            out.append(_real(_expand_home(root)))
    return out


def _forbidden(policy: SecurityPolicy) -> list[str]:
    """Forbidden paths, both as written (absolute, normalized) and as real paths."""
    out: list[str] = []
    for entry in policy.forbidden_paths:
        if not entry.strip():
            continue
        expanded = os.path.expanduser(entry.strip())
        if not os.path.isabs(expanded):
            expanded = os.path.join(policy.workspace_dir, expanded)
        literal = os.path.normpath(expanded)
        out.append(literal)
        real = _real(literal)
        if real != literal:
            out.append(real)
    return out


def _resolve(policy: SecurityPolicy, path: str) -> tuple[str, str]:
    """(literal absolute path, real path) of a raw path, after the raw checks."""
    _reject_raw(path)
    expanded = _expand_home(path)
    if not os.path.isabs(expanded):
        expanded = os.path.join(policy.workspace_dir, expanded)
    literal = os.path.normpath(expanded)
    return literal, _real(literal)


def _check(policy: SecurityPolicy, path: str, *, write: bool) -> Path:
    if write and policy.autonomy == "readonly":
        raise PolicyViolation("autonomy is readonly: writes are not allowed")
    literal, real = _resolve(policy, path)
    roots = _roots(policy)
    if any(_within(real, root) for root in roots):
        return Path(real)  # roots beat forbidden paths
    forbidden = _forbidden(policy)
    if any(_within(real, f) or _within(literal, f) for f in forbidden):
        raise PolicyViolation(f"path is forbidden by policy: {path}")
    if policy.workspace_only:
        literal_roots = [os.path.normpath(_expand_home(r)) for r in (policy.workspace_dir,
                                                                      *policy.allowed_roots) if r]
        if any(_within(literal, r) for r in (*literal_roots, *roots)):
            raise PolicyViolation(
                f"path escapes the session workspace through a symlink: {path}"
            )
        raise PolicyViolation(f"path is outside the session workspace: {path}")
    return Path(real)


# ------------------------------------------------------------------ public checks


def check_read(policy: SecurityPolicy, path: str) -> Path:
    """The resolved real path of ``path`` if the policy lets it be read, else PolicyViolation."""
    return _check(policy, path, write=False)


def check_write(policy: SecurityPolicy, path: str) -> Path:
    """The resolved real path of ``path`` if the policy lets it be written, else PolicyViolation.

    The target need not exist: its nearest existing parent is resolved, so a
    symlinked parent directory cannot smuggle a write outside the roots.
    """
    return _check(policy, path, write=True)


def may_read(policy: SecurityPolicy, path: str) -> bool:
    """True when :func:`check_read` would succeed."""
    try:
        check_read(policy, path)
    except PolicyViolation:
        return False
    return True


def may_write(policy: SecurityPolicy, path: str) -> bool:
    """True when :func:`check_write` would succeed."""
    try:
        check_write(policy, path)
    except PolicyViolation:
        return False
    return True


def may_run_shell(policy: SecurityPolicy) -> bool:
    """The shell is refused in ``readonly`` autonomy, allowed otherwise."""
    return policy.autonomy != "readonly"


def needs_approval(policy: SecurityPolicy, tool: str) -> bool:
    """``supervised`` only: the tool is in ``always_ask`` or not in ``auto_approve``."""
    if policy.autonomy != "supervised":
        return False
    return tool in policy.always_ask or tool not in policy.auto_approve


def policy_for(cfg: Config, alias: str, workspace_dir: str) -> SecurityPolicy:
    """The policy the session service decides for ``alias`` in ``workspace_dir`` (SPEC §12).

    ``allowed_roots`` holds the agent workspace, so the agent's own files stay
    reachable; the lists come from ``[autonomy]``; the level is the per-agent
    override or ``[autonomy] level``; ``workspace_only`` is off only in ``full``.
    """
    autonomy = cfg.agent_autonomy(alias)
    # acpgate's own state is never the agent's business: the session store holds
    # every other conversation, the data dir tokens and leases. (The agent
    # workspace, usually under the config dir, is an allowed root and wins.)
    own_state = (str(cfg.data_dir), str(cfg.config_file))
    forbidden = tuple(dict.fromkeys((*cfg.autonomy.forbidden_paths, *own_state)))
    return SecurityPolicy(
        workspace_dir=workspace_dir,
        allowed_roots=(str(cfg.agent_workspace(alias)),),
        forbidden_paths=forbidden,
        autonomy=autonomy,
        auto_approve=tuple(cfg.autonomy.auto_approve),
        always_ask=tuple(cfg.autonomy.always_ask),
        workspace_only=autonomy != "full",
    )
