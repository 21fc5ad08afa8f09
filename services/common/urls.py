"""Database URLs as they may be shown: without their secrets.

``[store] url`` may carry a password (``postgresql://user:secret@host/db`` or
``?password=…``). Logs, status messages and ``acpgate config show`` only ever
print :func:`redact_url`'s form of it.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact_url"]

#: Query parameters of a libpq URL that carry a secret.
_SECRET_PARAMS: Final = frozenset({"password", "passfile", "sslpassword"})


def redact_url(url: str) -> str:
    """The URL without its password (user, host, port, database and options kept)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, hostinfo = netloc.rsplit("@", 1)
            netloc = f"{userinfo.split(':', 1)[0]}@{hostinfo}"
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                           if k.lower() not in _SECRET_PARAMS])
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return f"{url.split(':', 1)[0]}://<unparsable URL>"
