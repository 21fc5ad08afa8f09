"""The session workspace of SPEC §3: real path, install-root placeholder, agent workspace.

- An explicit cwd becomes its real path (symlinks and ``..`` resolved; relative
  paths against the caller's ``base_dir``). It must be an existing directory,
  else ``"cwd is not a usable directory (<cwd>): <reason>"``.
- A real path equal to the install root (the config dir — what a client
  sending the placeholder ``.`` hits) means the agent workspace.
- A real path that is, lies inside or contains acpgate's own state or a
  credential store is refused (``services.session.confinement``), unless
  ``[autonomy] allow_cwd`` lists it.
- Otherwise the exact real path is the session boundary, never widened.
- An omitted cwd means the agent workspace — never the daemon's start dir.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass

from services.common.config import Config
from services.common.protocol import MSG_BAD_CWD
from services.session.aliases import ensure_agent_workspace
from services.session.confinement import workspace_refusal

__all__ = ["ResolvedWorkspaceInfo", "WorkspaceError", "resolve_workspace"]


class WorkspaceError(Exception):
    """The cwd is not usable; ``str(exc)`` is the exact SPEC message."""


@dataclass(frozen=True)
class ResolvedWorkspaceInfo:
    """The session boundary and whether it is the agent workspace."""

    workspace_dir: str
    is_agent_workspace: bool


def _real_dir(cwd: str, base_dir: str) -> str:
    """Real path of an existing directory, or WorkspaceError (blocking; run off-loop)."""
    if "\x00" in cwd:
        raise WorkspaceError(MSG_BAD_CWD.format(cwd=cwd, reason="path contains a NUL byte"))
    # No `~` expansion: a cwd is a path, relative to the caller's working
    # directory (SPEC §3); a client meaning its home sends it absolute.
    path = cwd
    if not os.path.isabs(path):
        # Relative to the caller's working directory; without one, to this process's.
        path = os.path.join(base_dir or os.getcwd(), path)
    try:
        real = os.path.realpath(path, strict=True)
        st = os.stat(real)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise WorkspaceError(MSG_BAD_CWD.format(cwd=cwd, reason=reason)) from None

    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(MSG_BAD_CWD.format(cwd=cwd, reason="Not a directory"))
    if not os.access(real, os.R_OK | os.X_OK):
        raise WorkspaceError(MSG_BAD_CWD.format(cwd=cwd, reason="Permission denied"))
    return real


async def resolve_workspace(
    cfg: Config, alias: str, cwd: str = "", base_dir: str = ""
) -> ResolvedWorkspaceInfo:
    """Apply the SPEC §3 cwd rules for a session of ``alias``."""
    if cwd:
        real = await asyncio.to_thread(_real_dir, cwd, base_dir)
        install_root = await asyncio.to_thread(os.path.realpath, cfg.config_dir)
        if real != install_root:
            refusal = await asyncio.to_thread(workspace_refusal, cfg, real)
            if refusal is not None:
                raise WorkspaceError(refusal.message())
            return ResolvedWorkspaceInfo(real, False)
    workspace = await ensure_agent_workspace(cfg, alias)
    return ResolvedWorkspaceInfo(str(workspace), True)
