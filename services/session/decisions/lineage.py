"""What the session service decides for a spawned (child) session (SPEC §12–§14).

A session may spawn child sessions of any configured agent. Three decisions
are made here, from the config and the stored rows alone:

- **Ownership** (SPEC §13): the child's ``spawnedBy`` and ``parentSessionKey``
  are the spawning session's key, its ``ownerSessionKey`` the spawning
  session's owner — so a gateway client that owns a session owns the whole
  tree under it, and sees it under ``tree`` and ``all``.
- **Autonomy**: a child never has more autonomy than its parent's session.
  A session's effective level is the lowest of its own agent's configured
  level and that of every ancestor (``readonly`` < ``supervised`` < ``full``),
  walked through the stored ``parentSessionKey`` links — the same answer for
  the spawn and for every later restore of the child. An ancestor running the
  built-in agent counts at its stored mode when that is lower (its modes are
  the autonomy levels: a client that made a session more careful made its
  children so too, so a ``session/set_mode`` never opens a way around it).
- **Workspace**: the child works inside the parent's workspace (its cwd is
  resolved against it and must not leave it), so spawning never widens the
  directory boundary either.
"""

from __future__ import annotations

import asyncio
import os

from services.common.config import AUTONOMY_LEVELS, Config
from services.common.policy import lower_autonomy
from services.common.protocol import AGENT_KIND_BUILTIN, MSG_SPAWN_CWD_OUTSIDE
from services.session.decisions.confinement import workspace_refusal
from services.session.decisions.workspace import WorkspaceError, resolve_workspace
from services.session.store import SessionRecord, SessionStore

__all__ = [
    "MAX_ANCESTRY",
    "acting_autonomy",
    "child_workspace",
    "current_autonomy",
    "effective_autonomy",
]

#: How many ancestors are walked at most (a cycle in stored rows must not hang a call).
MAX_ANCESTRY = 64


def current_autonomy(cfg: Config, rec: SessionRecord) -> str:
    """The level ``rec`` runs at now: its agent's configured level, lowered by its stored
    mode when it runs the built-in agent (whose mode ids are the autonomy levels)."""
    level = cfg.agent_autonomy(rec.agent_alias)
    agent = cfg.agents.get(rec.agent_alias)
    if agent is not None and agent.kind == AGENT_KIND_BUILTIN and rec.mode_id in AUTONOMY_LEVELS:
        level = lower_autonomy(level, rec.mode_id)
    return level


async def effective_autonomy(cfg: Config, store: SessionStore, rec: SessionRecord,
                             alias: str | None = None) -> str:
    """``rec``'s autonomy ceiling: its agent's level (``alias`` when it is about to run as
    another), lowered by every stored ancestor's :func:`current_autonomy`."""
    level = cfg.agent_autonomy(alias or rec.agent_alias)
    seen = {rec.ownership.session_key}
    key = rec.ownership.parent_session_key
    while key and key not in seen and len(seen) <= MAX_ANCESTRY:
        seen.add(key)
        parent = await store.find_by_session_key(key)
        if parent is None:  # an ancestor removed since: what is left still caps
            break
        level = lower_autonomy(level, current_autonomy(cfg, parent))
        key = parent.ownership.parent_session_key
    return level


async def acting_autonomy(cfg: Config, store: SessionStore, rec: SessionRecord,
                          turn_cap: str = "") -> str:
    """The level ``rec`` acts at when it spawns or sends: its chain's ceiling
    (:func:`effective_autonomy`), lowered by the mode it runs in now and by ``turn_cap``,
    the cap of the turn it runs (one another session started: "" = none) — so a capped
    turn cannot launder its cap through a third session."""
    level = lower_autonomy(current_autonomy(cfg, rec), await effective_autonomy(cfg, store, rec))
    return lower_autonomy(level, turn_cap) if turn_cap else level


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


async def child_workspace(cfg: Config, alias: str, parent_workspace: str, cwd: str, *,
                          local_user: bool = False) -> str:
    """The child's workspace: the parent's, or ``cwd`` resolved against it and inside it.

    WorkspaceError (the message for the caller) when ``cwd`` is no usable
    directory, lies outside the parent's workspace, or is refused as a workspace
    (``local_user``: the spawning session serves the local user of ``acpgate acp``).
    """
    if not cwd.strip():
        real = parent_workspace
    else:
        real = (await resolve_workspace(cfg, alias, cwd, parent_workspace,
                                        local_user=local_user)).workspace_dir
        if not _inside(real, parent_workspace):
            raise WorkspaceError(MSG_SPAWN_CWD_OUTSIDE.format(cwd=cwd))
    refusal = await asyncio.to_thread(workspace_refusal, cfg, real, local_user=local_user)
    if refusal is not None:
        raise WorkspaceError(refusal.message())
    return real
