"""Browsers on ``/acp``: the ``Origin`` check and CORS (``[gateway] allowed_origins``).

A request that carries no ``Origin`` comes from no browser (the SDK clients,
curl, ``acpgate bridge``): it is not bound by this. A browser's request is
refused (403) unless its origin is listed; a listed origin gets CORS headers on
every answer — the headers it may send (auth, the two ACP ids, ``Last-Event-ID``)
and read (``Acp-Connection-Id``), and credentials, so the affinity cookie
travels — and its preflight (``OPTIONS``) is answered. Nothing is ever opened to
an origin that is not listed: no CORS header at all is sent for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from services.common.origins import OriginList
from services.common.remote_transport import H_CONNECTION_ID, H_SESSION_ID

__all__ = ["OriginPolicy"]

_ALLOW_METHODS: Final = "GET, POST, DELETE, OPTIONS"
_ALLOW_HEADERS: Final = ", ".join(("authorization", "content-type", H_CONNECTION_ID.lower(),
                                   H_SESSION_ID.lower(), "last-event-id",
                                   "acp-protocol-version"))
#: Seconds a browser may cache a preflight answer.
_PREFLIGHT_MAX_AGE: Final = "600"


class OriginPolicy:
    """Whether a request's ``Origin`` may use ``/acp``, and the CORS headers it gets."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self._list = OriginList.parse(allowed)

    def admits(self, origin: str | None) -> bool:
        """No Origin (no browser): yes; a browser's: only a listed origin."""
        return origin is None or self._list.admits(origin)

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
