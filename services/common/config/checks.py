"""The checks of configuration values that a type, bounds or a fixed set cannot express.

Each takes the key's value and returns the problem (the text after ``[section] key: ``),
or None; its docstring's first line says what it accepts, for the configuration
reference. A message never echoes a value that may carry a credential.
"""

from __future__ import annotations

from typing import Any

from services.common.net_targets import HostAllowList
from services.common.origins import OriginList
from services.common.public_url import public_url_problem

#: URL schemes of ``[store] url`` that name a PostgreSQL database.
STORE_URL_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(url: str) -> bool:
    """True when ``url`` names a PostgreSQL database."""
    return "://" in url and url.split("://", 1)[0].lower() in STORE_URL_SCHEMES


def path_prefix(value: Any) -> str | None:
    """Empty, or a path like `/acpgate` (leading slash, no trailing slash)."""
    if value and (not value.startswith("/") or value.endswith("/")):
        return ("expected '' or a path like '/acpgate' "
                "(leading slash, no trailing slash)")
    return None


def host_allow_list(value: Any) -> str | None:
    """Host names, addresses or CIDR networks."""
    try:
        HostAllowList.parse(value)
    except ValueError as exc:
        return str(exc)
    return None


def origin_list(value: Any) -> str | None:
    """`scheme://host[:port]` origins, or `*`."""
    try:
        OriginList.parse(value)
    except ValueError as exc:
        return str(exc)
    return None


def public_url(value: Any) -> str | None:
    """Empty, or a `ws(s)://` / `http(s)://` URL without userinfo, query or fragment."""
    problem = public_url_problem(value)
    if problem is None:
        return None
    return f"{problem} (expected e.g. wss://gateway.example.com/acp, or '' for none)"


def store_url(value: Any) -> str | None:
    """Empty (SQLite in the data dir), or `postgresql://user@host:port/db`."""
    if value and not is_postgres_url(value):
        return ("expected '' (SQLite in the data dir) or a "
                "postgresql://user@host:port/database URL")
    return None
