"""HTTP/2 on the gateway's port (``h2``): TLS ALPN ``h2``, h2c prior knowledge, ``Upgrade: h2c``.

The ACP RFD wants HTTP/2 for Streamable HTTP: one TCP connection carries the
POSTs next to the long-lived SSE streams. Each request stream becomes one
:class:`~.exchange.HttpRequest` handed to the routes with an :class:`H2Response`
whose ``write`` honours HTTP/2 flow control (the stream's and the connection's
window) and the socket's own write buffer, so a client that stops reading a
stream stalls that stream's writer only until the budget behind it is spent.
Bodies are bounded (``max_body`` for all the connection's unfinished ones together;
413 past it); at most
:data:`MAX_CONCURRENT_STREAMS` requests run at once per connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import H2Error, ProtocolError
from h2.settings import SettingCodes, Settings

from services.common.logs import get_logger
from services.edge.transport.exchange import Headers, HttpRequest, respond
from services.edge.transport.wiring import Wiring, peer_name

__all__ = ["MAX_CONCURRENT_STREAMS", "H2Response", "Http2Connection"]

MAX_CONCURRENT_STREAMS: Final = 128
#: Seconds an HTTP/2 connection with no open stream stays open.
IDLE_SECS: Final = 75.0
_WRITE_HIGH: Final = 64 * 1024

log = get_logger("edge.http")


class H2Response:
    """The response on one HTTP/2 stream."""

    def __init__(self, conn: Http2Connection, stream_id: int) -> None:
        self._conn = conn
        self.stream_id = stream_id
        self.closed = asyncio.Event()
        self._started = False
        self.ended = False

    @property
    def started(self) -> bool:
        """True once the headers were sent."""
        return self._started

    async def start(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """Send ``:status`` and ``headers`` (hop-by-hop ones are not HTTP/2's: dropped)."""
        if self.closed.is_set():
            raise ConnectionError("stream closed")
        head = [(":status", str(status))]
        head += [(k.lower(), v) for k, v in headers
                 if k.lower() not in ("connection", "keep-alive", "transfer-encoding")]
        self._started = True
        self._conn.call(lambda h2: h2.send_headers(self.stream_id, head))

    async def write(self, data: bytes) -> None:
        """Send ``data`` as the stream's and the connection's windows allow."""
        view = memoryview(data)
        conn = self._conn
        while view:
            if self.closed.is_set():
                raise ConnectionError("stream closed")
            window = conn.call(lambda h2: min(h2.local_flow_control_window(self.stream_id),
                                              h2.max_outbound_frame_size))
            if window <= 0:
                await conn.window_changed(self)
                continue
            chunk = bytes(view[:window])
            view = view[window:]

            def send(h2: H2Connection, chunk: bytes = chunk) -> None:
                h2.send_data(self.stream_id, chunk)

            conn.call(send)
        await conn.drain(self)

    async def end(self, data: bytes = b"") -> None:
        """Send the last bytes and END_STREAM."""
        if data:
            await self.write(data)
        if self.ended or self.closed.is_set():
            return
        self.ended = True
        self._conn.call(lambda h2: h2.end_stream(self.stream_id))

    def abort(self) -> None:
        """RST_STREAM (CANCEL): this stream ends, the connection's others go on."""
        if not self.closed.is_set():
            self._conn.reset(self.stream_id, ErrorCodes.CANCEL)
        self.closed.set()


class Http2Connection(asyncio.Protocol):
    """One HTTP/2 connection; made by the HTTP/1.1 side once it knows (``start``)."""

    def __init__(self, wiring: Wiring) -> None:
        self._w = wiring
        config = H2Configuration(client_side=False, header_encoding=None)
        self._h2 = H2Connection(config=config)
        self._h2.local_settings = Settings(client=False, initial_values={
            SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
            SettingCodes.MAX_HEADER_LIST_SIZE: 64 * 1024,
            SettingCodes.ENABLE_PUSH: 0})
        self._transport: asyncio.Transport | None = None
        self._remote = "?"
        self._tls = False
        self._bodies: dict[int, tuple[HttpRequest, bytearray]] = {}
        #: Body bytes held for requests not complete yet, all streams together (bounded by
        #: ``max_body``: 128 streams must not hold 128 bodies).
        self._held = 0
        self._responses: dict[int, H2Response] = {}
        self._window = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._idle: asyncio.TimerHandle | None = None
        self._goaway = False

    # ------------------------------------------------------------ start

    def start(self, transport: asyncio.Transport, data: bytes = b"",
              upgrade: tuple[bytes, HttpRequest] | None = None) -> None:
        """Take over ``transport`` (already read: ``data``); ``upgrade``: the h2c request's
        ``HTTP2-Settings`` and the request itself, answered on stream 1."""
        self._transport = transport
        self._remote = peer_name(transport)
        self._tls = transport.get_extra_info("ssl_object") is not None
        transport.set_write_buffer_limits(high=_WRITE_HIGH)
        self._w.connections.add(self)
        if upgrade is not None:
            self._h2.initiate_upgrade_connection(upgrade[0])
            self._dispatch(1, upgrade[1])
        else:
            self._h2.initiate_connection()
        self._flush()
        if data:
            self.data_received(data)
        self._arm()

    # ------------------------------------------------------------ asyncio.Protocol

    def data_received(self, data: bytes) -> None:
        """Feed the frames to h2 and act on its events."""
        try:
            events = self._h2.receive_data(data)
        except ProtocolError as exc:
            log.info("http2_protocol_error", remote=self._remote, error=str(exc)[:200])
            self._flush()
            self._close_transport()
            return
        for event in events:
            if isinstance(event, RequestReceived):
                self._on_request(event)
            elif isinstance(event, DataReceived):
                self._on_data(event)
            elif isinstance(event, StreamEnded):
                pending = self._bodies.pop(event.stream_id, None)
                if pending is not None:
                    request, body = pending
                    self._held -= len(body)
                    request.body = bytes(body)
                    self._dispatch(event.stream_id, request)
            elif isinstance(event, StreamReset):
                if (dropped := self._bodies.pop(event.stream_id, None)) is not None:
                    self._held -= len(dropped[1])
                if (response := self._responses.get(event.stream_id)) is not None:
                    response.closed.set()
                self._window.set()
            elif isinstance(event, WindowUpdated | RemoteSettingsChanged):
                self._window.set()
            elif isinstance(event, ConnectionTerminated):
                self._flush()
                self._close_transport()
                return
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        """Every stream's reader and writer learn the client is gone."""
        self._w.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        for response in self._responses.values():
            response.closed.set()
        self._window.set()
        self._can_write.set()

    def pause_writing(self) -> None:
        """The socket's buffer is full: writers wait."""
        self._can_write.clear()

    def resume_writing(self) -> None:
        """The socket took the buffer: writers go on."""
        self._can_write.set()

    # ------------------------------------------------------------ requests

    def _on_request(self, event: RequestReceived) -> None:
        fields: dict[str, str] = {}
        plain: list[tuple[str, str]] = []
        for name, value in event.headers or ():
            key = name.decode("latin-1") if isinstance(name, bytes) else name
            val = value.decode("latin-1") if isinstance(value, bytes) else value
            if key.startswith(":"):
                fields[key] = val
            else:
                plain.append((key, val))
        if fields.get(":authority"):
            plain.append(("host", fields[":authority"]))
        request = HttpRequest(fields.get(":method", "GET"), fields.get(":path", "/"),
                              Headers(plain), http_version="2", remote=self._remote,
                              tls=self._tls)
        if event.stream_ended is not None:
            self._dispatch(event.stream_id, request)
        else:
            self._bodies[event.stream_id] = (request, bytearray())
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _on_data(self, event: DataReceived) -> None:
        self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        pending = self._bodies.get(event.stream_id)
        if pending is None:
            return
        body = pending[1]
        body.extend(event.data or b"")
        self._held += len(event.data or b"")
        if self._held > self._w.max_body:
            del self._bodies[event.stream_id]
            self._held -= len(body)
            response = H2Response(self, event.stream_id)
            self._responses[event.stream_id] = response
            self._spawn(event.stream_id, respond(response, 413, "Request body too large\n"))

    def _dispatch(self, stream_id: int, request: HttpRequest) -> None:
        response = H2Response(self, stream_id)
        self._responses[stream_id] = response
        self._spawn(stream_id, self._w.app(request, response))

    def _spawn(self, stream_id: int, work: Any) -> None:
        task = asyncio.ensure_future(self._run(stream_id, work))
        self._w.tasks.add(task)
        task.add_done_callback(self._w.tasks.discard)

    async def _run(self, stream_id: int, work: Any) -> None:
        response = self._responses[stream_id]
        try:
            await work
            if not response.started:
                await respond(response, 500, "No response\n")
            await response.end()
        except ConnectionError:
            pass
        except Exception:
            log.exception("http2_handler_failed", remote=self._remote)
            self.reset(stream_id)
        finally:
            response.closed.set()
            self._responses.pop(stream_id, None)
            self._flush()
            if not self._responses:
                if self._goaway:
                    self._close_transport()
                else:
                    self._arm()

    def reset(self, stream_id: int, code: ErrorCodes = ErrorCodes.INTERNAL_ERROR) -> None:
        """Reset one stream (its writer wakes and stops)."""
        try:
            self._h2.reset_stream(stream_id, code)
        except H2Error:
            pass
        self._flush()
        self._window.set()

    # ------------------------------------------------------------ writing

    def call(self, action: Any) -> Any:
        """Run ``action(h2)`` and send what it produced; h2's stream errors mean the client
        is gone for that stream (ConnectionError)."""
        try:
            result = action(self._h2)
        except H2Error as exc:
            raise ConnectionError(str(exc)) from None
        self._flush()
        return result

    async def window_changed(self, response: H2Response) -> None:
        """Wait for a WINDOW_UPDATE, new settings, a reset, or the connection's end."""
        self._window.clear()
        waits = {asyncio.ensure_future(response.closed.wait()),
                 asyncio.ensure_future(self._window.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def drain(self, response: H2Response) -> None:
        """Wait while the socket's buffer is over its mark (or until the stream is reset)."""
        while not self._can_write.is_set() and not response.closed.is_set():
            waits = {asyncio.ensure_future(self._can_write.wait()),
                     asyncio.ensure_future(response.closed.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    # ------------------------------------------------------------ closing

    def _arm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(IDLE_SECS, self.close_gracefully)

    def close_gracefully(self) -> None:
        """GOAWAY: no new streams; the transport closes once the open ones end."""
        if not self._goaway:
            self._goaway = True
            try:
                self._h2.close_connection()
            except H2Error:
                pass
            self._flush()
        if not self._responses:
            self._close_transport()

    def _close_transport(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
