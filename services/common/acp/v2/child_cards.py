"""A v2 agent's child sessions as v1 clients can show them: one tool-call card each (pure).

A v1 client knows no session but its own, so each child the agent announced (carried on
its parent's stream: :mod:`.subagents`) also gets a ``tool_call`` card on the parent:
id :data:`~.names.CHILD_CARD_ID_PREFIX` + acpgate's child id, kind ``think``, the child's
title (else "Subagent"), status ``in_progress`` while the child runs and ``completed``
(``failed`` when it stopped with an error) once it goes idle, when the card's content
becomes the child's answer of that run (its message text, the last
:data:`~.names.CHILD_CARD_TEXT_CHARS` characters). A new title, or the child running
again, is a ``tool_call_update`` of the same card. The child's text still streams as the
parent's marked thoughts; the card adds where it belongs and how it ended.

Cards are marked ``_meta.acpgate.subagent`` (``sessionId``, ``card: true``), so a v2
client — which gets the child's own session instead — leaves them out
(:func:`is_card`). The caller feeds :meth:`ChildCards.of` every update it carries for a
child (acpgate's form) and sends what it returns after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.common.acp.names import U_TOOL_CALL, U_TOOL_CALL_UPDATE
from services.common.acp.v2.names import (
    CHILD_CARD_ID_PREFIX,
    CHILD_CARD_KIND,
    CHILD_CARD_TEXT_CHARS,
    CHILD_CARD_TITLE,
    STATE_IDLE,
    STOP_ERROR,
    TOOL_COMPLETED,
    TOOL_FAILED,
    TOOL_IN_PROGRESS,
    U2_AGENT_MESSAGE_CHUNK,
    U2_AGENT_THOUGHT_CHUNK,
    U2_SUBAGENT_UPDATE,
)
from services.common.acp.v2.subagents import marker
from services.common.protocol import META_ACPGATE, META_CHILD_CARD, META_SUBAGENT

__all__ = ["ChildCards", "is_card"]


@dataclass
class _Card:
    title: str
    status: str
    #: The child's message text of its current run (the last characters only).
    text: str = ""


def _status(state: Any) -> str | None:
    """A child's ``state`` (a ``StateUpdate`` object) as a card status; None: none named."""
    name = state.get("state") if isinstance(state, dict) else None
    if not isinstance(name, str):
        return None
    if name != STATE_IDLE:
        return TOOL_IN_PROGRESS
    return TOOL_FAILED if state.get("stopReason") == STOP_ERROR else TOOL_COMPLETED


def is_card(update: dict[str, Any]) -> bool:
    """Whether ``update`` is a child's card (module doc): a v2 client does not get it."""
    mark = marker(update)
    return mark is not None and mark.get(META_CHILD_CARD) is True


class ChildCards:
    """The cards of one agent's children (module doc)."""

    def __init__(self, text_chars: int = CHILD_CARD_TEXT_CHARS) -> None:
        self._text_chars = text_chars
        #: acpgate's child id → its card.
        self._cards: dict[str, _Card] = {}

    def of(self, carried: dict[str, Any]) -> list[dict[str, Any]]:
        """The card updates ``carried`` (a child's update as its parent carries it) calls
        for: none, a new card, or a change of one."""
        mark = marker(carried)
        child = mark.get("sessionId") if mark is not None else None
        if mark is None or not isinstance(child, str):
            return []
        kind = carried.get("sessionUpdate")
        if kind == U2_AGENT_THOUGHT_CHUNK:
            card = self._cards.get(child)
            content = carried.get("content")
            text = content.get("text") if isinstance(content, dict) else None
            if card is not None and mark.get("sessionUpdate") == U2_AGENT_MESSAGE_CHUNK \
                    and isinstance(text, str):
                card.text = (card.text + text)[-self._text_chars:]
            return []
        if kind != U2_SUBAGENT_UPDATE or carried.get("sessionId") != child:
            return []
        title = carried.get("title")
        title = title if isinstance(title, str) and title else None
        status = _status(carried.get("state"))
        card = self._cards.get(child)
        if card is None:
            card = self._cards[child] = _Card(title or CHILD_CARD_TITLE,
                                              status or TOOL_IN_PROGRESS)
            return [self._form(child, U_TOOL_CALL, {"title": card.title,
                                                    "kind": CHILD_CARD_KIND,
                                                    "status": card.status})]
        fields: dict[str, Any] = {}
        if title is not None and title != card.title:
            card.title = fields["title"] = title
        if status is not None and status != card.status:
            card.status = fields["status"] = status
            if status != TOOL_IN_PROGRESS:
                fields["content"] = [{"type": "content",
                                      "content": {"type": "text", "text": card.text}}]
                card.text = ""
        return [self._form(child, U_TOOL_CALL_UPDATE, fields)] if fields else []

    @staticmethod
    def _form(child: str, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        mark = {"sessionId": child, META_CHILD_CARD: True}
        return {"sessionUpdate": kind, "toolCallId": CHILD_CARD_ID_PREFIX + child, **fields,
                "_meta": {META_ACPGATE: {META_SUBAGENT: mark}}}
