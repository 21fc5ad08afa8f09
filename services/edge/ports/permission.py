"""What the edge answers an adapter's ``session/request_permission`` with (SPEC §6).

The client's answer goes back as its outcome alone (the client's ``_meta`` is
between the client and the edge). When the client gives no usable answer, the
edge answers ``cancelled`` itself and says why in ``_meta.acpgate.reason``
(docs/contracts.md), so the agent does not report a dismissal the user never made.
"""

from __future__ import annotations

from typing import Any

from services.common.acp.schema import RequestPermissionOutcomeCancelled, RequestPermissionResponse
from services.common.acp.wire import AcpDecodeError
from services.common.protocol import (
    CANCEL_REASON_CLIENT_ERROR,
    CANCEL_REASON_CLIENT_GONE,
    CANCEL_REASON_TIMEOUT,
    META_ACPGATE,
    META_REASON,
    META_TIMEOUT_SECS,
)
from services.edge.ports.backchannel import BackChannelError, BackChannelTimeout, ClientErrorAnswer

__all__ = ["cancelled_answer", "denial_reason", "relayed_answer"]


def cancelled_answer(reason: str = "", *, timeout_secs: int | None = None) -> dict[str, Any]:
    """A ``cancelled`` answer; ``reason`` (a ``CANCEL_REASON_*``) says why the edge gave it,
    ``timeout_secs`` how long it waited when the client did not answer in time."""
    why: dict[str, Any] = {META_REASON: reason}
    if timeout_secs is not None:
        why[META_TIMEOUT_SECS] = timeout_secs
    meta = {META_ACPGATE: why} if reason else None
    return RequestPermissionResponse(outcome=RequestPermissionOutcomeCancelled(),
                                     meta=meta).to_json()


def relayed_answer(client_result: Any) -> dict[str, Any]:
    """The client's answer as the adapter gets it; an unreadable one is a plain ``cancelled``."""
    try:
        outcome = RequestPermissionResponse.from_json(client_result).outcome
    except AcpDecodeError:
        return cancelled_answer()
    return RequestPermissionResponse(outcome=outcome).to_json()


def denial_reason(exc: BackChannelError) -> str:
    """The ``_meta.acpgate.reason`` for a permission request that got no usable answer."""
    if isinstance(exc, BackChannelTimeout):
        return CANCEL_REASON_TIMEOUT
    if isinstance(exc, ClientErrorAnswer):
        return CANCEL_REASON_CLIENT_ERROR
    return CANCEL_REASON_CLIENT_GONE
