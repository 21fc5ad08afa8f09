"""The dialect's error answers for failures behind it (SPEC §1, §3, §8).

A refusal of the session service (:class:`~services.edge.backends.errors.ServiceError`)
becomes a JSON-RPC error with the service's message forwarded verbatim; a session id the
caller may not see is reported exactly like one that does not exist.
"""

from __future__ import annotations

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MSG_SESSION_NOT_FOUND,
    POLICY_REFUSED,
    SESSION_NOT_FOUND,
)
from services.edge.backends.errors import Failure, ServiceError

log = get_logger("edge.dialect")


def not_found(sid: str) -> JsonRpcError:
    """-32000 ``Session not found: <id>``."""
    return JsonRpcError(SESSION_NOT_FOUND, MSG_SESSION_NOT_FOUND.format(session_id=sid))


def service_error(exc: ServiceError, sid: str = "") -> JsonRpcError:
    """The JSON-RPC answer for a failed service call (messages forwarded verbatim).

    With ``sid``, a session the service does not have (or will not show) is -32000
    "Session not found", exactly like an id that never existed.
    """
    if exc.kind is Failure.INVALID:
        return JsonRpcError(INVALID_PARAMS, exc.detail or "Invalid params")
    if exc.kind is Failure.REFUSED:  # a rule refused it (autonomy)
        return JsonRpcError(POLICY_REFUSED, exc.detail or "Refused")
    if exc.kind in (Failure.NOT_FOUND, Failure.PRECONDITION) and sid:
        return not_found(sid)
    if exc.kind is Failure.PRECONDITION:  # e.g. the agent workspace cannot be created
        return JsonRpcError(INTERNAL_ERROR, exc.detail or "Internal error")
    log.error("service_call_failed", code=exc.code, detail=exc.detail)
    return JsonRpcError(INTERNAL_ERROR, f"Internal error: service call failed ({exc.code})")


def cause(exc: BaseException) -> str:
    """One line saying why ``exc`` happened, for an error message to the client."""
    if isinstance(exc, JsonRpcError):
        return exc.message
    if isinstance(exc, ServiceError):
        return exc.detail or exc.code
    text = str(exc)
    return text if text else type(exc).__name__
