"""The web console's static files: ``GET /`` and ``GET /console/<file>``.

The console is a plain page of ES modules and CSS shipped in the package
(``console_files/``, package data): no build step, no CDN, works offline. It is a
client of the gateway's own ``/acp`` like any other (the token travels as the
``bearer.<token>`` WebSocket subprotocol entry; ``services.edge.transport.auth``), so the
files themselves need no token: they hold nothing but code.

What may be served is decided once, when the files are first asked for: every
regular file under ``console_files/`` (no symlink followed) of a known type, by
its relative name. A request names a file by that exact key or gets 404 — a
``..``, an encoded slash or a symlink never reaches the disk, so no path outside
the directory can be read. Every answer carries a strict Content-Security-Policy
(scripts and styles from this origin only, no inline script, ``connect-src
'self'``), ``nosniff``, ``no-referrer``, no framing, and an ETag with
``no-cache`` (revalidated each load: an upgrade's new files show at once).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services.edge.transport.exchange import HttpRequest, HttpResponse, respond

__all__ = ["ASSET_DIR", "CONSOLE_DIR", "SECURITY_HEADERS", "Asset", "ConsoleFiles", "load_assets"]

#: Where the console's files are shipped (package data of ``services.edge.transport``).
CONSOLE_DIR: Final = Path(__file__).with_name("console_files")
#: The URL folder of the assets, below the gateway's ``path_prefix``.
ASSET_DIR: Final = "/console/"
INDEX: Final = "index.html"
_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
}
_CSP: Final = "; ".join((
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
    "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"))
#: Headers of every console answer (404s included).
SECURITY_HEADERS: Final = (
    ("content-security-policy", _CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
)


@dataclass(frozen=True)
class Asset:
    """One servable file: its bytes, content type and ETag."""

    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path = CONSOLE_DIR) -> dict[str, Asset]:
    """Every regular file of a known type under ``root`` by its relative POSIX name (blocking:
    run it in a thread). Symlinks are skipped, so nothing outside ``root`` is ever read."""
    found: dict[str, Asset] = {}
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.suffix not in _TYPES:
            continue
        if any(p.is_symlink() for p in path.relative_to(root).parents if p != Path(".")):
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        found[path.relative_to(root).as_posix()] = Asset(body, _TYPES[path.suffix], etag)
    return found


class ConsoleFiles:
    """The console's routes: ``<prefix>/`` is the page, ``<prefix>/console/<name>`` its files."""

    def __init__(self, prefix: str = "", root: Path = CONSOLE_DIR) -> None:
        self._prefix = prefix
        self._root = root
        self._assets: dict[str, Asset] | None = None
        self._lock = asyncio.Lock()

    async def _files(self) -> dict[str, Asset]:
        async with self._lock:  # read once, off the event loop
            if self._assets is None:
                self._assets = await asyncio.to_thread(load_assets, self._root)
            return self._assets

    def name_of(self, path: str) -> str | None:
        """The asset key a request path names, or None when it names none of ours."""
        for base in {"", self._prefix}:
            if path == f"{base}/":
                return INDEX
            if path.startswith(base + ASSET_DIR):
                return path[len(base + ASSET_DIR):]
        return None

    async def serve(self, request: HttpRequest, response: HttpResponse) -> None:
        """Answer ``request`` from the console's files, or 404 / 405."""
        name = self.name_of(request.path)
        asset = (await self._files()).get(name) if name else None
        if asset is None:
            await respond(response, 404, "Not Found\n", headers=SECURITY_HEADERS)
            return
        if request.method != "GET":
            await respond(response, 405, "Method Not Allowed\n",
                          headers=[*SECURITY_HEADERS, ("allow", "GET")])
            return
        headers = [*SECURITY_HEADERS, ("cache-control", "no-cache"), ("etag", asset.etag)]
        match = request.headers.get("if-none-match")
        if match is not None and asset.etag in (m.strip() for m in match.split(",")):
            await respond(response, 304, headers=headers)
            return
        await respond(response, 200, asset.body, asset.content_type, headers=headers)
