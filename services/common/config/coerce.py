"""Checking configuration values against the schema.

A value from ``config.toml`` already has a TOML type, which must be the field's;
a value from the environment or the command line is text, parsed first. Every
failure is a :class:`ConfigError` whose message names where the value came
from, the key and the expected type.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from typing import Any

from services.common.config.schema import SECTIONS, AgentSection, ConfigError, field_types, settings
from services.common.mcp_servers import McpServerError, McpServerSpec, parse_server

#: How a field annotation is named in an error message.
TYPE_NAMES = {
    "int": "integer",
    "int | str": 'integer or "auto"',
    "bool": "boolean",
    "str": "string",
    "tuple[str, ...]": "array of strings",
    "Mapping[str, str]": "table of strings",
    "tuple[McpServerSpec, ...]": "array of MCP server tables",
    "AgentProtocol": '1, 2 or "auto"',
}

_TRUE_WORDS = ("true", "1", "yes", "on")
_FALSE_WORDS = ("false", "0", "no", "off")


class _Mismatch(Exception):
    """A value that does not fit its type; ``value`` is what the error message shows."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


class _Invalid(Exception):
    """A value of the right type whose content is wrong; ``str(exc)`` follows the key."""


def _toml_value(text: str) -> Any:
    """``text`` read as a TOML value (an inline array or table from env/CLI text)."""
    try:
        return tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        raise _Mismatch(text) from None


def _as_int(value: Any, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise _Mismatch(value) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Mismatch(value)
    return value


def _as_bool(value: Any, from_text: bool) -> bool:
    if from_text and isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE_WORDS:
            return True
        if low in _FALSE_WORDS:
            return False
        raise _Mismatch(value)
    if not isinstance(value, bool):
        raise _Mismatch(value)
    return value


def _as_str(value: Any, from_text: bool) -> str:
    if not isinstance(value, str):
        raise _Mismatch(value)
    return value


def _as_count_or_auto(value: Any, from_text: bool) -> int | str:
    """A count or "auto" (``[gateway] workers``; its bounds are the field's)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _as_int(value, from_text)


def _as_protocol(value: Any, from_text: bool) -> int | str:
    """``[agents.<alias>] protocol``: "auto" or an ACP version acpgate speaks (1, 2)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    version = _as_int(value, from_text)
    if version not in (1, 2):
        raise _Invalid(f': expected 1, 2 or "auto", got {version}')
    return version


def _as_strings(value: Any, from_text: bool) -> tuple[str, ...]:
    if from_text and isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _toml_value(value)
        else:
            value = [p.strip() for p in text.split(",") if p.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Mismatch(value)
    return tuple(value)


def _as_string_table(value: Any, from_text: bool) -> dict[str, str]:
    if from_text and isinstance(value, str):
        value = _toml_value(value)
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _Mismatch(value)
    return dict(value)


def _as_mcp_servers(value: Any, from_text: bool) -> tuple[McpServerSpec, ...]:
    if from_text and isinstance(value, str):
        value = _toml_value(value)
    if not isinstance(value, list):
        raise _Mismatch(value)
    try:
        return tuple(parse_server(entry, f"[{i}]") for i, entry in enumerate(value))
    except McpServerError as exc:
        raise _Invalid(str(exc)) from None


#: The check (and text parser) of each field annotation the schema uses.
_CHECKS: dict[str, Callable[[Any, bool], Any]] = {
    "int": _as_int,
    "int | str": _as_count_or_auto,
    "bool": _as_bool,
    "str": _as_str,
    "tuple[str, ...]": _as_strings,
    "Mapping[str, str]": _as_string_table,
    "tuple[McpServerSpec, ...]": _as_mcp_servers,
    "AgentProtocol": _as_protocol,
}


def coerce_value(value: Any, type_name: str, where: str, *, from_text: bool) -> Any:
    """Check (and, for env/CLI text, parse) one value against its declared type."""
    check = _CHECKS.get(type_name)
    if check is None:  # pragma: no cover - every schema annotation has a check
        raise ConfigError(f"{where}: unsupported type {type_name}")
    try:
        return check(value, from_text)
    except _Mismatch as bad:
        expected = TYPE_NAMES.get(type_name, type_name)
        raise ConfigError(f"{where}: expected {expected}, got {bad.value!r}") from None
    except _Invalid as exc:
        raise ConfigError(f"{where}{exc}") from None


def check_choice(section: str, key: str, value: Any, where: str) -> None:
    """Refuse a text value outside the fixed set of ``section.key``, if it has one
    (``section`` is ``agents`` for every agent entry)."""
    cls = AgentSection if section == "agents" else SECTIONS.get(section)
    declared = settings(cls).get(key) if cls is not None else None
    choices = declared.choices if declared is not None else ()
    if choices and isinstance(value, str) and value not in choices:
        shown = ", ".join(repr(c) for c in choices if c)
        raise ConfigError(f"{where}: expected one of {shown}, got {value!r}")


def build_section(
    cls: type, section: str, raw: Mapping[str, Any], origin: str, *, from_text: bool
) -> dict[str, Any]:
    """Validate one table's keys; unknown keys are errors (typos must not pass silently)."""
    types = field_types(cls)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if section == "gateway" and key == "tls":
            continue
        where = f"{origin}: [{section}] {key}"
        if key not in types:
            known = ", ".join(sorted(types))
            raise ConfigError(f"{origin}: [{section}] unknown key {key!r} (known keys: {known})")
        coerced = coerce_value(value, types[key], where, from_text=from_text)
        choice_section = section.split(".")[0] if section.startswith("agents") else section
        check_choice(choice_section, key, coerced, where)
        out[key] = coerced
    return out
