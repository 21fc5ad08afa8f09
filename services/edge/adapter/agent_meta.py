"""acpgate's ``_meta`` namespace in what an external agent sends: acpgate alone writes it.

A client reads ``_meta.acpgate`` as acpgate's own word — the event id it resumes
from, a fork's ``forkedFrom``, a replayed turn's ``stopReason``, why a permission
request was cancelled, where a session lives. An external agent (``kind = "acp"``)
that put keys there would speak as acpgate. So every message an external agent
sends has ``acpgate`` taken out of each ``_meta`` acpgate uses, before acpgate adds
its own: a request's or notification's ``params._meta``, a ``session/update``'s
``update._meta``, a result's ``_meta`` and an error's ``data.acpgate``. The rest of the
agent's ``_meta`` is kept. The built-in agent is acpgate's own and keeps its keys
(``modelOutput``, ``warnings``); its links are not screened.

Kinds of ``session/update`` that acpgate itself makes (:data:`ACPGATE_KINDS`: a turn's
end told to a client that did not prompt, a prompt echoed to the other attached clients)
are acpgate's word too: an external agent's update of such a kind is dropped, with a
warning in the log.

The relay's fast path (:mod:`services.edge.adapter.relay_lines`) parses each update
object anyway: :func:`carries_ours` looks at it there, and such a rare line takes
the general path, which screens it here.
"""

from __future__ import annotations

from typing import Any

from services.common.attach_protocol import U_PROMPT_RECEIVED
from services.common.jsonrpc import JsonRpcError, JsonRpcPeer
from services.common.logs import get_logger
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    M_SESSION_UPDATE,
    META_ACPGATE,
    U_TURN_COMPLETE,
)
from services.edge.backends.session_types import ResolvedAgent

__all__ = ["ACPGATE_KINDS", "carries_ours", "foreign", "screen_batch", "screen_params",
           "screened_request"]

log = get_logger("edge.adapter")

#: ``session/update`` kinds only acpgate sends; an external agent's are dropped.
ACPGATE_KINDS = frozenset({U_TURN_COMPLETE, U_PROMPT_RECEIVED})


def foreign(agent: ResolvedAgent) -> bool:
    """Whether what ``agent`` sends is screened: every agent but the built-in one."""
    return agent.kind != AGENT_KIND_BUILTIN


def carries_ours(update: dict[str, Any]) -> bool:
    """Whether an update object has a ``_meta.acpgate`` or is of one of acpgate's own
    kinds (cheap: two lookups for most)."""
    if update.get("sessionUpdate") in ACPGATE_KINDS:
        return True
    meta = update.get("_meta")
    return meta is not None and type(meta) is dict and META_ACPGATE in meta


def _drop(value: Any) -> None:
    """``value._meta.acpgate`` removed, in place (a message just parsed: nobody else's)."""
    if type(value) is dict:
        meta = value.get("_meta")
        if type(meta) is dict:
            meta.pop(META_ACPGATE, None)


def screen_params(params: dict[str, Any]) -> dict[str, Any]:
    """A request's or notification's params without acpgate's namespace (``params._meta``
    and, for a ``session/update``, ``update._meta``); the same dict."""
    _drop(params)
    _drop(params.get("update"))
    return params


def _acpgates_kind(method: str, params: dict[str, Any]) -> bool:
    update = params.get("update")
    return (method == M_SESSION_UPDATE and type(update) is dict
            and update.get("sessionUpdate") in ACPGATE_KINDS)


def screen_batch(batch: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """A run of notifications, each screened (:func:`screen_params`), without the updates
    of acpgate's own kinds (:data:`ACPGATE_KINDS`)."""
    kept = []
    for method, params in batch:
        if _acpgates_kind(method, params):
            log.warning("agent_update_dropped", kind=str(params["update"]["sessionUpdate"]),
                        reason="an update kind only acpgate sends")
            continue
        kept.append((method, screen_params(params)))
    return kept


async def screened_request(rpc: JsonRpcPeer, method: str, params: dict[str, Any],
                           wait_secs: float | None) -> Any:
    """``rpc.request``, its result's ``_meta.acpgate`` and its error's ``data.acpgate``
    removed."""
    try:
        result = await rpc.request(method, params, wait_secs)
    except JsonRpcError as exc:
        if type(exc.data) is dict and META_ACPGATE in exc.data:
            exc.data = {k: v for k, v in exc.data.items() if k != META_ACPGATE}
        raise
    _drop(result)
    return result
