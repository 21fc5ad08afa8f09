"""Adapter failures as client errors, whole: code, message, ``data`` and stderr.

A direct connection shows the client the adapter's own error (claude's
``data.details``, codex's ``Authentication required``); behind the edge the
client sees exactly the same code, message and ``data`` — acpgate's context
(the request it was making, ``during``, and the agent's alias, ``agent``) is
added under ``data.acpgate`` when ``data`` is absent or an object (data of
another type is left as the agent sent it). When the adapter *exited* instead
of answering, the error is acpgate's own: -32603 with a message naming what
failed (starting agent ``<alias>``, the prompt, the restore, the fork), and
``data.acpgate`` says how it went (``exit``) and carries the last lines of its
stderr (``stderrTail``), bounded and with secrets scrubbed: the values of the
agent's configured environment and anything shaped like a key or token are
replaced by ``***``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    INTERNAL_ERROR,
    M_SESSION_FORK,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    META_ACPGATE,
    META_AGENT,
    META_DURING,
    META_EXIT,
    META_STDERR,
    MSG_AGENT_START_FAILED,
    MSG_FORK_FAILED,
    MSG_PROMPT_FAILED,
    MSG_RESTORE_FAILED,
)
from services.edge.adapter.link import AdapterExit, AdapterGone
from services.edge.errors import cause

#: At most this many of the last stderr lines, each cut to this many characters.
STDERR_MAX_LINES = 20
STDERR_MAX_LINE_CHARS = 400
#: Configured values shorter than this are not treated as secrets (``1``, ``true``...).
_MIN_SECRET_LEN = 6
_REDACTED = "***"
_SECRET_PATTERNS = (
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"),               # OpenAI/Anthropic-style keys
    re.compile(r"\b(?:gh[pousr]|github_pat)_[A-Za-z0-9_]{16,}"),   # GitHub tokens
    re.compile(r"\bAIza[0-9A-Za-z_-]{20,}"),                       # Google API keys
    re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password|passwd|authorization)"
               r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"),
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the given secret values and key-shaped strings replaced by ``***``."""
    for value in sorted((v for v in secrets if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True):
        text = text.replace(value, _REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + _REDACTED, text)
    return text


def stderr_lines(tail: str, secrets: Iterable[str] = ()) -> list[str]:
    """The last :data:`STDERR_MAX_LINES` non-blank stderr lines, cut and scrubbed."""
    lines = [line for line in tail.splitlines() if line.strip()][-STDERR_MAX_LINES:]
    secret_list = list(secrets)
    return [scrub(line[:STDERR_MAX_LINE_CHARS], secret_list) for line in lines]


def exit_data(exit_info: AdapterExit, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """``data`` of an error caused by the adapter's exit: ``{"acpgate": {exit, stderrTail}}``."""
    ours: dict[str, Any] = {
        META_EXIT: {"exitCode": exit_info.exit_code, "signal": exit_info.signal,
                    "lost": exit_info.lost},
    }
    lines = stderr_lines(exit_info.stderr_tail, secrets)
    if lines:
        ours[META_STDERR] = lines
    return {META_ACPGATE: ours}


def with_context(data: Any, context: dict[str, Any]) -> Any:
    """An agent's error ``data`` with acpgate's ``context`` under ``data.acpgate``; ``data``
    that is neither absent nor an object is kept as the agent sent it. What ``data.acpgate``
    says already stays (an error passed up through two steps keeps the inner, more precise
    context: the ``authenticate`` replayed during a ``session/new``)."""
    if data is None:
        return {META_ACPGATE: context}
    if isinstance(data, dict):
        mine = data.get(META_ACPGATE)
        return {**data, META_ACPGATE: {**context, **mine} if isinstance(mine, dict) else context}
    return data


def agent_error(exc: JsonRpcError, during: str, alias: str = "") -> JsonRpcError:
    """An adapter's own error answer as the client gets it: its code and message exactly,
    its data with acpgate's context (:func:`with_context`)."""
    context: dict[str, Any] = {META_DURING: during}
    if alias:
        context[META_AGENT] = alias
    return JsonRpcError(exc.code, exc.message, with_context(exc.data, context))


def _relayed(template: str, exc: BaseException, secrets: Iterable[str], during: str,
             agent: str = "", **fields: str) -> JsonRpcError:
    if isinstance(exc, JsonRpcError):  # the adapter's own error answer, exactly
        return agent_error(exc, during, agent)
    if isinstance(exc, AdapterGone):
        return JsonRpcError(INTERNAL_ERROR,
                            template.format(cause=exc.exit_info.describe(), **fields),
                            exit_data(exc.exit_info, secrets))
    return JsonRpcError(INTERNAL_ERROR, template.format(cause=cause(exc), **fields))


def setup_error(alias: str, exc: BaseException, secrets: Iterable[str] = (),
                during: str = M_SESSION_NEW) -> JsonRpcError:
    """The error of a session whose agent could not be started or set up (``during`` the
    request the edge was making).

    An adapter's JSON-RPC error is passed on exactly (:func:`agent_error`); an adapter
    that exited gets -32603 with its exit and stderr tail in ``data.acpgate``.
    """
    return _relayed(MSG_AGENT_START_FAILED, exc, secrets, during, alias, alias=alias)


def prompt_error(exc: BaseException, secrets: Iterable[str] = (), alias: str = "") -> JsonRpcError:
    """The error of a turn the adapter failed (same rules as :func:`setup_error`)."""
    return _relayed(MSG_PROMPT_FAILED, exc, secrets, M_SESSION_PROMPT, alias)


def restore_error(exc: BaseException, secrets: Iterable[str] = (), alias: str = "",
                  during: str = "") -> JsonRpcError:
    """The error of a restore whose seeding failed (same rules as :func:`setup_error`)."""
    return _relayed(MSG_RESTORE_FAILED, exc, secrets, during, alias)


def fork_error(exc: BaseException, secrets: Iterable[str] = (), alias: str = "") -> JsonRpcError:
    """The error of a fork whose seeding failed (same rules as :func:`setup_error`)."""
    return _relayed(MSG_FORK_FAILED, exc, secrets, M_SESSION_FORK, alias)
