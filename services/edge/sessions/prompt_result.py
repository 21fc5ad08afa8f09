"""How a turn ended, and the results a client gets for a turn and a session's setup
(SPEC §3, §4, §7, §8).

:class:`TurnOutcome` is what :meth:`services.edge.sessions.session.EdgeSession.run_turn`
returns to whoever ran the turn (a client's ``session/prompt``, the session
tools' ``sessions_send``): the stop reason, the streamed assistant text and the
adapter's result as it sent it. :func:`client_result` shapes the client's answer:

- the built-in agent keeps the seed's dialect (SPEC §4/§7): its own result
  (``stopReason``, ``usage``) plus ``sessionId`` and ``content`` — the streamed
  text, and for a cancelled turn the text and ``[turn cancelled via client]``;
- an external agent's result is passed whole, exactly as the agent sent it
  (``stopReason``, ``usage``, ``_meta`` such as gemini's ``_meta.quota`` …):
  acpgate adds nothing to it.

:func:`setup_result` shapes ``session/new``, ``load`` and ``resume`` results the
same way: the agent's result whole (``modes``, ``configOptions``, ``models``,
``_meta``, fields of later ACP versions) with the edge's session id (a restore's
only where the agent's own restore named one), the state
fields as they are after a restore set the stored values again; for
``session/new`` the built-in agent's clients get SPEC §3's ``workspaceDir``
beside it, an external agent's under ``_meta.acpgate.workspaceDir``;
:func:`fork_result` a ``session/fork``'s, ``_meta.acpgate.forkedFrom`` added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.common.protocol import (
    CANCEL_MARKER,
    META_ACPGATE,
    META_FORKED_FROM,
    META_WORKSPACE_DIR,
    STOP_CANCELLED,
)

__all__ = ["TurnOutcome", "client_result", "fork_result", "setup_result"]


@dataclass(frozen=True)
class TurnOutcome:
    """One finished turn."""

    #: The turn's stop reason (``cancelled`` for a turn the edge ended after a cancel).
    stop_reason: str
    #: The assistant text streamed in the turn.
    text: str
    #: The adapter's ``session/prompt`` result, whole (an object; one the edge made up when
    #: the adapter never answered: ``{"stopReason": "cancelled"}``).
    result: dict[str, Any]
    #: The session's agent is the built-in one (its clients get the SPEC dialect).
    builtin: bool

    @property
    def cancelled(self) -> bool:
        """True when the turn ended cancelled."""
        return self.stop_reason == STOP_CANCELLED


def client_result(session_id: str, outcome: TurnOutcome) -> dict[str, Any]:
    """The ``session/prompt`` result of ``outcome`` for the client of session ``session_id``."""
    if not outcome.builtin:
        return outcome.result
    text = outcome.text
    if outcome.cancelled:
        text = f"{text}\n\n{CANCEL_MARKER}" if text else CANCEL_MARKER
    return {**outcome.result, "sessionId": session_id, "stopReason": outcome.stop_reason,
            "content": text}


def setup_result(agent_result: Any, state_fields: dict[str, Any], *, builtin: bool,
                 session_id: str | None = None, workspace_dir: str = "",
                 restored_id: str = "") -> dict[str, Any]:
    """A ``session/new`` (``session_id`` given) or ``load``/``resume`` result (module doc):
    ``agent_result`` whole, ``state_fields`` (modes, config options, models) over it.

    ``restored_id``: for a ``load``/``resume`` the agent answered itself (its own restore,
    not a fresh session acpgate seeded), the edge's session id — put where the agent's
    result named its session (claude-agent-acp's does; codex-acp's does not), as a direct
    client would see it.
    """
    named = isinstance(agent_result, dict) and "sessionId" in agent_result
    out = {k: v for k, v in agent_result.items() if k != "sessionId"} \
        if isinstance(agent_result, dict) else {}
    out.update(state_fields)
    if session_id is None:
        return {"sessionId": restored_id, **out} if restored_id and named else out
    out = {"sessionId": session_id, **out}
    if builtin:
        out["workspaceDir"] = workspace_dir
        return out
    return _with_ours(out, {META_WORKSPACE_DIR: workspace_dir})


def fork_result(agent_result: Any, state_fields: dict[str, Any], *, builtin: bool,
                session_id: str, forked_from: str) -> dict[str, Any]:
    """A ``session/fork`` result: an external agent's own (its fork's, or the fresh
    session's acpgate seeded) whole, the built-in agent's state fields alone — with the
    edge's ``session_id``, the state fields over it, and the parent under
    ``_meta.acpgate.forkedFrom``."""
    out = dict(state_fields) if builtin else setup_result(agent_result, state_fields,
                                                          builtin=False)
    return _with_ours({"sessionId": session_id, **out}, {META_FORKED_FROM: forked_from})


def _with_ours(result: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """``result`` with ``ours`` added under ``_meta.acpgate`` (what is there stays)."""
    meta = result.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    there = meta.get(META_ACPGATE)
    meta[META_ACPGATE] = {**(there if isinstance(there, dict) else {}), **ours}
    return {**result, "_meta": meta}
