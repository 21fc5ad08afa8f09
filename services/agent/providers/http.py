"""HTTP plumbing shared by the remote providers: retries, SSE parsing, secret scrubbing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from services.agent.providers.base import ProviderError
from services.common.logs import get_logger

log = get_logger("agent.providers")

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_MAX_RETRY_AFTER_SECS = 30.0
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
_KEY_LIKE = re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}")
_HEADER_SECRET = re.compile(r"(?i)((?:x-api-key|authorization|api[-_]key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+")


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove API keys and Authorization values from a message meant for people."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    text = _BEARER.sub(r"\1<redacted>", text)
    text = _HEADER_SECRET.sub(r"\1<redacted>", text)
    return _KEY_LIKE.sub("<redacted>", text)


def new_client(timeout_secs: float) -> httpx.AsyncClient:
    """The HTTP client a provider owns when none is passed in.

    The connect timeout is capped at 15 s: an unreachable host should fail (and
    be retried) long before a slow model's read timeout would fire.
    """
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_secs, connect=min(timeout_secs, 15.0)))


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a request that failed transiently."""

    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), _MAX_RETRY_AFTER_SECS)
            except ValueError:
                pass
        return min(self.backoff_base * (2**attempt), self.backoff_max)


def _error_detail(body: bytes) -> str:
    """The provider's own error message from a JSON error body, else the raw text."""
    import orjson

    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")[:300].strip()
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("type") or err)[:300]
        return str(err)[:300]
    return str(data)[:300]


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient,
    provider: str,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    retry: RetryPolicy,
    secrets: tuple[str, ...],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[httpx.Response]:
    """POST ``body`` and yield a 2xx streaming response, retrying 429/5xx/connection errors.

    Retries happen only before any byte of the stream is consumed, so a retry
    never duplicates output.
    """
    attempt = 0
    while True:
        try:
            request = client.build_request("POST", url, headers=headers, json=body)
            response = await client.send(request, stream=True)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            if attempt < retry.max_retries:
                wait = retry.delay(attempt, None)
                log.warning("provider_retry", provider=provider, reason=type(exc).__name__,
                            attempt=attempt + 1, wait=wait)
                attempt += 1
                await sleep(wait)
                continue
            kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
            raise ProviderError(
                scrub(f"{provider} request {kind} after {attempt + 1} attempt(s): {exc}", secrets),
                f"{provider} request {kind} ({type(exc).__name__})",
            ) from None
        if response.status_code < 300:
            try:
                yield response
            finally:
                await response.aclose()
            return
        raw = await response.aread()
        await response.aclose()
        if response.status_code in RETRY_STATUSES and attempt < retry.max_retries:
            wait = retry.delay(attempt, response.headers.get("retry-after"))
            log.warning("provider_retry", provider=provider, status=response.status_code,
                        attempt=attempt + 1, wait=wait)
            attempt += 1
            await sleep(wait)
            continue
        detail = _error_detail(raw)
        raise ProviderError(
            scrub(f"{provider} API error {response.status_code}: {detail}", secrets),
            f"{provider} API error {response.status_code}",
        )


def stream_error(provider: str, error: Any, secrets: tuple[str, ...]) -> ProviderError:
    """An ``error`` object the provider sent inside a 200 stream, as a scrubbed ProviderError."""
    message = error.get("message") if isinstance(error, dict) else error
    return ProviderError(scrub(f"{provider} stream error: {message}", secrets),
                         f"{provider} stream error")


def stream_interrupted(provider: str, exc: httpx.HTTPError,
                       secrets: tuple[str, ...]) -> ProviderError:
    """A stream that broke after it started (never retried: output was already streamed)."""
    return ProviderError(scrub(f"{provider} stream interrupted: {exc}", secrets),
                         f"{provider} stream interrupted ({type(exc).__name__})")


async def iter_sse(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """Yield ``(event, data)`` pairs of a Server-Sent Events stream."""
    event = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event or "message", "\n".join(data)
