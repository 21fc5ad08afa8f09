"""A small Streamable HTTP client for the transport's own tests (httpx, HTTP/1.1 or HTTP/2).

It does only what the RFD describes and lets a test do each step itself: POST a
message (status back), open a stream (events as they come, with their ids),
cut a stream, DELETE. The official SDK clients are tested in
``test_py_sdk_remote.py`` / ``test_ts_sdk_remote.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


@dataclass
class SseEvent:
    """One SSE event: its id and type (when given) and its data, decoded."""

    id: str | None
    event: str | None
    data: Any


@dataclass
class Stream:
    """An open SSE stream: its response and the events parsed so far."""

    response: httpx.Response
    lines: AsyncIterator[str]
    comments: list[str] = field(default_factory=list)

    async def next(self) -> SseEvent:
        """The next event (comments are collected in ``comments``)."""
        eid = kind = None
        data: list[str] = []
        async for line in self.lines:
            if line == "":
                if data:
                    return SseEvent(eid, kind, json.loads("\n".join(data)))
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                eid = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)
        raise EOFError("stream ended")

    async def until(self, pred: Any) -> list[SseEvent]:
        """Events up to and including the first one ``pred(data)`` holds for."""
        out = []
        while True:
            event = await self.next()
            out.append(event)
            if pred(event.data):
                return out


class RemoteClient:
    """One Streamable HTTP connection (after :meth:`initialize`)."""

    def __init__(self, url: str, token: str | None = None, *, http2: bool = False,
                 headers: dict[str, str] | None = None, verify: Any = True) -> None:
        self.url = url
        self.http = httpx.AsyncClient(http1=not http2, http2=http2, verify=verify,
                                      timeout=httpx.Timeout(30.0, read=None))
        self.headers = dict(headers or {})
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.connection_id: str | None = None
        self.init_response: httpx.Response | None = None

    async def aclose(self) -> None:
        await self.http.aclose()

    def _headers(self, session: str | None = None, **extra: str) -> dict[str, str]:
        out = dict(self.headers)
        if self.connection_id is not None:
            out["Acp-Connection-Id"] = self.connection_id
        if session is not None:
            out["Acp-Session-Id"] = session
        out.update(extra)
        return out

    async def initialize(self, params: str = "") -> Any:
        """POST initialize; keeps the connection id; returns the JSON answer."""
        r = await self.http.post(self.url + params, json=INIT, headers=self.headers)
        assert r.status_code == 200, (r.status_code, r.text)
        self.init_response = r
        self.connection_id = r.headers["Acp-Connection-Id"]
        return r.json()

    async def post(self, message: Any, session: str | None = None, **extra: str
                   ) -> httpx.Response:
        """POST one message (``session``: its Acp-Session-Id)."""
        return await self.http.post(self.url, content=json.dumps(message).encode(),
                                    headers=self._headers(session, **{
                                        "Content-Type": "application/json", **extra}))

    @asynccontextmanager
    async def stream(self, session: str | None = None, last_event_id: str | None = None,
                     **extra: str) -> AsyncIterator[Stream]:
        """An SSE stream (asserts 200); leaving the block cuts it."""
        headers = self._headers(session, Accept="text/event-stream", **extra)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        async with self.http.stream("GET", self.url, headers=headers) as r:
            assert r.status_code == 200, (r.status_code, (await r.aread()).decode())
            yield Stream(r, r.aiter_lines())

    async def get(self, session: str | None = None, **extra: str) -> httpx.Response:
        """A GET whose answer is expected to be an error (read whole)."""
        headers = self._headers(session, **{"Accept": "text/event-stream", **extra})
        return await self.http.get(self.url, headers=headers)

    async def delete(self) -> httpx.Response:
        return await self.http.delete(self.url, headers=self._headers())
