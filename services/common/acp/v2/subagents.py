"""A v2 agent's child sessions (subagents) as acpgate carries them (pure, sans-I/O).

A v2 agent announces a child with ``subagent_update`` on the parent session
(``update.sessionId`` names the child) and then sends the child's updates as
``session/update`` s under the child's id; ``session_message`` (and ``_chunk``) name
sessions as sender and recipient, and a background list may name a child.

:class:`Children` maps each child the agent announced to a session id of acpgate's own
(:func:`child_id`, derived from its parent's and the agent's; the agent's ids never
reach a client), and turns the child's traffic into
updates of the *parent* session, so the parent's relay, event log, replay and clients
carry them like any other update of the session:

- ``subagent_update``: passes on the parent under acpgate's child id (ACP's own kind, the
  same in v1's subagents draft), marked ``_meta.acpgate.subagent`` (``sessionId``, and
  ``parentSessionId`` for a child of a child);
- a child's text (its message, thought and user message chunks): an
  ``agent_thought_chunk`` of the parent marked ``_meta.acpgate.subagent`` (``sessionId``,
  the original ``sessionUpdate``) — text every v1 client shows as secondary, never part
  of the answer;
- every other update of a child: acpgate's own kind :data:`OWN_CHILD_UPDATE`
  (``sessionId``: acpgate's child id, ``update``: the child's v2 update), which v1 clients
  ignore as ACP asks;
- ids in ``session_message`` (``senderSessionId``, ``recipientSessionId``; the message
  marked ``_meta.acpgate.subagent``) and in background lists: a child's become acpgate's,
  the parent's the edge's; any other is left out.

A top session's children (its children's children included) are bounded
(:attr:`Children.limit`): a child announced past the bound is not taken — its
``subagent_update`` and every later update of it are dropped like those of a session
never announced — and :attr:`Children.on_limit` is told once per top session.

Only what carries acpgate's mark is a child's (:func:`marker`): an agent cannot write
``_meta.acpgate``, so a ``subagent_update`` or ``session_message`` a v1 agent sends (its ids
its own) is none, and a v2 client does not get it (:func:`acpgate_made`).

:func:`unwrap` is the other way, for a v2 client: the parent-session update carrying a
child's becomes the child's own ``session/update`` (session id, update), as the agent
meant it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.common.acp.v2.names import (
    OWN_CHILD_UPDATE,
    U2_AGENT_MESSAGE_CHUNK,
    U2_AGENT_THOUGHT_CHUNK,
    U2_SESSION_MESSAGE,
    U2_SESSION_MESSAGE_CHUNK,
    U2_STATE,
    U2_SUBAGENT_UPDATE,
    U2_USER_MESSAGE_CHUNK,
)
from services.common.protocol import (
    DEFAULT_MAX_SUBAGENTS,
    META_ACPGATE,
    META_PARENT_SESSION_ID,
    META_SUBAGENT,
)

__all__ = ["Child", "Children", "acpgate_made", "child_id", "marker",
           "unwrap"]

#: A child's updates shown to v1 clients as the parent's thoughts.
_TEXT_KINDS = frozenset({U2_AGENT_MESSAGE_CHUNK, U2_AGENT_THOUGHT_CHUNK, U2_USER_MESSAGE_CHUNK})
_MESSAGE_KINDS = frozenset({U2_SESSION_MESSAGE, U2_SESSION_MESSAGE_CHUNK})
_MESSAGE_IDS = ("senderSessionId", "recipientSessionId")


#: The namespace of child ids (:func:`child_id`).
_CHILD_IDS = uuid.UUID("5f0c1e9a-7b2d-4c3e-9a41-acd9a7e5b2a0")


def child_id(parent: str, raw: str) -> str:
    """acpgate's id of the child the agent calls ``raw`` under acpgate's session ``parent``:
    a name-based UUID (version 5) of the two, so the same child announced again (after the
    parent was restored on a fresh agent process) is the same session. It is never an id
    the agent chose, and never any other session's: acpgate's own session ids are random
    UUIDs (version 4). Without ``parent`` (the top session not bound yet): a random one."""
    if not parent:
        return str(uuid.uuid4())
    return str(uuid.uuid5(_CHILD_IDS, f"{parent}\n{raw}"))


@dataclass
class Child:
    """One child session: acpgate's id, the agent's, and where it hangs."""

    session_id: str
    raw: str
    #: The agent's id of the top session the child's chain starts at (the adapter's own).
    root: str
    #: acpgate's id of its parent when that is a child too ("" = the top session).
    parent: str = ""


def _meta_with(update: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    meta = update.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    acpgate = meta.get(META_ACPGATE)
    meta[META_ACPGATE] = {**(acpgate if isinstance(acpgate, dict) else {}), META_SUBAGENT: ours}
    return meta


class Children:
    """The child sessions of one agent's sessions (module doc)."""

    def __init__(self, mint: Callable[[str, str], str] = child_id,
                 limit: int = DEFAULT_MAX_SUBAGENTS) -> None:
        self._mint = mint
        self._by_raw: dict[str, Child] = {}
        self._by_id: dict[str, Child] = {}
        #: The most children one top session may have, its children's included.
        self.limit = limit
        #: Called with the agent's id of a top session the first time a child past
        #: :attr:`limit` is announced under it (the caller logs it).
        self.on_limit: Callable[[str], None] | None = None
        #: How many children each top session (the agent's id) has.
        self._counts: dict[str, int] = {}
        #: The top sessions whose bound was reached (told once).
        self._full: set[str] = set()
        #: The edge's id of the agent's top sessions (agent id → acpgate id), when known.
        self.edge_ids: dict[str, str] = {}

    def of_raw(self, raw: Any) -> Child | None:
        """The child the agent calls ``raw``, if announced."""
        return self._by_raw.get(raw) if isinstance(raw, str) else None

    def of_id(self, session_id: str) -> Child | None:
        """The child acpgate calls ``session_id``, if any."""
        return self._by_id.get(session_id)

    def all(self) -> list[Child]:
        """Every child announced so far, in order."""
        return list(self._by_id.values())

    # ------------------------------------------------------------------ ids

    def _acpgate_id(self, raw: Any, here: str) -> str | None:
        """acpgate's id for the agent's session ``raw`` seen on session ``here`` (the
        agent's top session id), or None when it names no session of this chain."""
        child = self.of_raw(raw)
        if child is not None:
            return child.session_id
        if isinstance(raw, str) and raw == here:
            return self.edge_ids.get(raw)
        return None

    def _background(self, items: Any, root: str) -> Any:
        if not isinstance(items, list):
            return items
        out = []
        for item in items:
            if isinstance(item, dict) and "sessionId" in item:
                mapped = self._acpgate_id(item["sessionId"], root)
                if mapped is None:
                    continue  # never pass an id of the agent's on
                item = {**item, "sessionId": mapped}
            out.append(item)
        return out

    def _state(self, state: Any, root: str) -> Any:
        if isinstance(state, dict) and "background" in state:
            return {**state, "background": self._background(state["background"], root)}
        return state

    def mapped(self, update: dict[str, Any], root: str) -> dict[str, Any]:
        """``update`` with the session ids it names (messages, background lists) as
        acpgate's; an id naming no session of this chain is left out."""
        kind = update.get("sessionUpdate")
        if kind in _MESSAGE_KINDS:
            out = {**update, "_meta": _meta_with(update, {"sessionIds": "acpgate"})}
            for key in _MESSAGE_IDS:
                if key in out:
                    mapped = self._acpgate_id(out[key], root)
                    if mapped is None:
                        del out[key]
                    else:
                        out[key] = mapped
            return out
        if kind == U2_STATE and "background" in update:
            return {**update, "background": self._background(update["background"], root)}
        return update

    # ------------------------------------------------------------------ updates

    def announce(self, here: str, update: dict[str, Any]) -> dict[str, Any] | None:
        """A ``subagent_update`` the agent sent on its session ``here``, as the parent's
        update acpgate carries (None: it names no child acpgate can take)."""
        raw = update.get("sessionId")
        if not isinstance(raw, str) or not raw:
            return None
        via = self.of_raw(here)
        root = via.root if via is not None else here
        child = self.of_raw(raw)
        if child is None:
            if raw == root or raw in self.edge_ids:
                return None  # a session is no child of its own
            if self._counts.get(root, 0) >= self.limit:
                self._refuse(root)
                return None
            self._counts[root] = self._counts.get(root, 0) + 1
            parent = via.session_id if via is not None else ""
            child = Child(self._mint(parent or self.edge_ids.get(root, ""), raw), raw, root,
                          parent)
            self._by_raw[raw] = child
            self._by_id[child.session_id] = child
        elif child.root != root:
            return None  # a child never moves to another session's tree
        ours: dict[str, Any] = {"sessionId": child.session_id}
        if child.parent:
            ours[META_PARENT_SESSION_ID] = child.parent
        out = {**update, "sessionId": child.session_id, "_meta": _meta_with(update, ours)}
        if "state" in out:
            out["state"] = self._state(out["state"], root)
        return out

    def _refuse(self, root: str) -> None:
        if root not in self._full:
            self._full.add(root)
            if self.on_limit is not None:
                self.on_limit(root)

    def carried(self, child: Child, update: dict[str, Any]) -> dict[str, Any]:
        """An update the agent sent on ``child``'s session, as the top session's."""
        kind = update.get("sessionUpdate")
        inner = self.mapped(update, child.root)
        if kind in _TEXT_KINDS:
            body = {k: v for k, v in inner.items() if k not in ("sessionUpdate", "_meta")}
            ours = {"sessionId": child.session_id, "sessionUpdate": kind}
            return {"sessionUpdate": U2_AGENT_THOUGHT_CHUNK,
                    "_meta": _meta_with(inner, ours), **body}
        return {"sessionUpdate": OWN_CHILD_UPDATE, "sessionId": child.session_id,
                "update": inner,
                "_meta": {META_ACPGATE: {META_SUBAGENT: {"sessionId": child.session_id}}}}


