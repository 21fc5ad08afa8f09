"""Which directories may never be a session workspace: acpgate's own state, credential stores.

Roots beat forbidden paths (SPEC §12): a session whose cwd is, or contains,
the data dir could read every other principal's conversations and the gateway
tokens with its shell. So a session workspace is refused when its real path
equals, lies inside or contains one of these *guarded* paths:

- acpgate's own state: the config dir, the data dir and the token store
  (``[gateway] token_db`` may put it elsewhere). A workspace inside an
  agent workspace is fine although that lives in the config dir by default: it
  holds the agent's own files, nothing of acpgate's.
- the credential stores: every ``[autonomy] forbidden_paths`` entry (``~/.ssh``,
  ``/etc/shadow``, cloud CLI configs, ``/proc``…), except an entry that is the
  home directory or above it (``/root`` when acpgate runs as root: a project
  inside one's own home is no credential store; the stores in it still count).

``[autonomy] allow_cwd`` opts exact directories in (real paths, ``~`` expanded).
Even then the agent's tools keep away from the guarded paths inside them
(``services.agent.enforce``, ``services.agent.sandbox``): opting a directory in
makes it a session workspace, it does not open what it contains.

The local user of ``acpgate acp`` (``local_user``) owns every file
already, and an editor opened at ``~`` must get a session: for that requester a
directory that *contains* guarded paths is a workspace like any (they stay
forbidden inside it, as for an opted-in one); one that is or lies inside a
guarded path is still refused, and the refusal names the guarded path and the
exact ``allow_cwd`` line. A remote principal (any gateway connection) gets the
rule above and never learns acpgate's paths.

Everything here touches the file system (real paths): call it off the event loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from services.common.config import CONFIG_FILE_NAME, Config
from services.common.protocol import CWD_REFUSED_PREFIX, MSG_CWD_REFUSED, MSG_CWD_REFUSED_LOCAL

__all__ = ["CREDENTIAL_STORE", "OWN_STATE", "Refusal", "own_state", "workspace_refusal"]

#: How the message names each kind of guarded path (never its location).
OWN_STATE = "acpgate's own state"
CREDENTIAL_STORE = "a credential store"


@dataclass(frozen=True)
class Refusal:
    """Why a workspace is refused: how it relates to which kind of guarded path; for the
    local user also which path, and the directory and config file the opt-in names."""

    relation: str  # "is", "lies inside" or "contains"
    what: str  # OWN_STATE or CREDENTIAL_STORE
    #: The guarded path (real), the refused directory (real), the config file.
    path: str = ""
    workspace: str = ""
    config_file: str = ""
    #: Told to the local user (paths and the exact line), else to a remote principal.
    local_user: bool = False

    def message(self) -> str:
        """The -32602 message (the same for session/new, load and resume)."""
        if self.local_user:
            return MSG_CWD_REFUSED_LOCAL.format(
                relation=self.relation, what=self.what, path=self.path,
                cwd=json.dumps(self.workspace, ensure_ascii=False), config_file=self.config_file)
        return MSG_CWD_REFUSED.format(relation=self.relation, what=self.what)

    def detail(self) -> str:
        """The message without its subject: why, and what would allow the directory (an
        additionalDirectories entry's reason)."""
        return self.message().removeprefix(CWD_REFUSED_PREFIX)


def own_state(cfg: Config) -> tuple[str, ...]:
    """What no session may reach: the config dir, the data dir and, when
    ``[gateway] token_db`` puts it elsewhere, the token store."""
    extra = (cfg.token_db_path,) if cfg.gateway.token_db else ()
    return tuple(dict.fromkeys(str(p) for p in (cfg.config_dir, cfg.data_dir, *extra)))


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _within(path: str, root: str) -> bool:
    return root == os.sep or path == root or path.startswith(root + os.sep)


def _relation(workspace: str, guarded: str) -> str | None:
    if workspace == guarded:
        return "is"
    if _within(workspace, guarded):
        return "lies inside"
    if _within(guarded, workspace):
        return "contains"
    return None


def _credential_stores(cfg: Config) -> Iterator[str]:
    """Real paths of the absolute forbidden paths, less those at or above the home dir."""
    home = _real("~")
    for entry in cfg.autonomy.forbidden_paths:
        entry = entry.strip()
        if not entry or not os.path.isabs(os.path.expanduser(entry)):
            continue  # a relative entry is relative to each workspace, not a place of its own
        real = _real(entry)
        if not _within(home, real):
            yield real


def _agent_workspaces(cfg: Config) -> list[str]:
    return [_real(str(cfg.agent_workspace(alias))) for alias in cfg.agents]


#: The most telling relation is named when a workspace relates to several guarded paths.
_RELATIONS = ("is", "lies inside", "contains")


def _refusals(workspace: str, cfg: Config, local_user: bool) -> Iterator[Refusal]:
    agent_workspaces = _agent_workspaces(cfg)
    config_file = str(cfg.config_dir / CONFIG_FILE_NAME)

    def refusal(relation: str, what: str, path: str) -> Refusal:
        return Refusal(relation, what, path, workspace, config_file, local_user)

    for path in dict.fromkeys(_real(p) for p in own_state(cfg)):
        relation = _relation(workspace, path)
        if relation == "lies inside" and any(_within(workspace, ws) for ws in agent_workspaces):
            continue
        if relation is not None:
            yield refusal(relation, OWN_STATE, path)
    for path in _credential_stores(cfg):
        relation = _relation(workspace, path)
        if relation is not None:
            yield refusal(relation, CREDENTIAL_STORE, path)


def workspace_refusal(cfg: Config, workspace_dir: str, *,
                      local_user: bool = False) -> Refusal | None:
    """Why ``workspace_dir`` may not be a session workspace, or ``None`` when it may;
    ``local_user``: the requester is the local user of ``acpgate acp`` (module docstring).

    Blocking (real paths): run it through ``asyncio.to_thread``.
    """
    workspace = _real(workspace_dir)
    if workspace in {_real(p) for p in cfg.autonomy.allow_cwd if p.strip()}:
        return None
    found = [r for r in _refusals(workspace, cfg, local_user)
             if not (local_user and r.relation == "contains")]
    # Stable sort: own state before credential stores within the same relation, and of
    # those the innermost path (the data dir, not the config dir holding it).
    found.sort(key=lambda r: (_RELATIONS.index(r.relation), r.what != OWN_STATE, -len(r.path)))
    return found[0] if found else None
