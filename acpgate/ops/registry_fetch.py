"""Reading the ACP Registry: its public https URL, another https URL, or a local file.

Bounded every way: https only (redirects too), a deadline for the whole download, and a
size limit applied while reading, so a hostile or broken source costs at most that. This
is blocking code for the command line (no event loop runs there); on a loop, call it
through ``asyncio.to_thread``. Every failure is a :class:`RegistryError` saying what to
do — offline, a copy of ``registry.json`` given with ``--registry FILE`` does the same.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from acpgate import __version__
from acpgate.ops.registry import Registry, RegistryError, parse_registry

__all__ = ["DEFAULT_REGISTRY_URL", "FETCH_TIMEOUT_SECS", "MAX_REGISTRY_BYTES", "read_registry"]

DEFAULT_REGISTRY_URL = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"
#: The whole download, connection included, must finish within this.
FETCH_TIMEOUT_SECS = 20.0
#: The registry is tens of kilobytes; anything past this is not one.
MAX_REGISTRY_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024


class _HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to another https URL."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: Any, newurl: str) -> urllib.request.Request | None:
        if not newurl.lower().startswith("https://"):
            raise RegistryError(f"the registry redirected to {newurl!r}, which is not https")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _bounded_read(stream: IO[bytes], where: str, deadline: float | None = None) -> bytes:
    """At most :data:`MAX_REGISTRY_BYTES` of ``stream`` (more is an error), before ``deadline``."""
    parts: list[bytes] = []
    size = 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
        if size > MAX_REGISTRY_BYTES:
            raise RegistryError(f"{where}: larger than {MAX_REGISTRY_BYTES // (1024 * 1024)} MiB: "
                                "not an ACP registry")
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the download took too long")
        parts.append(chunk)
    return b"".join(parts)


def _fetch(url: str) -> bytes:
    offline = f"; use --registry FILE with a copy of {DEFAULT_REGISTRY_URL}"
    opener = urllib.request.build_opener(_HttpsOnlyRedirects())
    request = urllib.request.Request(url, headers={"User-Agent": f"acpgate/{__version__}",
                                                   "Accept": "application/json"})
    deadline = time.monotonic() + FETCH_TIMEOUT_SECS
    try:
        with opener.open(request, timeout=FETCH_TIMEOUT_SECS) as response:
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > MAX_REGISTRY_BYTES:
                raise RegistryError(f"{url}: larger than {MAX_REGISTRY_BYTES // (1024 * 1024)} "
                                    "MiB: not an ACP registry")
            return _bounded_read(response, url, deadline)
    except urllib.error.HTTPError as exc:
        raise RegistryError(f"could not fetch the registry from {url}: HTTP {exc.code}"
                            f"{offline}") from None
    except urllib.error.URLError as exc:
        raise RegistryError(f"could not fetch the registry from {url}: {exc.reason}"
                            f"{offline}") from None
    except (OSError, TimeoutError) as exc:
        raise RegistryError(f"could not fetch the registry from {url}: {exc or 'timed out'}"
                            f"{offline}") from None


def _read_file(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return _bounded_read(fh, str(path))
    except OSError as exc:
        raise RegistryError(f"cannot read the registry file {path}: {exc.strerror or exc}") \
            from None


def read_registry(source: str | None = None) -> Registry:
    """The registry at ``source`` (an https URL or a file path; None: the public one)."""
    source = source or DEFAULT_REGISTRY_URL
    if source.lower().startswith("https://"):
        data, where = _fetch(source), source
    elif "://" in source:
        raise RegistryError(f"--registry {source!r}: only https:// URLs or a local file")
    else:
        path = Path(source).expanduser()
        data, where = _read_file(path), str(path)
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RegistryError(f"{where}: not JSON: {exc}") from None
    return parse_registry(raw, where)
