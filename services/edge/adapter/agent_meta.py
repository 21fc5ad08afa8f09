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

The relay's fast path (:mod:`services.edge.adapter.relay_lines`) parses each update
object anyway: :func:`carries_ours` looks at it there, and such a rare line takes
the general path, which screens it here.
"""

from __future__ import annotations

from typing import Any

from services.common.jsonrpc import JsonRpcError, JsonRpcPeer
from services.common.protocol import AGENT_KIND_BUILTIN, META_ACPGATE
from services.edge.backends.session_types import ResolvedAgent

__all__ = ["carries_ours", "foreign", "screen_batch", "screen_params", "screened_request"]


def foreign(agent: ResolvedAgent) -> bool:
    """Whether what ``agent`` sends is screened: every agent but the built-in one."""
    return agent.kind != AGENT_KIND_BUILTIN


def carries_ours(update: dict[str, Any]) -> bool:
    """Whether an update object has a ``_meta.acpgate`` (cheap: one lookup for most)."""
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


def screen_batch(batch: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """A run of notifications, each screened (:func:`screen_params`); the same list."""
    for _, params in batch:
        screen_params(params)
    return batch


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
