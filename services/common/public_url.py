"""``[gateway] public_url``: the address clients reach this gateway's ``/acp`` at.

Several hosts may serve one store; a session is live on the host holding its claim, and
the claim records that host's public URL, so another host can tell a client where to
reconnect (-32007 ``data.acpgate.liveAt.url``). The URL is sent to clients as it is
configured, so it must never carry a credential: userinfo (``user:pw@``), a query or a
fragment are refused, as is anything but a ``ws``/``wss``/``http``/``https`` URL with a
host. The session service checks what an edge records the same way (a second line of
defence: only the install's own edges, holding the service credential, record one).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

__all__ = ["MAX_PUBLIC_URL_CHARS", "PUBLIC_URL_SCHEMES", "public_url_problem"]

#: The schemes a client can reconnect with (WebSocket, or Streamable HTTP).
PUBLIC_URL_SCHEMES: Final = frozenset({"ws", "wss", "http", "https"})
#: The longest URL accepted: an address, not a document.
MAX_PUBLIC_URL_CHARS: Final = 2048


def public_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a gateway's public URL, or None when it can ("" is allowed:
    no public address configured). The reason never repeats the value (it may have been
    meant as a secret)."""
    if not url:
        return None
    if len(url) > MAX_PUBLIC_URL_CHARS:
        return f"longer than {MAX_PUBLIC_URL_CHARS} characters"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not a number in 0..65535
    except ValueError:
        return "not a URL"
    if parts.scheme not in PUBLIC_URL_SCHEMES:
        return "expected a ws://, wss://, http:// or https:// URL"
    if "@" in parts.netloc:
        return "must not carry userinfo (user:password@): clients are sent it"
    if not parts.hostname:
        return "has no host"
    if port == 0:
        return "port 0 is not an address clients can reach"
    if parts.query or url.rstrip().endswith("?"):
        return "must not carry a query: clients are sent it"
    if parts.fragment or "#" in url:
        return "must not carry a fragment"
    return None
