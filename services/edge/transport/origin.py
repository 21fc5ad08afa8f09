"""Browsers on ``/acp``: the ``Origin`` check and CORS (``[gateway] allowed_origins``).

A request that carries no ``Origin`` comes from no browser (the SDK clients,
curl, ``acpgate bridge``): it is not bound by this. A browser's request is
refused (403) unless its origin is listed; a listed origin gets CORS headers on
every answer — the headers it may send (auth, the two ACP ids, ``Last-Event-ID``)
and read (``Acp-Connection-Id``), and credentials, so the affinity cookie
travels — and its preflight (``OPTIONS``) is answered. Nothing is ever opened to
an origin that is not listed: no CORS header at all is sent for it.

The gateway's own console (``GET /``) is a browser page of the gateway's
origin: a WebSocket upgrade whose ``Origin`` is exactly the origin it was sent to
(scheme and ``Host``) is admitted too — but only when that host is an IP literal or
``localhost``, names no DNS record an attacker controls. (Streamable HTTP, which the
console does not use, keeps to the list.) A page on ``evil.example``
that rebinds its name to the gateway's address sends ``Origin`` and ``Host``
``evil.example`` alike; a DNS name is admitted only when ``allowed_origins`` lists it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from services.common.origins import OriginList, normalize_origin
from services.common.remote_transport import H_CONNECTION_ID, H_SESSION_ID

__all__ = ["OriginPolicy", "same_origin"]

_ALLOW_METHODS: Final = "GET, POST, DELETE, OPTIONS"
_ALLOW_HEADERS: Final = ", ".join(("authorization", "content-type", H_CONNECTION_ID.lower(),
                                   H_SESSION_ID.lower(), "last-event-id",
                                   "acp-protocol-version"))
#: Seconds a browser may cache a preflight answer.
_PREFLIGHT_MAX_AGE: Final = "600"


class OriginPolicy:
    """Whether a request's ``Origin`` may use ``/acp``, and the CORS headers it gets."""

    def __init__(self, allowed: Iterable[str], *, tls: bool = False) -> None:
        self._list = OriginList.parse(allowed)
        #: The gateway serves TLS: its own origin is ``https://<Host>``.
        self._tls = tls

    def admits(self, origin: str | None, host: str | None = None) -> bool:
        """No Origin (no browser): yes; a browser's: a listed origin, or — given ``host``, a
        WebSocket upgrade's ``Host`` (an IP literal or ``localhost``) — the gateway's own."""
        return (origin is None or self._list.admits(origin)
                or same_origin(origin, host, tls=self._tls))

    def cors(self, origin: str | None) -> list[tuple[str, str]]:
        """The CORS headers of an answer to ``origin`` (none without one)."""
        if origin is None:
            return []
        return [("access-control-allow-origin", origin),
                ("access-control-allow-credentials", "true"),
                ("access-control-expose-headers", f"{H_CONNECTION_ID}, {H_SESSION_ID}"),
                ("vary", "Origin")]

    def preflight(self, origin: str | None) -> list[tuple[str, str]]:
        """The headers of a 204 answer to ``OPTIONS`` from ``origin``."""
        return [*self.cors(origin), ("access-control-allow-methods", _ALLOW_METHODS),
                ("access-control-allow-headers", _ALLOW_HEADERS),
                ("access-control-max-age", _PREFLIGHT_MAX_AGE),
                ("allow", _ALLOW_METHODS)]


def _unbindable(hostname: str) -> bool:
    """An IP literal or ``localhost``: a host name no DNS answer can point elsewhere."""
    if hostname == "localhost":
        return True
    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        return False
    return True


def same_origin(origin: str, host: str | None, *, tls: bool) -> bool:
    """Whether ``origin`` is the origin of the gateway a request reached through ``host``
    (its ``Host`` header) with an IP-literal or ``localhost`` host name."""
    if not host:
        return False
    scheme = "https" if tls else "http"
    try:
        own = normalize_origin(f"{scheme}://{host.strip()}")
        theirs = normalize_origin(origin)
    except ValueError:
        return False
    hostname = urlsplit(own).hostname or ""
    return own == theirs and _unbindable(hostname)
