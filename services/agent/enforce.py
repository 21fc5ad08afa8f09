"""The agent's enforcement of the session policy (SPEC §12): every tool call checks here.

The policy itself is data (:class:`services.common.policy.SecurityPolicy`),
decided by the session service and sent by the edge. The path rules and the
shell gate are the shared pure checks of :mod:`services.common.path_policy`
(the session service applies the same ones to an external adapter's file
requests); this module adds the approval rule and is the one place the
agent's tools import them from.

Tool names in ``auto_approve``/``always_ask`` are patterns (``fnmatch`` style,
case-sensitive): ``github__*`` covers every tool of the MCP server ``github``;
a plain name matches only itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from services.common.path_policy import (
    PolicyViolation,
    check_read,
    check_write,
    may_read,
    may_run_shell,
    may_write,
)
from services.common.policy import SecurityPolicy

__all__ = [
    "PolicyViolation",
    "check_read",
    "check_write",
    "matches_any",
    "may_read",
    "may_run_shell",
    "may_write",
    "needs_approval",
]


def matches_any(tool: str, patterns: Iterable[str]) -> bool:
    """True when a pattern of ``auto_approve``/``always_ask`` names ``tool`` (``fnmatch``)."""
    return any(fnmatchcase(tool, pattern) for pattern in patterns)


def needs_approval(policy: SecurityPolicy, tool: str) -> bool:
    """``supervised`` only: ``always_ask`` names the tool, or ``auto_approve`` does not."""
    if policy.autonomy != "supervised":
        return False
    return matches_any(tool, policy.always_ask) or not matches_any(tool, policy.auto_approve)
