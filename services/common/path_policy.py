"""The path rules of the session policy (SPEC §12), as pure checks anyone may run.

The policy is *data* (:class:`services.common.policy.SecurityPolicy`); these
functions apply its path rules to one path. Two parties run them: the
built-in agent on every file tool call (``services.agent.enforce``), and the
session service when an external adapter asks the client to read or write a
file (``CheckAccess``-style decisions stay in the session service; the edge
only asks). Every function is pure apart from reading the file system to
resolve real paths (symlinks), so callers on an event loop run them via
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
   allowed — roots beat the forbidden paths they lie inside (the agent
   workspace inside the config dir), never a forbidden path that lies inside
   them: a root that contains the data dir or ``~/.ssh`` still does not reach it.
4. Otherwise a path under a forbidden path is refused — forbidden paths beat
   everything else (also in ``full`` autonomy).
5. Otherwise, with ``workspace_only`` (every level but ``full``) the path is
   outside the roots and refused.
6. ``readonly`` refuses every write and the shell.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

from services.common.policy import SecurityPolicy

__all__ = [
    "PolicyViolation",
    "check_read",
    "check_write",
    "may_read",
    "may_run_shell",
    "may_write",
]

#: How many rounds of percent-decoding are undone when looking for hidden traversal.
_MAX_DECODE_ROUNDS = 4


class PolicyViolation(Exception):
    """A path or action the policy refuses; ``str(exc)`` is the reason, fit for the model."""


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


def _forbidden(policy: SecurityPolicy) -> list[tuple[str, str]]:
    """Each forbidden path as written (absolute, normalized) and as its real path."""
    out: list[tuple[str, str]] = []
    for entry in policy.forbidden_paths:
        if not entry.strip():
            continue
        expanded = os.path.expanduser(entry.strip())
        if not os.path.isabs(expanded):
            expanded = os.path.join(policy.workspace_dir, expanded)
        literal = os.path.normpath(expanded)
        out.append((literal, _real(literal)))
    return out


def _under(path: str, forbidden: tuple[str, str]) -> bool:
    """True when ``path`` lies in a forbidden path, either as written or as resolved."""
    return any(_within(path, f) for f in forbidden)


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
    hits = [f for f in _forbidden(policy) if _under(real, f) or _under(literal, f)]
    # A root wins only over forbidden paths that hold the whole root.
    if any(_within(real, root) and all(_under(root, f) for f in hits) for root in roots):
        return Path(real)
    if hits:
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
