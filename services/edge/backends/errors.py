"""How a service call failed, in the edge's own terms (no gRPC types past the backends).

A backend catches every ``grpc.aio.AioRpcError`` and raises :class:`ServiceError` with the
:class:`Failure` it means and the service's message verbatim (the session service writes
messages meant for the client, e.g. a policy refusal). Callers match on ``kind``.
"""

from __future__ import annotations

import enum

import grpc


class Failure(enum.Enum):
    """What went wrong, named by what the caller does about it."""

    INVALID = "invalid"  # the request was wrong: answer -32602 with the detail
    REFUSED = "refused"  # a rule said no (policy, autonomy, ownership)
    NOT_FOUND = "not_found"  # no such session, lease or record (or not visible to the caller)
    PRECONDITION = "precondition"  # exists, but not in a state that allows this
    CONFLICT = "conflict"  # lost a race: claimed elsewhere, fenced, generation moved on
    EXHAUSTED = "exhausted"  # a quota or limit was reached
    UNAVAILABLE = "unavailable"  # the service cannot be reached now (retry may help)
    DEADLINE = "deadline"  # no answer in time
    CANCELLED = "cancelled"  # the call was cancelled (the caller is going away)
    UNIMPLEMENTED = "unimplemented"  # the service is older than this edge
    INTERNAL = "internal"  # anything else: a bug or a crash behind the call


_BY_CODE: dict[grpc.StatusCode, Failure] = {
    grpc.StatusCode.INVALID_ARGUMENT: Failure.INVALID,
    grpc.StatusCode.OUT_OF_RANGE: Failure.INVALID,
    grpc.StatusCode.PERMISSION_DENIED: Failure.REFUSED,
    grpc.StatusCode.NOT_FOUND: Failure.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: Failure.PRECONDITION,
    grpc.StatusCode.ABORTED: Failure.CONFLICT,
    grpc.StatusCode.ALREADY_EXISTS: Failure.CONFLICT,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Failure.EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE: Failure.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: Failure.DEADLINE,
    grpc.StatusCode.CANCELLED: Failure.CANCELLED,
    grpc.StatusCode.UNIMPLEMENTED: Failure.UNIMPLEMENTED,
}


class ServiceError(Exception):
    """A call to the session or lifecycle service failed.

    ``kind`` says how; ``detail`` is the service's own message (may be empty); ``code`` is
    the status name, for logs only.
    """

    def __init__(self, kind: Failure, detail: str = "", code: str = "") -> None:
        super().__init__(detail or kind.value)
        self.kind = kind
        self.detail = detail
        self.code = code or kind.name

    def __repr__(self) -> str:
        return f"ServiceError({self.kind.name}, {self.detail!r})"


def from_rpc(exc: grpc.aio.AioRpcError) -> ServiceError:
    """The :class:`ServiceError` for a failed gRPC call (backends only)."""
    code = exc.code()
    return ServiceError(_BY_CODE.get(code, Failure.INTERNAL), exc.details() or "", code.name)
