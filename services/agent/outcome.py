"""Reading a permission answer, and the edge's reason on a ``cancelled`` one (docs/contracts.md)."""

from __future__ import annotations

from typing import Any

from services.common.acp.schema import (
    RequestPermissionOutcomeCancelled,
    RequestPermissionOutcomeSelected,
    RequestPermissionResponse,
)
from services.common.acp.wire import AcpDecodeError
from services.common.protocol import META_ACPGATE, META_REASON, META_TIMEOUT_SECS


def _acpgate_meta(answer: RequestPermissionResponse) -> dict[str, Any]:
    inner = answer.meta.get(META_ACPGATE) if answer.meta else None
    return inner if isinstance(inner, dict) else {}


def read_answer(result: Any) -> RequestPermissionResponse:
    """The client's answer to ``session/request_permission``; an unreadable one is a dismissal."""
    try:
        return RequestPermissionResponse.from_json(result)
    except AcpDecodeError:
        return RequestPermissionResponse(outcome=RequestPermissionOutcomeCancelled())


def selected_option(answer: RequestPermissionResponse) -> str | None:
    """The option the user chose, or None when the request was cancelled."""
    outcome = answer.outcome
    return outcome.option_id if isinstance(outcome, RequestPermissionOutcomeSelected) else None


def cancel_reason(answer: RequestPermissionResponse) -> str:
    """``_meta.acpgate.reason`` of a ``cancelled`` answer; "" when absent or malformed.

    The edge answers ``cancelled`` on the client's behalf when the client timed
    out, answered with an error or went away, and says which here; a plain
    ``cancelled`` is the user's own dismissal.
    """
    if not isinstance(answer.outcome, RequestPermissionOutcomeCancelled):
        return ""
    reason = _acpgate_meta(answer).get(META_REASON)
    return reason if isinstance(reason, str) else ""


def cancel_timeout_secs(answer: RequestPermissionResponse) -> int | None:
    """``_meta.acpgate.timeoutSecs`` of a timed-out permission answer: the seconds the edge
    waited (its ``session_timeout_secs``, which the agent's own config may not share);
    ``None`` when absent or not a positive whole number."""
    value = _acpgate_meta(answer).get(META_TIMEOUT_SECS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value
