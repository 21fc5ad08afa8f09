"""An in-process gRPC channel: generated stubs calling servicers of this very process.

Embedded mode (``acpgate acp``) runs the edge and both services in one process.
Over a unix socket every message the edge and a service exchange is
serialized, framed as HTTP/2, written, read, parsed and handed between gRPC's
own threads and the event loop — measured as the largest share of the relay
that can be removed (bench/PROFILE.md). :class:`InProcessChannel` keeps
the contract and skips the transport: a service registers on it exactly as on
a ``grpc.aio.Server`` (the generated ``add_*Servicer_to_server``), the
generated stub is built on it exactly as on a ``grpc.aio.Channel``, and each
call runs the servicer's own method with the request object itself (no
serialization, no copy). Errors keep their gRPC shape: a servicer's
``context.abort`` reaches the caller as :class:`grpc.aio.AioRpcError`.

Streaming responses are produced by the servicer's generator in the reading
task itself (no queue, no task between them); a caller's ``cancel()`` stops the
generator through its normal cancellation path (CancelledError inside a read,
``aclose`` between reads). The
server-side interceptors (the shared token) do not apply: a caller in the
same process holds the servicers themselves anyway. Only what acpgate's
services use is supported: unary-unary, unary-stream and stream-stream calls
and ``context.abort``.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    """A streaming call's response side: ``async for``, ``read()`` and ``cancel()``.

    Each ``read`` runs the servicer's generator up to its next message in the reader's
    own task: no producer task and no queue between them, so a message reaches the caller
    in the loop iteration it is produced in (bench/PROFILE.md: one task switch less
    per relayed batch), and the servicer produces only as fast as the caller reads, as
    gRPC's flow control makes a remote one.
    """

    def __init__(self, responses: AsyncIterator[Any]) -> None:
        self._responses = responses
        #: The task inside ``read`` (running the generator), for ``cancel``.
        self._reader: asyncio.Task[Any] | None = None
        #: What every later ``read`` gives once the stream ended: _EOF or the error.
        self._ended: Any = None
        self._cancelled = False
        self._closing: asyncio.Task[None] | None = None

    def _end(self, outcome: Any) -> Any:
        if self._ended is None:
            self._ended = outcome
        return self._ended

    async def read(self) -> Any:
        """The next response, or ``grpc.aio.EOF`` after the last."""
        if self._ended is not None:
            if self._ended is _EOF:
                return grpc.aio.EOF  # type: ignore[attr-defined]
            if self._ended is asyncio.CancelledError:
                raise asyncio.CancelledError()
            raise self._ended
        if self._reader is not None:
            raise RuntimeError("concurrent read on one in-process stream")
        task = asyncio.current_task()
        self._reader = task
        try:
            return await self._responses.__anext__()
        except StopAsyncIteration:
            self._end(_EOF)
            return grpc.aio.EOF  # type: ignore[attr-defined]
        except asyncio.CancelledError:
            self._end(asyncio.CancelledError)
            if self._cancelled and task is not None:
                task.uncancel()  # the cancel was the call's, not the task's owner's
            raise
        except BaseException as exc:  # the servicer failed: the caller sees a status
            raise self._end(_as_rpc_error(exc)) from None
        finally:
            self._reader = None

    def __aiter__(self) -> _StreamCall:
        return self

    async def __anext__(self) -> Any:
        item = await self.read()
        if item is grpc.aio.EOF:  # type: ignore[attr-defined]
            raise StopAsyncIteration
        return item

    def cancel(self) -> bool:
        """Stop the servicer's side; a pending or later ``read`` raises CancelledError."""
        if self._ended is not None or self._cancelled:
            return False
        self._cancelled = True
        if self._reader is not None:
            # The generator runs inside that read: cancel it there (its normal path).
            self._reader.cancel()
        else:
            # Suspended at a yield (or never started): close it, its ``finally`` runs.
            self._end(asyncio.CancelledError)
            self._closing = asyncio.create_task(self._close())
        return True

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self._responses.aclose()  # type: ignore[attr-defined]

    def done(self) -> bool:
        """True once the servicer's side ended."""
        return self._ended is not None and (self._closing is None or self._closing.done())


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

    async def _responses(self, method: str, kind: str, arg: Any) -> AsyncIterator[Any]:
        """The servicer's ``kind`` behaviour of ``method`` on ``arg``, as one generator."""
        inner = getattr(await self._handler(method), kind)(arg, _Context())
        try:
            async for message in inner:
                yield message
        finally:  # a cancel between reads closes the servicer's generator now, not at GC
            await inner.aclose()

    def unary_stream(self, method: str, *_: Any, **__: Any) -> Callable[..., _StreamCall]:
        """A multicallable running the servicer's server-streaming method."""
        def call(request: Any, *_args: Any, **_kw: Any) -> _StreamCall:
            return _StreamCall(self._responses(method, "unary_stream", request))
        return call

    def stream_stream(self, method: str, *_: Any, **__: Any) -> Callable[..., _StreamCall]:
        """A multicallable running the servicer's bidirectional method on the caller's
        request iterator itself."""
        def call(requests: Any, *_args: Any, **_kw: Any) -> _StreamCall:
            if not hasattr(requests, "__aiter__"):  # grpc takes plain iterables too
                requests = _aiter(requests)
            return _StreamCall(self._responses(method, "stream_stream", requests))
        return call

    async def close(self, grace: float | None = None) -> None:
        """Nothing to release: the servicers belong to their servers."""

    async def channel_ready(self) -> None:
        """Always ready."""
