"""Reading the edge's reason on a ``cancelled`` permission answer (docs/contracts.md)."""

from __future__ import annotations

from typing import Any

from services.common.protocol import META_ACPGATE, META_REASON


def cancel_reason(result: Any) -> str:
    """``_meta.acpgate.reason`` of a permission answer; "" when absent or malformed.

    The edge answers ``cancelled`` on the client's behalf when the client timed
    out, answered with an error or went away, and says which here; a plain
    ``cancelled`` is the user's own dismissal.
    """
    meta = result.get("_meta") if isinstance(result, dict) else None
    inner = meta.get(META_ACPGATE) if isinstance(meta, dict) else None
    reason = inner.get(META_REASON) if isinstance(inner, dict) else None
    return reason if isinstance(reason, str) else ""
