"""The per-session security policy of SPEC §12 as data: the contract both sides share.

The session service *decides* a policy (``services.session.decisions.policy.policy_for``),
the edge carries it to the built-in agent as ``_meta.acpgate.policy``, and the
agent *enforces* it (``services.agent.enforce``). This module holds only what
all three agree on: the frozen dataclass, its JSON wire form (camelCase keys)
and its reading from the ``GetPolicy`` response, plus the order of the autonomy
levels (``readonly`` < ``supervised`` < ``full``) that capping a policy follows.
No decisions live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from services.common.config import AUTONOMY_LEVELS

if TYPE_CHECKING:
    # Only for the annotation: reading the message needs no protobuf import, so the
    # agent (which never speaks gRPC) does not load the generated code.
    from acpgate_contracts.session.v1 import session_pb2

__all__ = ["SecurityPolicy", "autonomy_above", "cap_policy", "lower_autonomy"]


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

    @classmethod
    def from_proto(cls, p: session_pb2.SecurityPolicy) -> SecurityPolicy:
        """The policy a ``GetPolicy`` call returned (the session service already decided it)."""
        return cls(
            workspace_dir=p.workspace_dir,
            allowed_roots=tuple(p.allowed_roots),
            forbidden_paths=tuple(p.forbidden_paths),
            autonomy=p.autonomy,
            auto_approve=tuple(p.auto_approve),
            always_ask=tuple(p.always_ask),
            workspace_only=p.workspace_only,
        )


def _str_tuple(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = d.get(key, [])
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"policy.{key} must be an array of strings")
    return tuple(value)


def _rank(level: str) -> int:
    """The place of ``level`` in ``AUTONOMY_LEVELS``; an unknown level counts as readonly."""
    return AUTONOMY_LEVELS.index(level) if level in AUTONOMY_LEVELS else 0


def lower_autonomy(a: str, b: str) -> str:
    """The lower of two autonomy levels; an unknown level counts as ``readonly``."""
    return AUTONOMY_LEVELS[min(_rank(a), _rank(b))]


def autonomy_above(a: str, b: str) -> bool:
    """True when level ``a`` allows more than level ``b``."""
    return _rank(a) > _rank(b)


def cap_policy(policy: SecurityPolicy, level: str) -> SecurityPolicy:
    """``policy`` with its autonomy lowered to at most ``level`` (workspace_only follows:
    only ``full`` may reach outside the roots)."""
    autonomy = lower_autonomy(policy.autonomy, level)
    if autonomy == policy.autonomy:
        return policy
    return replace(policy, autonomy=autonomy, workspace_only=autonomy != "full")
