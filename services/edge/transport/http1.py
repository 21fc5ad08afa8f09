"""The first protocol of every connection on the gateway's port: HTTP/1.1 (``h11``), or a switch.

A connection starts here and may leave at once:

- TLS negotiated ``h2`` (ALPN), or the first bytes are HTTP/2's preface (h2c prior
  knowledge, ``curl --http2-prior-knowledge``): it becomes an
  :class:`~.http2.Http2Connection`;
- a request with ``Upgrade: h2c`` (and ``HTTP2-Settings``): 101, then HTTP/2, that
  request answered on stream 1 (RFC 7540 §3.2);
- a WebSocket upgrade on ``/acp``: the bytes read so far are handed to the
  WebSocket server (``Wiring.websocket``), which does the handshake — and the
  relay — exactly as before this front door existed.

Everything else is HTTP/1.1 with keep-alive, one request at a time (a pipelined
one waits; a client that sends more than :data:`MAX_UNREAD` meanwhile is cut
off). Timers bound a slow request (:data:`REQUEST_SECS`) and an idle connection
(:data:`IDLE_SECS`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, cast

import h11

from services.common.logs import get_logger
from services.edge.transport.exchange import Headers, HttpRequest, respond
from services.edge.transport.h1_framing import ChunkedCheck, head_problem, request_head
from services.edge.transport.h1_response import H1Response
from services.edge.transport.http2 import Http2Connection
from services.edge.transport.wiring import Wiring, peer_name

__all__ = ["H1Response", "Http1Connection"]

#: HTTP/2's connection preface (RFC 9113 §3.4).
H2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: The largest request head (request line and headers).
MAX_HEAD: Final = 64 * 1024
#: Bytes a client may send while its request is being answered (pipelining, garbage).
MAX_UNREAD: Final = 1024 * 1024
#: Seconds a request may take to arrive whole once it started.
REQUEST_SECS: Final = 30.0
#: Seconds an HTTP/1.1 connection waits for its next request.
IDLE_SECS: Final = 75.0
_WRITE_HIGH: Final = 64 * 1024

log = get_logger("edge.http")


def _head(event: h11.Request) -> bytes:
    """The request head of ``event`` as the client sent it (header names' case kept)."""
    return request_head(event.method, event.target, event.http_version,
                        list(event.headers.raw_items()))


class Http1Connection(asyncio.Protocol):
    """One connection, as long as it speaks HTTP/1.1."""

    def __init__(self, wiring: Wiring) -> None:
        self._w = wiring
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._transport: asyncio.Transport | None = None
        self._remote = "?"
        self._tls = False
        self._first = b""  # bytes held until it is clear they are no HTTP/2 preface
        self._sniffed = False
        self._left = False  # handed to HTTP/2 or WebSocket: this object is done
        self._request: HttpRequest | None = None
        self._body = bytearray()
        self._h2c: bytes | None = None
        self._response: H1Response | None = None
        self._unread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closing = False
        self._chunks: ChunkedCheck | None = None  # the chunked body being read

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """ALPN ``h2`` switches at once; otherwise wait for the first request."""
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._remote = peer_name(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        self._tls = ssl_object is not None
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
            self._to_http2(b"")
            return
        self._transport.set_write_buffer_limits(high=_WRITE_HIGH)
        self._w.connections.add(self)
        self._arm(REQUEST_SECS)

    def data_received(self, data: bytes) -> None:
        """Sniff the preface once, then feed h11."""
        if self._left:
            return
        if not self._sniffed:
            self._first += data
            if len(self._first) < len(H2_PREFACE) and H2_PREFACE.startswith(self._first):
                return
            self._sniffed = True
            data, self._first = self._first, b""
            if data.startswith(H2_PREFACE):
                self._to_http2(data)
                return
        if self._response is not None:
            self._unread += len(data)
            if self._unread > MAX_UNREAD:
                self.abort()
                return
        if self._chunks is not None and self._response is None:
            if not self._chunks.feed(data):
                self._unframed(self._chunks.problem)
                return
            if self._chunks.done:
                self._chunks = None
        try:
            self._h11.receive_data(data)
        except RuntimeError:  # data after the peer closed: nothing to do with it
            return
        self._process()

    def eof_received(self) -> bool | None:
        """The client closed its side: the connection closes (as most servers do, a
        half-close is taken as the client gone: an SSE reader that left is noticed now,
        not at the next keepalive)."""
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        """The request in progress learns its client is gone."""
        self._w.connections.discard(self)
        self._cancel_timer()
        if self._response is not None:
            self._response.closed.set()
        self._can_write.set()

    def pause_writing(self) -> None:
        """The socket's buffer is full: the writer waits."""
        self._can_write.clear()

    def resume_writing(self) -> None:
        """The socket took the buffer."""
        self._can_write.set()

    # ------------------------------------------------------------ reading

    def _process(self) -> None:
        while self._response is None and not self._left:
            if self._h11.their_state is h11.IDLE \
                    and (why := head_problem(self._h11.trailing_data[0])):
                self._unframed(why)
                return
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:  # its text quotes the client: not echoed
                self._unframed(type(exc).__name__, exc.error_status_hint)
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                if self._on_request(event):
                    return
            elif isinstance(event, h11.Data):
                self._body.extend(event.data)
                if len(self._body) > self._w.max_body:
                    self._refuse(413, "Request body too large\n")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._on_end()
            elif isinstance(event, h11.ConnectionClosed):
                self._close()
                return

    def _on_request(self, event: h11.Request) -> bool:
        """A request head arrived; True when this connection left HTTP/1.1 for it."""
        self._arm(REQUEST_SECS)
        headers = Headers((k.decode("latin-1"), v.decode("latin-1"))
                          for k, v in event.headers.raw_items())
        request = HttpRequest(event.method.decode("ascii", "replace"),
                              event.target.decode("latin-1"), headers,
                              http_version=event.http_version.decode("ascii", "replace"),
                              remote=self._remote, tls=self._tls)
        self._request, self._body, self._h2c = request, bytearray(), None
        # (A response still in the socket's buffer would be lost: then answered here; so is
        # everything with an h11 whose unparsed bytes cannot be read.)
        if self._w.handoff is not None and not self._tls and self._transport is not None \
                and not self._transport.get_write_buffer_size() \
                and hasattr(self._h11, "_receive_buffer") \
                and (owner := self._w.handoff.owner(request)):
            self._hand_off(event, owner)  # a sibling worker's connection
            return True
        upgrade = headers.tokens("upgrade")
        if "websocket" in upgrade and request.path in self._w.websocket_paths:
            self._to_websocket(event)
            return True
        settings = headers.get("http2-settings")
        if "h2c" in upgrade and not self._tls and settings is not None:
            self._h2c = settings.strip().encode("latin-1")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._w.max_body:
            self._refuse(413, "Request body too large\n")
            return True
        if headers.get("transfer-encoding") is not None:  # head_problem: chunked, then
            self._chunks = ChunkedCheck()
            if not self._chunks.feed(self._h11.trailing_data[0]):
                self._unframed(self._chunks.problem)
                return True
            self._chunks = None if self._chunks.done else self._chunks
        if self._h11.they_are_waiting_for_100_continue:
            self.send(h11.InformationalResponse(status_code=100, headers=[]))
        return False

    def _on_end(self) -> None:
        request = self._request
        assert request is not None
        request.body = bytes(self._body)
        self._body = bytearray()
        self._cancel_timer()
        if self._h2c is not None:
            self._to_h2c(self._h2c, request)
            return
        response = self._response = H1Response(self)
        self._unread = 0
        task = asyncio.ensure_future(self._run(request, response))
        self._w.tasks.add(task)
        task.add_done_callback(self._w.tasks.discard)

    async def _run(self, request: HttpRequest, response: H1Response) -> None:
        try:
            await self._w.app(request, response)
            if not response.started:
                await respond(response, 500, "No response\n")
            await response.end()
        except ConnectionError:
            pass
        except Exception:
            log.exception("http1_handler_failed", remote=self._remote)
            self.abort()
            return
        self._next_cycle()

    def _next_cycle(self) -> None:
        self._response = None
        if self._transport is None or self._transport.is_closing():
            return
        if self._closing or self._h11.our_state is not h11.DONE \
                or self._h11.their_state is not h11.DONE:
            self._close()
            return
        self._h11.start_next_cycle()
        self._arm(IDLE_SECS)
        self._process()

    # ------------------------------------------------------------ switching

    def _to_http2(self, data: bytes, upgrade: tuple[bytes, HttpRequest] | None = None) -> None:
        assert self._transport is not None
        self._left = True
        self._w.connections.discard(self)
        self._cancel_timer()
        h2 = Http2Connection(self._w)
        self._transport.set_protocol(h2)
        h2.start(self._transport, data, upgrade)

    def _to_h2c(self, settings: bytes, request: HttpRequest) -> None:
        """Answer ``Upgrade: h2c`` with 101 and go on in HTTP/2 (request on stream 1)."""
        self.send(h11.InformationalResponse(
            status_code=101, headers=[("connection", "Upgrade"), ("upgrade", "h2c")]))
        rest, _ = self._h11.trailing_data
        self._to_http2(bytes(rest), upgrade=(settings, request))

    def _to_websocket(self, event: h11.Request) -> None:
        """Hand the upgrade request, as it came, to the WebSocket server."""
        try:
            while (nxt := self._h11.next_event()) not in (h11.PAUSED, h11.NEED_DATA):
                if isinstance(nxt, h11.ConnectionClosed):
                    break
        except h11.RemoteProtocolError:
            pass  # the WebSocket server reads the request itself and answers what is wrong
        rest, _ = self._h11.trailing_data
        assert self._transport is not None
        self._leave()
        self._w.websocket(self._transport, _head(event) + bytes(rest))

    def _hand_off(self, event: h11.Request, owner: int) -> None:
        """Give the connection to the sibling worker ``owner``: the request head as it
        came, then every byte read after it (h11 holds them unparsed until asked)."""
        rest = bytes(self._h11._receive_buffer)  # h11 exposes it only once switched
        assert self._transport is not None and self._w.handoff is not None
        self._leave()
        self._w.handoff.hand(self._transport, _head(event) + rest, owner)

    def _leave(self) -> None:
        self._left = True
        self._w.connections.discard(self)
        self._cancel_timer()

    # ------------------------------------------------------------ writing

    def send(self, event: Any) -> None:
        """Write one h11 event; ConnectionError once the socket is gone."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionError("connection closed")
        try:
            data = self._h11.send(event)
        except h11.LocalProtocolError as exc:
            raise ConnectionError(str(exc)) from None
        if data:
            transport.write(data)

    async def drain(self, response: H1Response) -> None:
        """Wait while the socket's buffer is over its mark; ConnectionError once gone."""
        while not self._can_write.is_set():
            await self._can_write.wait()
        if response.closed.is_set():
            raise ConnectionError("connection closed")

    # ------------------------------------------------------------ closing

    def _refuse(self, status: int, text: str) -> None:
        """Answer a request that cannot be read on (then close)."""
        self._closing = True
        response = self._response = H1Response(self)
        task = asyncio.ensure_future(respond(response, status, text,
                                             headers=[("connection", "close")]))
        task.add_done_callback(lambda _: self._close())

    def _unframed(self, why: str | None, hint: int = 400) -> None:
        """A request whose framing is wrong or ambiguous: 400 (431 for a head too large),
        then close; nothing after it is read (RFC 9112 §6.3)."""
        log.info("http1_unframed", remote=self._remote, why=why)
        self._chunks = None
        self._refuse(431 if hint == 431 else 400, "Bad request\n")

    def close_gracefully(self) -> None:
        """Close once the response in progress (if any) ended."""
        self._closing = True
        if self._response is None:
            self._close()

    def _arm(self, secs: float) -> None:
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(secs, self._timed_out)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        if self._response is None:
            self._close()

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        """Close the socket at once (what is buffered is dropped)."""
        if self._transport is not None:
            self._transport.abort()
