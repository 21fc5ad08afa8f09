"""The session service's decision of a session's security policy (SPEC §12).

:func:`policy_for` turns the config (the agent workspace, ``[autonomy]`` lists
and level, acpgate's own state) into the :class:`SecurityPolicy` data that
``GetPolicy`` returns and the edge hands to the agent. The data type is the
shared contract in :mod:`services.common.policy`; the checks that apply it are
the pure path rules of :mod:`services.common.path_policy`, run by the built-in
agent (:mod:`services.agent.enforce`) and, for an external adapter's file and
terminal requests, by this service (``CheckOperation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from services.common.policy import SecurityPolicy
from services.session.decisions.confinement import own_state

if TYPE_CHECKING:
    from services.common.config import Config

__all__ = ["SecurityPolicy", "policy_for"]


def policy_for(cfg: Config, alias: str, workspace_dir: str,
               additional_directories: Sequence[str] = ()) -> SecurityPolicy:
    """The policy the session service decides for ``alias`` in ``workspace_dir`` (SPEC §12).

    ``allowed_roots`` holds the agent workspace, so the agent's own files stay
    reachable, then the session's additional directories (ACP
    ``additionalDirectories``, already resolved and confined like the workspace by
    :func:`services.session.decisions.workspace.resolve_additional_directories`);
    the lists come from ``[autonomy]``; the level is the per-agent override or
    ``[autonomy] level``; ``workspace_only`` is off only in ``full``.
    """
    autonomy = cfg.agent_autonomy(alias)
    # acpgate's own state is never the agent's business: the session store holds
    # every other conversation, the data dir tokens and leases, the config dir the
    # config and the bridge's token. (The agent workspace, usually under the config
    # dir, is an allowed root inside it, and a root beats what it lies inside.)
    forbidden = tuple(dict.fromkeys((*cfg.autonomy.forbidden_paths, *own_state(cfg))))
    roots = (str(cfg.agent_workspace(alias)), *additional_directories)
    return SecurityPolicy(
        workspace_dir=workspace_dir,
        allowed_roots=tuple(dict.fromkeys(roots)),
        forbidden_paths=forbidden,
        autonomy=autonomy,
        auto_approve=tuple(cfg.autonomy.auto_approve),
        always_ask=tuple(cfg.autonomy.always_ask),
        workspace_only=autonomy != "full",
    )
