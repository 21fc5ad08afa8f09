"""The session workspace of SPEC §3: real path, install-root placeholder, agent workspace.

- An explicit cwd becomes its real path (symlinks and ``..`` resolved; relative
  paths against the caller's ``base_dir``). It must be an existing directory,
  else ``"cwd is not a usable directory (<cwd>): <reason>"``.
- A real path equal to the install root (the config dir — what a client
  sending the placeholder ``.`` hits) means the agent workspace.
- A real path that is, lies inside or contains acpgate's own state or a
  credential store is refused (``services.session.decisions.confinement``), unless
  ``[autonomy] allow_cwd`` lists it; for the local user of ``acpgate acp``
  (``local_user``) only one that is or lies inside one.
- Otherwise the exact real path is the session boundary, never widened.
- An omitted cwd means the agent workspace — never the daemon's start dir.

ACP ``additionalDirectories`` (extra roots of a session) follow the same rules:
real paths of existing directories, refused when one is, lies inside or contains
acpgate's own state or a credential store (a root beats the forbidden paths it
lies inside, so an extra root in ``/etc/ssh`` would open what the operator
closed), unless ``[autonomy] allow_cwd`` lists it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from services.common.config import Config
from services.common.protocol import MSG_BAD_ADDITIONAL_DIR, MSG_BAD_CWD, MSG_FORK_CWD
from services.session.decisions.aliases import ensure_agent_workspace, make_agent_workspace
from services.session.decisions.confinement import workspace_refusal

__all__ = [
    "ResolvedWorkspaceInfo",
    "WorkspaceError",
    "check_fork_cwd",
    "extra_root_refusal",
    "new_session_places",
    "resolve_additional_directories",
    "resolve_workspace",
]


class WorkspaceError(Exception):
    """The cwd is not usable; ``str(exc)`` is the exact SPEC message."""


@dataclass(frozen=True)
class ResolvedWorkspaceInfo:
    """The session boundary and whether it is the agent workspace."""

    workspace_dir: str
    is_agent_workspace: bool


def _refusal(cwd: str, reason: str, template: str) -> WorkspaceError:
    return WorkspaceError(template.format(cwd=cwd, path=cwd, reason=reason))


def _real_dir(cwd: str, base_dir: str, template: str = MSG_BAD_CWD) -> str:
    """Real path of an existing directory, or WorkspaceError (blocking; run off-loop)."""
    if "\x00" in cwd:
        raise _refusal(cwd, "path contains a NUL byte", template)
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
        raise _refusal(cwd, exc.strerror or str(exc), template) from None

    if not stat.S_ISDIR(st.st_mode):
        raise _refusal(cwd, "Not a directory", template)
    if not os.access(real, os.R_OK | os.X_OK):
        raise _refusal(cwd, "Permission denied", template)
    return real


def extra_root_refusal(cfg: Config, path: str, real: str, *,
                       local_user: bool = False) -> WorkspaceError | None:
    """Why the additional directory ``path`` (real path ``real``) may not be a root of a
    session, or ``None``: the cwd's confinement (``services.session.decisions.confinement``)
    applies to every root alike (blocking; run off-loop)."""
    refusal = workspace_refusal(cfg, real, local_user=local_user)
    if refusal is None:
        return None
    return _refusal(path, refusal.detail(), MSG_BAD_ADDITIONAL_DIR)


def _extra_roots(cfg: Config, paths: Sequence[str], base_dir: str,
                 workspace_dir: str, local_user: bool) -> list[str]:
    """Real paths of ``paths``, refused like a cwd would be (blocking)."""
    out: list[str] = []
    for path in paths:
        real = _real_dir(path, base_dir, MSG_BAD_ADDITIONAL_DIR)
        refused = extra_root_refusal(cfg, path, real, local_user=local_user)
        if refused is not None:
            raise refused
        if real != workspace_dir and real not in out:
            out.append(real)
    return out


async def resolve_additional_directories(cfg: Config, paths: Sequence[str], base_dir: str,
                                         workspace_dir: str, *,
                                         local_user: bool = False) -> list[str]:
    """ACP ``additionalDirectories`` as real paths (order kept; duplicates and the
    workspace itself dropped), or WorkspaceError naming the first unusable entry."""
    if not paths:
        return []
    return await asyncio.to_thread(_extra_roots, cfg, list(paths), base_dir, workspace_dir,
                                   local_user)


def _explicit_workspace(cfg: Config, cwd: str, base_dir: str,
                        local_user: bool = False) -> str | None:
    """The real path of an explicit ``cwd``, confined (WorkspaceError when refused); None
    when the agent workspace is meant: no cwd, or the install root (blocking)."""
    if not cwd:
        return None
    real = _real_dir(cwd, base_dir)
    if real == os.path.realpath(cfg.config_dir):
        return None
    refusal = workspace_refusal(cfg, real, local_user=local_user)
    if refusal is not None:
        raise WorkspaceError(refusal.message())
    return real


async def resolve_workspace(
    cfg: Config, alias: str, cwd: str = "", base_dir: str = "", *, local_user: bool = False
) -> ResolvedWorkspaceInfo:
    """Apply the SPEC §3 cwd rules for a session of ``alias`` (``local_user``: for the local
    user of ``acpgate acp``, ``services.session.decisions.confinement``)."""
    real = (await asyncio.to_thread(_explicit_workspace, cfg, cwd, base_dir, local_user)
            if cwd else None)
    if real is not None:
        return ResolvedWorkspaceInfo(real, False)
    workspace = await ensure_agent_workspace(cfg, alias)
    return ResolvedWorkspaceInfo(str(workspace), True)


def check_fork_cwd(cwd: str, base_dir: str, workspace_dir: str) -> None:
    """ACP ``session/fork``'s ``cwd`` ("" = omitted) must be the forked session's workspace,
    which the fork keeps: WorkspaceError (its message for the client) when its real path is
    another, or it is no usable directory (blocking; run off-loop). The workspace itself is
    confined where the fork's policy is decided, as for any restore."""
    if cwd and _real_dir(cwd, base_dir) != workspace_dir:
        raise WorkspaceError(MSG_FORK_CWD.format(workspace=workspace_dir, cwd=cwd))


def new_session_places(cfg: Config, alias: str, cwd: str, base_dir: str,
                       paths: Sequence[str], local_user: bool = False,
                       ) -> tuple[Path, ResolvedWorkspaceInfo, list[str]]:
    """What ``session/new`` resolves on the file system, all at once (blocking; run
    off-loop): the agent workspace (created), the session workspace (SPEC §3 cwd rules)
    and the additional directories as real paths. Each root is confined once, and the
    first refusal is the one the steps taken one by one (agent, workspace, extra roots,
    then the policy's check of the agent workspace) would give: WorkspaceError, or
    OSError when the agent workspace cannot be created."""
    agent_workspace = make_agent_workspace(cfg, alias)
    real = _explicit_workspace(cfg, cwd, base_dir, local_user)
    info = (ResolvedWorkspaceInfo(real, False) if real is not None
            else ResolvedWorkspaceInfo(str(agent_workspace), True))
    roots = _extra_roots(cfg, paths, base_dir, info.workspace_dir, local_user)
    if real is None:  # the agent workspace was not confined on the way in
        refusal = workspace_refusal(cfg, info.workspace_dir, local_user=local_user)
        if refusal is not None:
            raise WorkspaceError(refusal.message())
    return agent_workspace, info, roots
