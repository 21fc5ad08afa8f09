"""A shared database that cannot be reached is UNAVAILABLE, from whichever RPC met it.

The PostgreSQL store raises :class:`~services.session.store.StoreUnavailable`
when its connection to the server breaks mid-call (a restart, a failover, a
network cut). Every RPC can meet it, so one server interceptor answers it —
UNAVAILABLE with the store's reason, which names the URL without its
password — instead of a catch in each RPC or an opaque UNKNOWN.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import grpc

from services.common.logs import get_logger
from services.session.store import StoreUnavailable

__all__ = ["StoreUnavailableInterceptor"]

log = get_logger("session.servicer")

Ctx = grpc.aio.ServicerContext[Any, Any]


async def _abort(context: Ctx, exc: StoreUnavailable) -> None:
    log.warning("session_store_unavailable", reason=str(exc))
    await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))


def _guarded(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` with StoreUnavailable turned into UNAVAILABLE (unary and server
    streaming: the shapes SessionService has)."""
    des, ser = handler.request_deserializer, handler.response_serializer
    if handler.unary_stream is not None:
        # The stubs type the sync handler; an aio server's is an async generator.
        stream = cast(Callable[[Any, Ctx], AsyncIterator[Any]], handler.unary_stream)

        async def guarded_stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            try:
                async for message in stream(request, context):
                    yield message
            except StoreUnavailable as exc:
                await _abort(context, exc)

        return grpc.unary_stream_rpc_method_handler(guarded_stream, des, ser)
    if handler.unary_unary is not None:
        unary = cast(Callable[[Any, Ctx], Awaitable[Any]], handler.unary_unary)

        async def guarded_unary(request: Any, context: Ctx) -> Any:
            try:
                return await unary(request, context)
            except StoreUnavailable as exc:
                await _abort(context, exc)

        return grpc.unary_unary_rpc_method_handler(guarded_unary, des, ser)
    return handler


class StoreUnavailableInterceptor(grpc.aio.ServerInterceptor):
    """Answers UNAVAILABLE when an RPC fails because the store's server is unreachable."""

    def __init__(self) -> None:
        #: The guarded handler of each method, wrapped once (not again on every call).
        self._guarded: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """The method's handler, guarded."""
        method = handler_call_details.method
        handler = self._guarded.get(method)
        if handler is None:
            handler = await continuation(handler_call_details)
            if handler is None:
                return handler
            handler = self._guarded[method] = _guarded(handler)
        return handler
