"""The skeleton every SSE-streaming model provider shares, with per-event hooks.

One model call is always the same steps: build the request, POST it (with
retries on 429/5xx/connection errors, :func:`open_stream`), read the
Server-Sent Events, decode each ``data`` as JSON, turn it into provider events,
and map failures to a scrubbed :class:`ProviderError` (an error object sent
inside the 200 stream, or a stream that broke after it started). An
:class:`SseProvider` subclass says only what differs: the request
(:meth:`~SseProvider.request_body`, :meth:`~SseProvider.request_headers`) and a
fresh :class:`StreamReader` per call that understands its events.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import orjson

from services.agent.conversation import Message
from services.agent.providers.base import ProviderEvent, ToolSpec
from services.agent.providers.http import (
    RetryPolicy,
    iter_sse,
    new_client,
    open_stream,
    stream_error,
    stream_interrupted,
)

__all__ = ["SentError", "SseProvider", "StreamReader"]


class SentError(Exception):
    """Raised by a reader hook: the provider sent ``error`` inside the 200 stream."""

    def __init__(self, error: Any) -> None:
        super().__init__("provider sent an error event")
        self.error = error


class StreamReader(ABC):
    """The provider-specific half of one streamed reply; a new one for every call.

    It holds what the reply has said so far (tool-call fragments, usage, the
    stop reason) and turns each decoded event into provider events.
    """

    #: A raw ``data`` value (stripped) that ends the reply before any JSON decoding.
    end_data: ClassVar[str | None] = None
    #: Set by :meth:`on_event` when the provider signalled the end of the reply.
    done: bool = False

    @abstractmethod
    def on_event(self, event: str, payload: dict[str, Any]) -> Iterator[ProviderEvent]:
        """Provider events for one SSE event (``payload`` is its decoded JSON object).

        Raise :class:`SentError` for an error the provider reported in the stream.
        """

    @abstractmethod
    def finish(self) -> Iterator[ProviderEvent]:
        """The events after the stream ended: what was held back, then ``StreamDone``."""


class SseProvider(ABC):
    """A provider whose API answers one POST with a stream of JSON Server-Sent Events."""

    #: The provider's name in logs and error messages (a class attribute of each provider).
    name: str

    def __init__(self, model: str, url: str, *, api_key: str, timeout_secs: float,
                 retry: RetryPolicy | None, client: httpx.AsyncClient | None) -> None:
        self.model = model
        self._api_key = api_key
        self._url = url
        self._retry = retry or RetryPolicy()
        self._client = client or new_client(timeout_secs)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    @abstractmethod
    def request_body(self, system: str, messages: list[Message],
                     tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body of one streaming call."""

    @abstractmethod
    def request_headers(self) -> dict[str, str]:
        """The provider's own headers (authentication, API version)."""

    @abstractmethod
    def new_reader(self) -> StreamReader:
        """A reader for one reply."""

    async def stream(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> AsyncIterator[ProviderEvent]:
        """Stream one model call's events; raises :class:`ProviderError`."""
        body = self.request_body(system, messages, tools)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   **self.request_headers()}
        secrets = (self._api_key,)
        reader = self.new_reader()
        async with open_stream(self._client, self.name, self._url, headers, body,
                               self._retry, secrets) as response:
            try:
                async for event, data in iter_sse(response):
                    if reader.end_data is not None and data.strip() == reader.end_data:
                        break
                    try:
                        payload = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        continue  # keep-alive noise some servers send
                    if not isinstance(payload, dict):
                        continue
                    try:
                        for ev in reader.on_event(event, payload):
                            yield ev
                    except SentError as exc:
                        raise stream_error(self.name, exc.error, secrets) from None
                    if reader.done:
                        break
            except httpx.HTTPError as exc:
                raise stream_interrupted(self.name, exc, secrets) from None
        for ev in reader.finish():
            yield ev
