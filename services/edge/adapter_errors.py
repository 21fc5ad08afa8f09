"""Adapter failures as client errors, whole: code, message, ``data`` and stderr (issue 17).

A direct connection shows the client the adapter's own error (claude's
``data.details``, codex's ``Authentication required``); behind the edge the
client sees the same code and ``data``, with the message prefixed by what
failed (starting agent ``<alias>``, or the prompt). When the adapter *exited*
instead of answering, ``data.acpgate`` says how (``exit``) and carries the
last lines of its stderr (``stderrTail``), bounded and with secrets scrubbed:
the values of the agent's configured environment and anything shaped like a
key or token are replaced by ``***``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    INTERNAL_ERROR,
    META_ACPGATE,
    META_EXIT,
    META_STDERR,
    MSG_AGENT_START_FAILED,
    MSG_FORK_FAILED,
    MSG_PROMPT_FAILED,
    MSG_RESTORE_FAILED,
)
from services.edge.adapter_link import AdapterExit, AdapterGone
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


def _relayed(template: str, exc: BaseException, secrets: Iterable[str], **fields: str) -> JsonRpcError:
    if isinstance(exc, JsonRpcError):  # the adapter's own error answer
        return JsonRpcError(exc.code, template.format(cause=exc.message, **fields), exc.data)
    if isinstance(exc, AdapterGone):
        return JsonRpcError(INTERNAL_ERROR,
                            template.format(cause=exc.exit_info.describe(), **fields),
                            exit_data(exc.exit_info, secrets))
    return JsonRpcError(INTERNAL_ERROR, template.format(cause=cause(exc), **fields))


def setup_error(alias: str, exc: BaseException, secrets: Iterable[str] = ()) -> JsonRpcError:
    """The error of a session whose agent could not be started or set up.

    An adapter's JSON-RPC error keeps its code and ``data``; an adapter that
    exited gets -32603 with its exit and stderr tail in ``data.acpgate``.
    """
    return _relayed(MSG_AGENT_START_FAILED, exc, secrets, alias=alias)


def prompt_error(exc: BaseException, secrets: Iterable[str] = ()) -> JsonRpcError:
    """The error of a turn the adapter failed (same rules as :func:`setup_error`)."""
    return _relayed(MSG_PROMPT_FAILED, exc, secrets)


def restore_error(exc: BaseException, secrets: Iterable[str] = ()) -> JsonRpcError:
    """The error of a restore whose seeding failed (same rules as :func:`setup_error`)."""
    return _relayed(MSG_RESTORE_FAILED, exc, secrets)


def fork_error(exc: BaseException, secrets: Iterable[str] = ()) -> JsonRpcError:
    """The error of a fork whose seeding failed (same rules as :func:`setup_error`)."""
    return _relayed(MSG_FORK_FAILED, exc, secrets)
