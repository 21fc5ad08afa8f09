"""An in-process gRPC channel: generated stubs calling servicers of this very process.

Embedded mode (``acpgate acp``) runs the edge and both services in one process.
Over a unix socket every message the edge and a service exchange is
serialized, framed as HTTP/2, written, read, parsed and handed between gRPC's
own threads and the event loop — measured as the largest share of the relay
that can be removed (bench/PROFILE.md, §11). :class:`InProcessChannel` keeps
the contract and skips the transport: a service registers on it exactly as on
a ``grpc.aio.Server`` (the generated ``add_*Servicer_to_server``), the
generated stub is built on it exactly as on a ``grpc.aio.Channel``, and each
call runs the servicer's own method with the request object itself (no
serialization, no copy). Errors keep their gRPC shape: a servicer's
``context.abort`` reaches the caller as :class:`grpc.aio.AioRpcError`.

Streaming responses are produced by the servicer in a task of their own and
handed over through a queue, as a server would, so a caller's ``cancel()``
stops the servicer's generator through its normal cancellation path. The
server-side interceptors (the shared token) do not apply: a caller in the
same process holds the servicers themselves anyway. Only what acpgate's
services use is supported: unary-unary, unary-stream and stream-stream calls
and ``context.abort``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import grpc

_EOF = object()


class _Abort(Exception):
    """Raised by :meth:`_Context.abort`; becomes the caller's AioRpcError."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    empty = grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, empty, empty, details, None)


def _as_rpc_error(exc: BaseException) -> grpc.aio.AioRpcError:
    if isinstance(exc, _Abort):
        return _rpc_error(exc.code, exc.details)
    return _rpc_error(grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")


class _Context:
    """The part of ``grpc.aio.ServicerContext`` the servicers use."""

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Any = ()) -> NoReturn:
        """End the call with ``code`` (raises)."""
        raise _Abort(code, details)

    def invocation_metadata(self) -> tuple[Any, ...]:
        """No metadata travels in-process."""
        return ()

    def peer(self) -> str:
        """Who calls: this process."""
        return "inproc"


class _StreamCall:
    """A streaming call's response side: ``async for``, ``read()`` and ``cancel()``."""

    def __init__(self, responses: AsyncIterator[Any]) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task = asyncio.create_task(self._produce(responses))

    async def _produce(self, responses: AsyncIterator[Any]) -> None:
        try:
            async for message in responses:
                self._queue.put_nowait(message)
            self._queue.put_nowait(_EOF)
        except asyncio.CancelledError:
            self._queue.put_nowait(asyncio.CancelledError())
            raise
        except BaseException as exc:  # the servicer failed: the caller sees a status
            self._queue.put_nowait(_as_rpc_error(exc))

    async def read(self) -> Any:
        """The next response, or ``grpc.aio.EOF`` after the last."""
        item = await self._queue.get()
        if item is _EOF:
            self._queue.put_nowait(_EOF)
            return grpc.aio.EOF  # type: ignore[attr-defined]
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            raise item
        return item

    def __aiter__(self) -> _StreamCall:
        return self

    async def __anext__(self) -> Any:
        item = await self.read()
        if item is grpc.aio.EOF:  # type: ignore[attr-defined]
            raise StopAsyncIteration
        return item

    def cancel(self) -> bool:
        """Stop the servicer's side; a pending or later ``read`` raises CancelledError."""
        if self._task.done():
            return False
        self._task.cancel()
        return True

    def done(self) -> bool:
        """True once the servicer's side ended."""
        return self._task.done()


async def _aiter(requests: Any) -> AsyncIterator[Any]:
    for request in requests:
        yield request


class _CallDetails(grpc.HandlerCallDetails):
    """What a server interceptor sees of a call."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class InProcessChannel:
    """A stand-in for both ``grpc.aio.Server`` (registration) and ``grpc.aio.Channel``.

    ``interceptors`` are the service's own server interceptors (e.g. the session
    service's store-unavailable mapping); they wrap every call as on the server.
    """

    def __init__(self, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._interceptors = list(interceptors)

    # ------------------------------------------------------------------ the server side

    def add_registered_method_handlers(
            self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        """What the generated ``add_*Servicer_to_server`` registers, by method path."""
        for name, handler in handlers.items():
            self._handlers[f"/{service}/{name}"] = handler

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        """Generic handlers are not needed: every method arrives registered (above)."""

    # ------------------------------------------------------------------ the channel side

    async def _handler(self, method: str) -> Any:
        """The handler of ``method`` as the service's interceptors make it (an aio handler:
        its behaviours are coroutines and async generators, whatever grpc's stubs say)."""
        async def resolve(details: grpc.HandlerCallDetails, depth: int) -> grpc.RpcMethodHandler:
            if depth == len(self._interceptors):
                handler = self._handlers.get(details.method)
                if handler is None:
                    raise _rpc_error(grpc.StatusCode.UNIMPLEMENTED,
                                     f"no in-process handler for {details.method}")
                return handler
            return await self._interceptors[depth].intercept_service(
                lambda d: resolve(d, depth + 1), details)
        return await resolve(_CallDetails(method), 0)

    def unary_unary(self, method: str, *_: Any, **__: Any) -> Callable[..., Any]:
        """A multicallable running the servicer's unary method."""
        async def run(request: Any, deadline: float | None) -> Any:
            try:
                behaviour = (await self._handler(method)).unary_unary
                return await asyncio.wait_for(behaviour(request, _Context()), deadline)
            except _Abort as exc:
                raise _as_rpc_error(exc) from None

        def call(request: Any, *_args: Any, **kw: Any) -> Any:
            return run(request, kw.get("timeout"))
        return call

    def unary_stream(self, method: str, *_: Any, **__: Any) -> Callable[..., _StreamCall]:
        """A multicallable running the servicer's server-streaming method."""
        async def responses(request: Any) -> AsyncIterator[Any]:
            async for message in (await self._handler(method)).unary_stream(request, _Context()):
                yield message

        def call(request: Any, *_args: Any, **_kw: Any) -> _StreamCall:
            return _StreamCall(responses(request))
        return call

    def stream_stream(self, method: str, *_: Any, **__: Any) -> Callable[..., _StreamCall]:
        """A multicallable running the servicer's bidirectional method on the caller's
        request iterator itself."""
        async def responses(requests: Any) -> AsyncIterator[Any]:
            async for message in (await self._handler(method)).stream_stream(requests, _Context()):
                yield message

        def call(requests: Any, *_args: Any, **_kw: Any) -> _StreamCall:
            if not hasattr(requests, "__aiter__"):  # grpc takes plain iterables too
                requests = _aiter(requests)
            return _StreamCall(responses(requests))
        return call

    async def close(self, grace: float | None = None) -> None:
        """Nothing to release: the servicers belong to their servers."""

    async def channel_ready(self) -> None:
        """Always ready."""
