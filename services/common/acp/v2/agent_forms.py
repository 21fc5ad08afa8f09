"""A v2 agent's own update forms, kept through acpgate's v1 inside and given back to v2
clients (pure).

acpgate runs on v1 inside, so a v2 agent's updates are translated to v1
(:mod:`.agent_wire`) and, for a v2 client, back to v2 (:mod:`.updates`). Where v1 has no
form of its own, the translation toward v1 keeps the agent's under ``_meta.acpgate``
(acpgate's namespace: no agent can write it), and :func:`agent_form` gives a v2 client
the agent's update as it came instead of a second translation:

- a ``notice`` (v1: an ``agent_thought_chunk``; ``_meta.acpgate.notice``);
- a plan with its ``planId`` (v1: ``plan``; ``_meta.acpgate.plan``);
- a ``tool_call_content_chunk`` (v1: a ``tool_call_update`` with the whole content;
  ``_meta.acpgate.contentChunk``);
- a v2 diff in tool call content (v1: text content with the patch;
  ``_meta.acpgate.diff``: :func:`content_item`);
- a permission request's ``title`` and ``description`` (v1: the tool call's title alone;
  ``_meta.acpgate.permission``: :func:`permission_words`).

acpgate's other ``_meta`` (the event id) stays on what is given back. The caller passes
every v1 update meant for a v2 client through :func:`agent_form` first.
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.names import (
    U2_NOTICE,
    U2_PLAN_UPDATE,
    U2_TOOL_CALL_CONTENT_CHUNK,
    U2_TOOL_CALL_UPDATE,
)
from services.common.protocol import (
    META_ACPGATE,
    META_CONTENT_CHUNK,
    META_DIFF,
    META_NOTICE,
    META_PERMISSION,
    META_PLAN,
)

__all__ = ["agent_form", "content_item", "permission_words"]

_KEPT = frozenset({META_NOTICE, META_PLAN, META_CONTENT_CHUNK, META_DIFF})
_V1_THOUGHT = "agent_thought_chunk"
_V1_PLAN = "plan"


def _ours(value: dict[str, Any]) -> dict[str, Any] | None:
    meta = value.get("_meta")
    ours = meta.get(META_ACPGATE) if isinstance(meta, dict) else None
    return ours if isinstance(ours, dict) else None


def _meta_left(update: dict[str, Any], theirs: Any = None) -> dict[str, Any] | None:
    """The update's ``_meta`` without what :data:`_KEPT` holds, over the agent's own
    ``theirs`` (None: nothing is left)."""
    out = dict(theirs) if isinstance(theirs, dict) else {}
    meta = update.get("_meta")
    for key, value in (meta.items() if isinstance(meta, dict) else ()):
        if key != META_ACPGATE:
            out[key] = value
            continue
        rest = {k: v for k, v in value.items() if k not in _KEPT} \
            if isinstance(value, dict) else {}
        if rest:
            out[META_ACPGATE] = rest
    return out or None


def _with_meta(update: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    if meta is not None:
        update["_meta"] = meta
    return update


def agent_form(update: dict[str, Any]) -> dict[str, Any] | None:
    """The v2 agent's own update that the v1 ``update`` stands for (module doc); None when
    ``update`` keeps none."""
    ours = _ours(update)
    if ours is None or not _KEPT & ours.keys():
        return None
    kind = update.get("sessionUpdate")
    notice = ours.get(META_NOTICE)
    if kind == _V1_THOUGHT and isinstance(notice, dict):
        body = {k: v for k, v in notice.items() if k != "_meta"}
        return _with_meta({"sessionUpdate": U2_NOTICE, **body},
                          _meta_left(update, notice.get("_meta")))
    plan = ours.get(META_PLAN)
    if kind == _V1_PLAN and isinstance(plan, dict):
        return _with_meta({"sessionUpdate": U2_PLAN_UPDATE, "plan": plan}, _meta_left(update))
    if kind == U2_TOOL_CALL_UPDATE and META_CONTENT_CHUNK in ours:
        return _with_meta({"sessionUpdate": U2_TOOL_CALL_CONTENT_CHUNK,
                           "toolCallId": update.get("toolCallId"),
                           "content": ours[META_CONTENT_CHUNK]}, _meta_left(update))
    return None


def content_item(item: dict[str, Any]) -> dict[str, Any] | None:
    """The v2 diff a v1 content item stands for, if it keeps one."""
    ours = _ours(item)
    diff = ours.get(META_DIFF) if ours is not None else None
    return diff if isinstance(diff, dict) else None


def permission_words(params: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any] | None]:
    """A v1 permission request's kept v2 ``title``/``description`` (``_meta.acpgate.permission``)
    and its ``_meta`` without them (None: nothing left)."""
    ours = _ours(params)
    kept = ours.get(META_PERMISSION) if ours is not None else None
    if not isinstance(kept, dict):
        return {}, params.get("_meta") if isinstance(params.get("_meta"), dict) else None
    words = {k: v for k, v in kept.items() if k in ("title", "description") and isinstance(v, str)}
    meta = dict(params["_meta"])
    rest = {k: v for k, v in meta[META_ACPGATE].items() if k != META_PERMISSION}
    if rest:
        meta[META_ACPGATE] = rest
    else:
        del meta[META_ACPGATE]
    return words, meta or None
