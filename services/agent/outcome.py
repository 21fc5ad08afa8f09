"""Reading the edge's reason on a ``cancelled`` permission answer (docs/contracts.md)."""

from __future__ import annotations

from typing import Any

from services.common.protocol import META_ACPGATE, META_REASON, META_TIMEOUT_SECS


def _acpgate_meta(result: Any) -> dict[str, Any]:
    meta = result.get("_meta") if isinstance(result, dict) else None
    inner = meta.get(META_ACPGATE) if isinstance(meta, dict) else None
    return inner if isinstance(inner, dict) else {}


def cancel_reason(result: Any) -> str:
    """``_meta.acpgate.reason`` of a permission answer; "" when absent or malformed.

    The edge answers ``cancelled`` on the client's behalf when the client timed
    out, answered with an error or went away, and says which here; a plain
    ``cancelled`` is the user's own dismissal.
    """
    reason = _acpgate_meta(result).get(META_REASON)
    return reason if isinstance(reason, str) else ""


def cancel_timeout_secs(result: Any) -> int | None:
    """``_meta.acpgate.timeoutSecs`` of a timed-out permission answer: the seconds the edge
    waited (its ``session_timeout_secs``, which the agent's own config may not share);
    ``None`` when absent or not a positive whole number."""
    value = _acpgate_meta(result).get(META_TIMEOUT_SECS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value
