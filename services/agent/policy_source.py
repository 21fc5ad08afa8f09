"""Where a session's policy comes from: the edge, or — standalone only — local config.

Behind the edge (``python -m services.agent``, the command the session service
launches) every ``session/new`` and every restoring ``session/resume`` carries
``_meta.acpgate.policy``, decided by the session service. A request without it
is refused with -32602 :data:`MSG_MISSING_POLICY`: the agent never guesses, and
a guessed policy could be looser than the one the operator configured.

Standalone (``acpgate agent``, launched directly by an editor such as Zed) no
edge sends a policy, so the entry point passes in a :data:`LocalPolicy` built by
the composition root (``acpgate/cli.py`` hands in the session service's
``policy_for``). It is applied to the request's ``cwd``, or to the agent
workspace when there is none. A policy in ``_meta`` still wins in that mode.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.common.config import Config
from services.common.jsonrpc import JsonRpcError
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    INVALID_PARAMS,
    MSG_BAD_CWD,
    MSG_BAD_POLICY,
    MSG_MISSING_POLICY,
)

__all__ = ["LocalPolicy", "PolicySource"]

#: Decides a policy from config: ``(cfg, alias, workspace_dir) -> SecurityPolicy``.
LocalPolicy = Callable[[Config, str, str], SecurityPolicy]


class PolicySource:
    """Turns a request's ``_meta.acpgate.policy`` (and ``cwd``) into the session's policy.

    ``local`` is ``None`` behind the edge (a missing policy is an error) and the
    standalone decision function otherwise.
    """

    def __init__(self, cfg: Config, alias: str, local: LocalPolicy | None = None) -> None:
        self._cfg = cfg
        self._alias = alias
        self._local = local

    async def resolve(self, raw: Any, cwd: Any) -> SecurityPolicy:
        """The policy of a new or restored session; -32602 JsonRpcError when there is none.

        ``raw`` is the ``_meta.acpgate.policy`` value (``None`` when absent);
        ``cwd`` the request's working directory, used only in standalone mode.
        """
        if raw is not None:
            return await self._from_meta(raw)
        if self._local is None:
            raise JsonRpcError(INVALID_PARAMS, MSG_MISSING_POLICY)
        workspace = await asyncio.to_thread(self._workspace, cwd)
        return self._local(self._cfg, self._alias, workspace)

    @staticmethod
    async def _from_meta(raw: Any) -> SecurityPolicy:
        try:
            policy = SecurityPolicy.from_json(raw)
        except ValueError as exc:
            raise JsonRpcError(INVALID_PARAMS, MSG_BAD_POLICY.format(reason=exc)) from None
        if not await asyncio.to_thread(os.path.isdir, policy.workspace_dir):
            raise JsonRpcError(INVALID_PARAMS, MSG_BAD_CWD.format(
                cwd=policy.workspace_dir, reason="not an existing directory"))
        return policy

    def _workspace(self, cwd: Any) -> str:
        """The real path of ``cwd`` (must be a directory), else the agent workspace."""
        if isinstance(cwd, str) and cwd.strip():
            real = os.path.realpath(os.path.expanduser(cwd.strip()))
            if not os.path.isdir(real):
                raise JsonRpcError(INVALID_PARAMS, MSG_BAD_CWD.format(
                    cwd=cwd, reason="not an existing directory"))
            return real
        home = self._cfg.agent_workspace(self._alias)
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JsonRpcError(INVALID_PARAMS, MSG_BAD_CWD.format(cwd=str(home), reason=exc)) from None
        return str(Path(os.path.realpath(home)))
