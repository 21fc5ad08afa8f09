"""The web console's static files on a real ``acpgate serve``.

``GET /`` is the page and ``GET /console/<file>`` its ES modules, CSS and icon —
shipped in the package, served without a token, each with its content type, a
strict Content-Security-Policy (no inline script; ``connect-src 'self'``),
``nosniff``, ``no-referrer`` and an ETag (``no-cache``: a 304 on a match).
Anything else is 404, and only ``GET`` is served. Under ``[gateway] path_prefix``
the console lives beside ``/acp`` there. The bytes served are the package's files.
"""

from __future__ import annotations

import asyncio
import http.client
from pathlib import Path

import pytest

from services.edge.transport.console import CONSOLE_DIR
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def fetch(port: int, path: str, method: str = "GET",
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, lowercased headers, body) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def assert_hardened(headers: dict[str, str]) -> None:
    """The security headers every console answer carries."""
    csp = headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'self'",
                      "frame-ancestors 'none'", "base-uri 'none'"):
        assert directive in csp, csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"


async def test_console_files_types_headers_and_404(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        get = lambda *a, **k: asyncio.to_thread(fetch, gw.port, *a, **k)  # noqa: E731
        status, headers, body = await get("/")
        assert status == 200
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert_hardened(headers)
        assert headers["cache-control"] == "no-cache"
        assert body == (CONSOLE_DIR / "index.html").read_bytes()
        assert b"<script>" not in body and b"onclick" not in body  # no inline script

        for path, ctype in (("/console/js/app.js", "text/javascript; charset=utf-8"),
                            ("/console/js/markdown.js", "text/javascript; charset=utf-8"),
                            ("/console/console.css", "text/css; charset=utf-8"),
                            ("/console/favicon.svg", "image/svg+xml")):
            status, headers, body = await get(path)
            assert (status, headers["content-type"]) == (200, ctype), path
            assert_hardened(headers)
            assert body == (CONSOLE_DIR / path.removeprefix("/console/")).read_bytes()

        # Revalidation: the same ETag answers 304 without the body.
        _, headers, _ = await get("/console/js/app.js")
        status, again, body = await get("/console/js/app.js",
                                        headers={"If-None-Match": headers["etag"]})
        assert (status, body) == (304, b"")
        assert again["etag"] == headers["etag"]

        for path in ("/console/", "/console/nope.js", "/index.html", "/console/js",
                     "/console/js/", "/favicon.ico", "/console/index.html/"):
            status, headers, _ = await get(path)
            assert status == 404, path
            assert_hardened(headers)
        status, headers, _ = await get("/console/js/app.js", "POST")
        assert (status, headers["allow"]) == (405, "GET")
        status, _, _ = await get("/", "DELETE")
        assert status == 405
        # The plain endpoints are as they were.
        assert (await get("/healthz"))[0] == 200


async def test_console_under_a_path_prefix(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw", gateway='path_prefix = "/gw"\n') as gw:
        status, headers, body = await asyncio.to_thread(fetch, gw.port, "/gw/")
        assert status == 200 and body == (CONSOLE_DIR / "index.html").read_bytes()
        assert_hardened(headers)
        # The page asks for its files relatively ("console/…"): beside /gw/acp.
        assert b'src="console/js/app.js"' in body
        status, _, _ = await asyncio.to_thread(fetch, gw.port, "/gw/console/js/acp.js")
        assert status == 200
