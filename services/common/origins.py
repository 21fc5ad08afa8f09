"""Browser origins a gateway admits: ``[gateway] allowed_origins`` (ACP remote transport).

A browser names the page that opened a request in its ``Origin`` header
(RFC 6454: ``scheme://host[:port]``); a client that is no browser sends none.
acpgate serves no pages, so by default no browser origin is admitted: a page on
another site must not drive a user's gateway with the user's own cookies or
network position. ``allowed_origins`` lists the origins that may, exactly as a
browser spells them (``https://app.example``, ``http://localhost:5173``), or
``*`` for any. Entries are normalized here, once, when the config is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = ["ANY_ORIGIN", "OriginList", "normalize_origin"]

#: The entry that admits every origin.
ANY_ORIGIN: Final = "*"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def normalize_origin(value: str) -> str:
    """``scheme://host[:port]`` lowercased, default port dropped; ValueError otherwise."""
    text = value.strip()
    parts = urlsplit(text)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{value!r} is not an origin (expected scheme://host[:port], "
                         "http or https)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username \
            or parts.password:
        raise ValueError(f"{value!r} is not an origin: no path, query or user part")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{value!r} has an invalid port") from None
    host = parts.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


@dataclass(frozen=True)
class OriginList:
    """The admitted origins (normalized), or any when ``*`` was listed."""

    origins: frozenset[str]
    any_origin: bool = False

    @classmethod
    def parse(cls, entries: Iterable[str]) -> OriginList:
        """From the config's entries; ValueError names the first that is no origin."""
        found: set[str] = set()
        any_origin = False
        for entry in entries:
            if entry.strip() == ANY_ORIGIN:
                any_origin = True
            else:
                found.add(normalize_origin(entry))
        return cls(frozenset(found), any_origin)

    def admits(self, origin: str) -> bool:
        """True when a request whose ``Origin`` header is ``origin`` may proceed."""
        if self.any_origin:
            return True
        try:
            return normalize_origin(origin) in self.origins
        except ValueError:
            return False  # "null" (sandboxed frames, file:) and garbage: never listed