def marker(update: dict[str, Any]) -> dict[str, Any] | None:
    """``_meta.acpgate.subagent`` of ``update``: present only on what acpgate carries for a
    child (an agent's ``_meta.acpgate`` never gets this far)."""
    meta = update.get("_meta")
    ours = meta.get(META_ACPGATE) if type(meta) is dict else None
    found = ours.get(META_SUBAGENT) if type(ours) is dict else None
    return found if type(found) is dict else None


def acpgate_made(update: dict[str, Any]) -> bool:
    """False for a subagent kind (``subagent_update``, ``session_message``, ``_chunk``, the
    carried child update) without acpgate's mark: its session ids are an agent's own."""
    kind = update.get("sessionUpdate")
    if kind in _MESSAGE_KINDS or kind in (U2_SUBAGENT_UPDATE, OWN_CHILD_UPDATE):
        return marker(update) is not None
    return True


def unwrap(update: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """A parent-session update carrying a child's (module doc), as the child's own: its
    session id and update, acpgate's ``_meta`` (the event id) kept; None for any other
    update — one without acpgate's mark above all, whatever its kind. A ``subagent_update``
    of a child of a child goes on its parent's session."""
    mark = marker(update)
    if mark is None:
        return None
    kind = update.get("sessionUpdate")
    meta: dict[str, Any] = update["_meta"]
    ours: dict[str, Any] = meta[META_ACPGATE]
    rest = {k: v for k, v in ours.items() if k != META_SUBAGENT}
    if kind == OWN_CHILD_UPDATE:
        sid, inner = update.get("sessionId"), update.get("update")
        if not isinstance(sid, str) or sid != mark.get("sessionId") \
                or not isinstance(inner, dict):
            return None
        if rest:
            inner_meta = inner.get("_meta")
            inner_meta = dict(inner_meta) if isinstance(inner_meta, dict) else {}
            theirs = inner_meta.get(META_ACPGATE)
            inner_meta[META_ACPGATE] = {**(theirs if isinstance(theirs, dict) else {}), **rest}
            inner = {**inner, "_meta": inner_meta}
        return sid, inner
    if kind == U2_SUBAGENT_UPDATE:
        parent = mark.get(META_PARENT_SESSION_ID)
        return (parent, update) if isinstance(parent, str) and parent else None
    original = mark.get("sessionUpdate")
    sid = mark.get("sessionId")
    if kind != U2_AGENT_THOUGHT_CHUNK or original not in _TEXT_KINDS or not isinstance(sid, str):
        return None
    inner_meta = {k: v for k, v in meta.items() if k != META_ACPGATE}
    if rest:
        inner_meta[META_ACPGATE] = rest
    inner = {k: v for k, v in update.items() if k not in ("sessionUpdate", "_meta")}
    out = {"sessionUpdate": original, **inner}
    if inner_meta:
        out["_meta"] = inner_meta
    return sid, out
