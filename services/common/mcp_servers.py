"""MCP server descriptions: ACP v1's ``McpServer`` shapes as typed, validated values.

One shape everywhere: what a client passes in ``session/new``/``load``/``resume``
(``mcpServers``) and what the operator writes in ``[agents.<alias>] mcp_servers``
in config.toml. The three variants of the ACP schema:

- stdio: ``{"name", "command", "args": [str], "env": [{"name", "value"}]}``
  (``"type": "stdio"`` is accepted too; ``args``/``env`` may be omitted);
- ``{"type": "http", "name", "url", "headers": [{"name", "value"}]}``;
- ``{"type": "sse", "name", "url", "headers": [...]}``.

Parsing never guesses: an entry that breaks the shape is refused with a
sentence saying which field is wrong. Values of ``env`` and ``headers`` often
hold credentials; :func:`redacted` is the form fit for logs and ``config show``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

__all__ = [
    "TRANSPORT_HTTP",
    "TRANSPORT_SSE",
    "TRANSPORT_STDIO",
    "McpHttpServer",
    "McpServerError",
    "McpServerSpec",
    "McpStdioServer",
    "parse_server",
    "parse_servers",
    "redacted",
    "to_json",
]

TRANSPORT_STDIO: Literal["stdio"] = "stdio"
TRANSPORT_HTTP: Literal["http"] = "http"
TRANSPORT_SSE: Literal["sse"] = "sse"

_ENV_NAME = re.compile(r"^[^=\x00]+$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class McpServerError(ValueError):
    """An ``McpServer`` entry that does not have the ACP shape; ``str(exc)`` says why."""


@dataclass(frozen=True)
class McpStdioServer:
    """A server the agent starts as a child process and talks to over its stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    #: Extra environment variables, in the order given.
    env: tuple[tuple[str, str], ...] = ()
    transport: Literal["stdio"] = TRANSPORT_STDIO


@dataclass(frozen=True)
class McpHttpServer:
    """A server reached over HTTP: streamable HTTP (``http``) or the older SSE transport."""

    name: str
    url: str
    transport: Literal["http", "sse"] = TRANSPORT_HTTP
    headers: tuple[tuple[str, str], ...] = ()


McpServerSpec = McpStdioServer | McpHttpServer


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise McpServerError(f"{where}: `{key}` must be a non-empty string")
    if "\x00" in value:
        raise McpServerError(f"{where}: `{key}` contains a NUL byte")
    return value


def _pairs(entry: Mapping[str, Any], key: str, where: str,
           name_rule: re.Pattern[str]) -> tuple[tuple[str, str], ...]:
    """``[{"name", "value"}, ...]`` → ``((name, value), ...)``; absent → ``()``."""
    value = entry.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise McpServerError(f"{where}: `{key}` must be an array of {{name, value}} objects")
    out: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise McpServerError(f"{where}: `{key}[{i}]` must be a {{name, value}} object")
        name, val = item.get("name"), item.get("value")
        if not isinstance(name, str) or not name_rule.match(name):
            raise McpServerError(f"{where}: `{key}[{i}].name` is not a valid name")
        if not isinstance(val, str) or "\x00" in val:
            raise McpServerError(f"{where}: `{key}[{i}].value` must be a string")
        out.append((name, val))
    return tuple(out)


def _url(entry: Mapping[str, Any], where: str) -> str:
    url = _text(entry, "url", where).strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise McpServerError(f"{where}: `url` must be an http:// or https:// URL")
    return url


def parse_server(entry: Any, where: str = "MCP server") -> McpServerSpec:
    """One ACP ``McpServer`` object as a typed value; :class:`McpServerError` if malformed."""
    if not isinstance(entry, Mapping):
        raise McpServerError(f"{where}: expected an object")
    name = _text(entry, "name", where).strip()
    where = f"{where} `{name}`"
    kind = entry.get("type", TRANSPORT_STDIO)
    if kind == TRANSPORT_STDIO:
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) and "\x00" not in a
                                                 for a in args):
            raise McpServerError(f"{where}: `args` must be an array of strings")
        return McpStdioServer(name=name, command=_text(entry, "command", where),
                              args=tuple(args), env=_pairs(entry, "env", where, _ENV_NAME))
    if kind in (TRANSPORT_HTTP, TRANSPORT_SSE):
        return McpHttpServer(name=name, url=_url(entry, where),
                             transport=TRANSPORT_HTTP if kind == TRANSPORT_HTTP else TRANSPORT_SSE,
                             headers=_pairs(entry, "headers", where, _HEADER_NAME))
    raise McpServerError(f"{where}: unsupported `type` {kind!r} (expected http, sse or stdio)")


def parse_servers(value: Any, where: str = "mcpServers") -> tuple[list[McpServerSpec], list[str]]:
    """A list of entries → (the valid servers, one sentence per refused entry).

    Invalid entries are skipped rather than failing the whole list, as the ACP
    schema asks (``x-deserialize-skip-invalid-items``); a value that is not a
    list at all yields no servers and one error.
    """
    if value is None:
        return [], []
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return [], [f"{where}: expected an array of MCP server objects"]
    servers: list[McpServerSpec] = []
    errors: list[str] = []
    for i, entry in enumerate(value):
        try:
            servers.append(parse_server(entry, f"{where}[{i}]"))
        except McpServerError as exc:
            errors.append(str(exc))
    return servers, errors


def _pairs_json(pairs: tuple[tuple[str, str], ...], secret: bool) -> list[dict[str, str]]:
    return [{"name": k, "value": "<set>" if secret else v} for k, v in pairs]


def to_json(spec: McpServerSpec, *, secrets: bool = True) -> dict[str, Any]:
    """The ACP JSON form of ``spec``; ``secrets=False`` replaces env/header values by ``<set>``."""
    if isinstance(spec, McpStdioServer):
        return {"name": spec.name, "command": spec.command, "args": list(spec.args),
                "env": _pairs_json(spec.env, not secrets)}
    return {"type": spec.transport, "name": spec.name, "url": spec.url,
            "headers": _pairs_json(spec.headers, not secrets)}


def redacted(spec: McpServerSpec) -> dict[str, Any]:
    """:func:`to_json` without the env and header values (for logs and ``config show``)."""
    return to_json(spec, secrets=False)
