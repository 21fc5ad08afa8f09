"""``POST``/``GET``/``DELETE /acp``: Streamable HTTP exactly as the ACP RFD routes it.

| request | answer |
|---|---|
| POST ``initialize``, no ``Acp-Connection-Id`` | a new connection: 200, the JSON answer, ``Acp-Connection-Id`` and the affinity cookie |
| POST anything else | 202 once the dialect took it; its answer comes on a stream |
| GET, ``Accept: text/event-stream`` | the connection stream, or with ``Acp-Session-Id`` that session's |
| DELETE | the connection ends (its sessions released): 202 |

Errors: 415 (POST not ``application/json``), 400 (no JSON, no ``Acp-Connection-Id``,
a session-scoped method without ``Acp-Session-Id``, contradicting ids, a bad
``Last-Event-ID``), 501 (a batch), 406 (GET not accepting ``text/event-stream``),
404 (an ``Acp-Connection-Id`` this caller did not make — another token's too —, an
``Acp-Session-Id`` the caller cannot reach), 503 (connection limits, as for a
WebSocket). A connection id is only ever good with the token that made it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from services.common.logs import get_logger
from services.common.remote_transport import (
    CONTENT_TYPE_JSON,
    CONTENT_TYPE_SSE,
    H_CONNECTION_ID,
    H_SESSION_ID,
)
from services.edge.caller import Caller
from services.edge.params import MAX_SESSION_ID_CHARS
from services.edge.transport.admission import LiveConnections
from services.edge.transport.exchange import HttpRequest, HttpResponse, respond
from services.edge.transport.streamable.connection import ConnectionGone, StreamableConnection
from services.edge.transport.streamable.routing import CONNECTION, MAX_SESSION_STREAMS, classify
from services.edge.transport.streamable.sse import gap_event, pump
from services.edge.transport.streamable.streams import Budget, EventStream, Gap

__all__ = ["EndpointSettings", "StreamableEndpoint"]

#: How long ``initialize`` waits for the dialect's answer (it is answered in the POST).
INITIALIZE_WAIT_SECS: Final = 30.0
#: How long a closed connection's reader may still take to write what it took.
CLOSE_GRACE_SECS: Final = 5.0

log = get_logger("edge.http")

Headers = Sequence[tuple[str, str]]
#: Runs the dialect for one connection until it ends (``default_agent``: ``?agent=``).
RunDialect = Callable[[StreamableConnection, str], Awaitable[None]]
#: True when a session id names a session the caller may bring to a connection.
KnowsSession = Callable[[Caller, str], Awaitable[bool]]
#: A session's logged events with ``after < event id < before``, as lines, page by page.
ReadLog = Callable[[str, int, int], AsyncIterator[list[str]]]


@dataclass(frozen=True)
class EndpointSettings:
    """The bounds and timers of every Streamable HTTP connection."""

    idle_secs: float
    keepalive_secs: float
    slow_client_timeout: float
    budget: Callable[[], Budget] = Budget


def _json_type(value: str | None) -> bool:
    return value is not None and value.split(";", 1)[0].strip().lower() == CONTENT_TYPE_JSON


class StreamableEndpoint:
    """The Streamable HTTP connections of one gateway, and the three methods on ``/acp``."""

    def __init__(self, settings: EndpointSettings, live: LiveConnections[Any], *,
                 run_dialect: RunDialect, knows_session: KnowsSession,
                 cookie: Callable[[HttpRequest], Headers] = lambda r: (),
                 on_slow_client: Callable[[], None] = lambda: None,
                 stopping: asyncio.Event | None = None,
                 new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                 read_log: ReadLog | None = None) -> None:
        self.settings = settings
        #: Fills a session stream's gap from the session's event log (None: a gap is told).
        self._read_log = read_log
        #: Set when the gateway stops: no new connection from then on.
        self._stopping = stopping if stopping is not None else asyncio.Event()
        self._live = live
        self._run_dialect = run_dialect
        self._knows_session = knows_session
        self._cookie = cookie
        self._on_slow_client = on_slow_client
        #: Mints ``Acp-Connection-Id``s (with several edge workers, naming this one).
        self._new_id = new_id
        self.connections: dict[str, StreamableConnection] = {}
        #: The dialect tasks (a stop waits for them).
        self.tasks: set[asyncio.Task[None]] = set()
        #: Open SSE responses (a closed connection's too, until each has ended).
        self.readers = 0
        #: The most characters any connection ever had pending (diagnostics, tests).
        self.peak_pending_chars = 0


    async def handle(self, request: HttpRequest, response: HttpResponse, caller: Caller,
                     headers: Headers) -> None:
        """Answer one authenticated request to ``/acp`` (``headers``: CORS and the like)."""
        if request.method == "POST":
            await self._post(request, response, caller, headers)
        elif request.method == "GET":
            await self._get(request, response, caller, headers)
        else:
            await self._delete(request, response, caller, headers)

    # ------------------------------------------------------------ lookups

    def _connection(self, request: HttpRequest, caller: Caller
                    ) -> tuple[StreamableConnection | None, int, str]:
        cid = request.headers.get(H_CONNECTION_ID)
        if cid is None:
            return None, 400, f"Missing {H_CONNECTION_ID}\n"
        conn = self.connections.get(cid.strip())
        # Another token's connection is answered exactly like one that does not exist.
        if conn is None or conn.closed or conn.caller.principal != caller.principal:
            return None, 404, f"Unknown {H_CONNECTION_ID}\n"
        return conn, 0, ""

    async def _session(self, request: HttpRequest, conn: StreamableConnection
                       ) -> tuple[str | None, int, str]:
        """The request's ``Acp-Session-Id``, attached to ``conn`` (or why not)."""
        sid = request.headers.get(H_SESSION_ID)
        if sid is None:
            return None, 0, ""
        sid = sid.strip()
        if not sid or len(sid) > MAX_SESSION_ID_CHARS or not sid.isprintable():
            return None, 400, f"Invalid {H_SESSION_ID}\n"
        if sid in conn.router.attached:
            return sid, 0, ""
        if not await self._knows_session(conn.caller, sid) or conn.closed:
            return None, 404, f"Unknown {H_SESSION_ID}\n"
        if not conn.attach(sid):
            return None, 400, (f"Too many session streams on this connection "
                               f"(limit {MAX_SESSION_STREAMS})\n")
        return sid, 0, ""

    # ------------------------------------------------------------ POST

    async def _post(self, request: HttpRequest, response: HttpResponse, caller: Caller,
                    headers: Headers) -> None:
        if not _json_type(request.headers.get("content-type")):
            await respond(response, 415, f"Content-Type must be {CONTENT_TYPE_JSON}\n",
                          headers=headers)
            return
        try:
            message = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            await respond(response, 400, "Invalid JSON\n", headers=headers)
            return
        if isinstance(message, list):
            await respond(response, 501, "Batch JSON-RPC requests are not supported\n",
                          headers=headers)
            return
        if not isinstance(message, dict):
            await respond(response, 400, "A JSON-RPC message must be a JSON object\n",
                          headers=headers)
            return
        msg = classify(message)
        text = request.body.decode("utf-8")
        if request.headers.get(H_CONNECTION_ID) is None and msg.is_initialize:
            await self._initialize(request, response, caller, headers, text, msg)
            return
        conn, status, why = self._connection(request, caller)
        if conn is None:
            await respond(response, status, why, headers=headers)
            return
        if msg.is_initialize:
            await respond(response, 400, f"initialize opens a connection: POST it without "
                                         f"{H_CONNECTION_ID}\n", headers=headers)
            return
        refusal = conn.router.check(msg, request.headers.get(H_SESSION_ID))
        if refusal is not None:
            await respond(response, refusal.status, refusal.text + "\n", headers=headers)
            return
        sid, status, why = await self._session(request, conn)
        if status:
            await respond(response, status, why, headers=headers)
            return
        try:
            await conn.deliver(text, msg, sid)
        except ConnectionGone:
            await respond(response, 404, f"Unknown {H_CONNECTION_ID}\n", headers=headers)
            return
        await respond(response, 202, headers=headers)

    async def _initialize(self, request: HttpRequest, response: HttpResponse, caller: Caller,
                          headers: Headers, text: str, msg: Any) -> None:
        if self._stopping.is_set():
            await respond(response, 503, "acpgate is shutting down\n", headers=headers)
            return
        s = self.settings
        conn = StreamableConnection(self._new_id(), caller, idle_secs=s.idle_secs,
                                    budget=s.budget(), slow_client_timeout=s.slow_client_timeout,
                                    on_slow_client=lambda c: self._on_slow_client(),
                                    on_close=self._closed)
        refusal = await self._live.admit(conn, caller.token_id)  # the host's, across workers
        if refusal is not None:
            log.warning("http_" + refusal.reason, limit=refusal.limit)
            await respond(response, 503, refusal.body, headers=headers)
            return
        self.connections[conn.id] = conn
        agent = next((a.strip() for a in request.query.get("agent", []) if a.strip()), "")
        log.info("http_open", conn=conn.id[:8], remote=request.remote, agent=agent or None,
                 http=request.http_version)
        task = asyncio.create_task(self._serve(conn, agent))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        try:
            await conn.deliver(text, msg, None)
            answer = await conn.initialized(INITIALIZE_WAIT_SECS)
        except (ConnectionGone, TimeoutError):
            conn.close("initialize unanswered")
            await respond(response, 503, "initialize was not answered\n", headers=headers)
            return
        await respond(response, 200, orjson.dumps(answer), CONTENT_TYPE_JSON,
                      headers=[*headers, (H_CONNECTION_ID, conn.id), *self._cookie(request)])

    async def _serve(self, conn: StreamableConnection, agent: str) -> None:
        try:
            await self._run_dialect(conn, agent)
        except Exception:
            log.exception("http_connection_failed", conn=conn.id[:8])
        finally:
            conn.close("dialect ended")
            self.peak_pending_chars = max(self.peak_pending_chars, conn.budget.peak_chars)

    def _closed(self, conn: StreamableConnection) -> None:
        if self.connections.get(conn.id) is conn:
            del self.connections[conn.id]
        self._live.discard(conn)
        log.info("http_closed", conn=conn.id[:8], why=conn.close_reason, received=conn.received)

    # ------------------------------------------------------------ GET

    async def _get(self, request: HttpRequest, response: HttpResponse, caller: Caller,
                   headers: Headers) -> None:
        if CONTENT_TYPE_SSE not in request.headers.tokens("accept"):
            await respond(response, 406, f"Accept must include {CONTENT_TYPE_SSE}\n",
                          headers=headers)
            return
        conn, status, why = self._connection(request, caller)
        if conn is None:
            await respond(response, status, why, headers=headers)
            return
        sid, status, why = await self._session(request, conn)
        if status:
            await respond(response, status, why, headers=headers)
            return
        last: int | None = None
        if (raw := request.headers.get("last-event-id")) is not None:
            try:
                last = int(raw.strip())
            except ValueError:
                last = -1
            if last < 0:
                await respond(response, 400, "Last-Event-ID must be an event id of this "
                                             "stream\n", headers=headers)
                return
        stream = conn.stream(sid if sid is not None else CONNECTION)
        try:
            token, gap = stream.attach(last)
        except ValueError as exc:
            await respond(response, 400, f"{exc}\n", headers=headers)
            return
        fill = None
        if gap is not None and sid is not None and self._read_log is not None:
            fill = self._fill(sid, stream, gap)
        conn.reading(+1)
        self.readers += 1
        try:
            await response.start(200, [*headers, ("content-type", CONTENT_TYPE_SSE),
                                       ("cache-control", "no-cache"),
                                       ("x-accel-buffering", "no")])
            await self._read_out(conn, response, pump(
                stream, token, response, keepalive_secs=self.settings.keepalive_secs,
                written=conn.written, first=gap_event(gap) if gap is not None else b"",
                fill=fill))
            if not response.closed.is_set():
                await response.end()
        except ConnectionError:
            pass
        finally:
            stream.detach(token)
            conn.reading(-1)
            self.readers -= 1

    def _fill(self, sid: str, stream: EventStream, gap: Gap) -> AsyncIterator[list[str]] | None:
        """The session's logged events the gap lost: after the one the client's
        ``Last-Event-ID`` stood at, before the first the stream still holds (None when the
        stream no longer knows where that was: the gap is told)."""
        assert self._read_log is not None
        after = stream.session_point(gap.last_event_id)
        before = stream.session_after(gap.missed_to + 1)
        if after is None:
            return None
        if not after:
            after = stream.session_after(0) - 1
        return self._read_log(sid, after, before)

    async def _read_out(self, conn: StreamableConnection, response: HttpResponse,
                        pumping: Coroutine[Any, Any, None]) -> None:
        """Run a stream's pump; once the connection closed, a pump still stuck writing to a
        client that does not read gets :data:`CLOSE_GRACE_SECS`, then its response is cut."""
        task = asyncio.ensure_future(pumping)
        closed = asyncio.ensure_future(conn.wait_closed())
        try:
            await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                done, _ = await asyncio.wait({task}, timeout=CLOSE_GRACE_SECS)
                if not done:
                    response.abort()
            await task
        finally:
            closed.cancel()
            task.cancel()

    # ------------------------------------------------------------ DELETE

    async def _delete(self, request: HttpRequest, response: HttpResponse, caller: Caller,
                      headers: Headers) -> None:
        conn, status, why = self._connection(request, caller)
        if conn is None:
            await respond(response, status, why, headers=headers)
            return
        conn.close("delete")
        await respond(response, 202, headers=headers)

    # ------------------------------------------------------------ the gateway's stop

    def close_all(self, reason: str) -> None:
        """Close every connection now (their dialects release their sessions)."""
        for conn in list(self.connections.values()):
            conn.close(reason)
