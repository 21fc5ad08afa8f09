"""The -32001 answer, saying the way out (SPEC §9; extended on the gateway).

SPEC §1's sentence comes first, exactly (``Maximum session limit reached (<n>)``, or
``… for this token (<n>)`` for a token's share); a gateway client is then told which
of *its own* sessions hold the slots (a few ids with their titles, detached or not,
busy or not), how to free one (``session/close``; ``session/resume`` or
``session/attach`` to take a detached one back) and which key of the config raises the
limit. ``data.acpgate`` says the same for programs. Another principal's sessions are
never named: a host that is full says only that it is. The local user of
``acpgate acp`` gets SPEC's sentence alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from services.common.attach_protocol import M_SESSION_ATTACH
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    M_SESSION_CLOSE,
    M_SESSION_RESUME,
    META_ACPGATE,
    MSG_SESSION_LIMIT,
    MSG_SESSION_LIMIT_TOKEN,
    SESSION_LIMIT,
)
from services.edge.sessions.clients import DetachedPort
from services.edge.sessions.registry import SessionRegistry, SlotRefusal

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["KEY_MAX_SESSIONS", "KEY_SHARE", "limit_error"]

#: The config keys that raise each limit.
KEY_MAX_SESSIONS: Final = "acp.max_sessions"
KEY_SHARE: Final = "acp.max_sessions_per_token"
#: Sessions named at most, in the message and in ``data``.
NAMED_AT_MOST: Final = 5
#: Characters of a title kept in the message.
TITLE_CHARS: Final = 60


def limit_error(refused: SlotRefusal, registry: SessionRegistry | None = None,
                principal: str = "", *, explain: bool = False) -> JsonRpcError:
    """-32001 for ``refused``; with ``explain`` (a gateway client), the sessions of
    ``principal`` that hold the slots here and the way out (module doc)."""
    template = MSG_SESSION_LIMIT_TOKEN if refused.per_token else MSG_SESSION_LIMIT
    message = template.format(max=refused.limit)
    if not explain or registry is None:
        return JsonRpcError(SESSION_LIMIT, message)
    held = [s for s in registry.active.values() if s.principal == principal]
    held.sort(key=lambda s: s.last_activity)
    named = [_describe(s) for s in held[:NAMED_AT_MOST]]
    key = KEY_SHARE if refused.per_token else KEY_MAX_SESSIONS
    parts = [message + "."]
    if named:
        listed = "; ".join(_phrase(n) for n in named)
        more = f" and {len(held) - len(named)} more" if len(held) > len(named) else ""
        whose = "this token's" if refused.per_token else "your"
        parts.append(f"Held by {whose} sessions {listed}{more}.")
        parts.append(f"Free one with {M_SESSION_CLOSE}, or take a detached one back with "
                     f"{M_SESSION_RESUME} or {M_SESSION_ATTACH} (a detached idle one is let "
                     "go by itself when its grace ends).")
    elif not refused.per_token:
        parts.append("Every session slot of this host is in use.")
    parts.append(f"To allow more, raise [{key.replace('.', '] ', 1)}"
                 + (" (0: [acp] max_sessions divided among the active tokens)."
                    if refused.per_token else "."))
    data = {META_ACPGATE: {
        "limit": refused.limit, "scope": "token" if refused.per_token else "host",
        "configKey": key, "held": len(held), "sessions": named,
        "free": [M_SESSION_CLOSE, M_SESSION_RESUME, M_SESSION_ATTACH]}}
    return JsonRpcError(SESSION_LIMIT, " ".join(parts), data)


def _describe(session: EdgeSession) -> dict[str, Any]:
    """One session as ``data.acpgate.sessions`` lists it."""
    out: dict[str, Any] = {"sessionId": session.session_id,
                           "detached": isinstance(session.port, DetachedPort),
                           "busy": session.turn is not None}
    title = session.state.title
    if title:
        out["title"] = title
    return out


def _phrase(named: dict[str, Any]) -> str:
    """One session as the message names it."""
    title = named.get("title")
    text = named["sessionId"]
    if isinstance(title, str):
        short = title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 1] + "…"
        text += f" ({short!r})"
    flags = [f for f, on in (("detached", named["detached"]), ("running a turn",
                                                                named["busy"])) if on]
    return text + (f" [{', '.join(flags)}]" if flags else "")
