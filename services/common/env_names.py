"""Naming environment variables by pattern: ``[agents.<alias>] pass_env`` and the like.

A pattern is an exact, case-sensitive name, or a glob whose only metacharacter
that matters is ``*`` (``ACPGATE_agents__*``). The lifecycle service draws an
adapter's environment with it, the edge reads with it which variables an
adapter will see.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

__all__ = ["passes"]


def passes(name: str, patterns: Iterable[str]) -> bool:
    """True when ``name`` is one of ``patterns`` (exact names or ``*`` globs)."""
    return any(fnmatchcase(name, p) if "*" in p else name == p for p in patterns)
