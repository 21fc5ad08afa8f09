"""What a v2 agent runs beside a session's foreground turn: child sessions and background work.

:class:`SessionWork` watches the updates relayed for one edge session (the translation
already carried a child's traffic on its parent's stream under acpgate's ids:
:mod:`services.common.acp.v2.subagents`) and keeps:

- the **child sessions** announced (``subagent_update`` s acpgate marked: an agent's own
  ``subagent_update`` through a v1 relay is no child of acpgate's), each stored as a session row of
  its own, linked to its parent (``parentSessionKey``, ``spawnedBy``) and owned by the
  parent's owner — so ``session/list`` shows it under its parent to exactly those who see
  the parent — with the child's title when it has one (:func:`store_child`);
- whether **background work** runs: a non-empty ``background`` list on the agent's last
  ``state_update``, or a child whose last reported state is not ``idle``.

A session's children are bounded (``[acp] max_subagents_per_session``, set on its adapter's
translation by :func:`bound_children`): one announced past the bound is neither stored nor
relayed, and a warning is logged once. The translation's other bounds (the agent's tool
calls, their content, its sessions) are counted per session as ``agent_state_dropped``.

A session with background work counts as alive: the idle reaper passes it by and a
detached session's grace waits for the work to end (:meth:`SessionWork.quiet`). The
caller must feed every relayed update object to :meth:`SessionWork.observe`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from services.common.acp.v2.names import (
    OWN_CHILD_UPDATE,
    STATE_IDLE,
    U2_STATE,
    U2_SUBAGENT_UPDATE,
)
from services.common.acp.v2.subagents import marker
from services.common.logs import CountedWarning, get_logger
from services.common.protocol import META_PARENT_SESSION_ID, session_key_for
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import RowUpdate

if TYPE_CHECKING:
    from services.edge.adapter.client import AdapterClient
    from services.edge.backends.session import SessionBackend

__all__ = ["Parent", "SessionWork", "bound_children", "store_child"]

log = get_logger("edge.subagents")
#: What the translation dropped or forgot past one of its bounds (counted per session).
AGENT_STATE_DROPPED = "agent_state_dropped"

_WATCHED = frozenset({U2_STATE, U2_SUBAGENT_UPDATE, OWN_CHILD_UPDATE})


def _state_of(value: Any) -> str | None:
    """The ``state`` of a ``StateUpdate``-shaped object, if it names one."""
    state = value.get("state") if isinstance(value, dict) else None
    return state if isinstance(state, str) else None


class SessionWork:
    """Child sessions and background work of one edge session (module doc)."""

    def __init__(self) -> None:
        #: acpgate's id of each child announced → its parent's ("" = this session).
        self.children: dict[str, str] = {}
        #: Each child's last reported state (absent: none reported).
        self._child_states: dict[str, str] = {}
        #: The agent's last ``background`` list (None: it reported none).
        self.background: list[Any] | None = None
        #: Set while no background work runs.
        self._quiet = asyncio.Event()
        self._quiet.set()

    @property
    def alive(self) -> bool:
        """Whether background work runs (module doc)."""
        return bool(self.background) or any(s != STATE_IDLE for s in self._child_states.values())

    async def quiet(self) -> None:
        """Return once no background work runs."""
        while self.alive:
            self._quiet.clear()
            await self._quiet.wait()

    def observe(self, updates: Iterable[Any]) -> list[dict[str, Any]]:
        """Take note of relayed update objects; the ``subagent_update`` s that announced a
        child (the caller stores it: :func:`store_child`)."""
        announced: list[dict[str, Any]] = []
        for update in updates:
            if type(update) is not dict or update.get("sessionUpdate") not in _WATCHED:
                continue
            kind = update["sessionUpdate"]
            if kind == U2_STATE:
                if isinstance(update.get("background"), list):
                    self.background = update["background"]
                continue
            # A child's only with acpgate's mark (an agent cannot write it): the id is ours.
            mark = marker(update)
            child = update.get("sessionId")
            if mark is None or not isinstance(child, str) or mark.get("sessionId") != child:
                continue
            if kind == U2_SUBAGENT_UPDATE:
                if child not in self.children:
                    parent = mark.get(META_PARENT_SESSION_ID)
                    self.children[child] = parent if isinstance(parent, str) else ""
                    announced.append(update)
                if "state" in update:
                    self._child_state(child, _state_of(update["state"]))
            elif isinstance(inner := update.get("update"), dict) \
                    and inner.get("sessionUpdate") == U2_STATE:
                self._child_state(child, _state_of(inner))
        if not self.alive:
            self._quiet.set()
        return announced

    def _child_state(self, child: str, state: str | None) -> None:
        if state is None:
            self._child_states.pop(child, None)
        else:
            self._child_states[child] = state


def bound_children(session_id: str, adapter: AdapterClient, limit: int) -> None:
    """Bound the children a v2 agent may announce under session ``session_id`` served by
    ``adapter`` to ``limit`` (module doc); nothing for an agent that cannot speak v2."""
    v2 = adapter.link.v2
    if v2 is None:
        return
    children = v2.wire.children
    children.limit = limit

    def refused(root: str) -> None:
        log.warning("subagents_over_limit", session_id=session_id, limit=limit)

    children.on_limit = refused
    # The translation's other bounds (its tool calls, their content): counted per session.
    v2.wire.on_drop = CountedWarning(log, AGENT_STATE_DROPPED, session_id=session_id)


class Parent(Protocol):
    """What storing a child reads of the live session it was announced on (an
    ``EdgeSession``): its ids, agent, workspace, owner and work."""

    @property
    def session_id(self) -> str:
        """The session's id."""

    @property
    def session_key(self) -> str:
        """Its row's key."""

    @property
    def alias(self) -> str:
        """Its agent's alias."""

    @property
    def workspace_dir(self) -> str:
        """Its workspace."""

    @property
    def additional_directories(self) -> Sequence[str]:
        """Its further directories."""

    @property
    def owner_key(self) -> str:
        """Its row owner's key."""

    @property
    def work(self) -> SessionWork:
        """Its children and background work."""


async def store_child(service: SessionBackend, session: Parent, update: dict[str, Any]) -> None:
    """Store the child a ``subagent_update`` announced on ``session`` as a session row of its
    own (module doc); a failure is logged (the child's updates still reach the parent's
    clients). A child stored already (its id is derived from its parent's and the agent's:
    announced again after the parent was restored) keeps its row."""
    child = str(update.get("sessionId"))
    parent = session.work.children.get(child, "")
    parent_key = session_key_for(session.alias, parent) if parent else session.session_key
    try:
        await service.create_child_session(
            child, agent_alias=session.alias, workspace_dir=session.workspace_dir,
            parent_session_key=parent_key, owner_session_key=session.owner_key,
            additional_directories=session.additional_directories)
        title = update.get("title")
        if isinstance(title, str) and title:
            await service.update_session(RowUpdate(session_id=child, title=title))
    except ServiceError as exc:
        if exc.kind is Failure.CONFLICT:  # announced again after a restore
            log.info("subagent_known", session_id=session.session_id, child=child)
            return
        log.warning("subagent_store_failed", session_id=session.session_id, child=child,
                    code=exc.code)
        return
    log.info("subagent_stored", session_id=session.session_id, child=child)
