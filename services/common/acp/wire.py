"""Decoding helpers of the generated ACP models (:mod:`services.common.acp.schema`).

The generated ``from_json`` methods read one JSON object with these helpers,
following the schema's own reading rules: a required field that is missing or
of the wrong type is an :class:`AcpDecodeError` naming it; an optional field
marked ``x-deserialize-default-on-error`` falls back to its default instead;
an array marked ``x-deserialize-skip-invalid-items`` drops the items that do
not decode. Unknown properties are ignored, as JSON-RPC peers must.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

#: Reads one JSON value as ``T`` or raises :class:`AcpDecodeError`.
Decoder = Callable[[Any], T]

__all__ = [
    "AcpDecodeError",
    "Decoder",
    "any_of",
    "as_any",
    "as_bool",
    "as_const",
    "as_float",
    "as_int",
    "as_object",
    "as_str",
    "list_of",
    "nullable",
    "optional",
    "required",
    "required_object",
    "to_wire",
]


class AcpDecodeError(ValueError):
    """A JSON value is not the ACP shape it should be; the message names where."""


def as_bool(value: Any) -> bool:
    """A JSON boolean."""
    if isinstance(value, bool):
        return value
    raise AcpDecodeError(f"expected a boolean, got {type(value).__name__}")


def as_str(value: Any) -> str:
    """A JSON string."""
    if isinstance(value, str):
        return value
    raise AcpDecodeError(f"expected a string, got {type(value).__name__}")


def as_int(value: Any) -> int:
    """A JSON integer (``true`` is not one)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise AcpDecodeError(f"expected an integer, got {type(value).__name__}")


def as_float(value: Any) -> float:
    """A JSON number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise AcpDecodeError(f"expected a number, got {type(value).__name__}")


def as_object(value: Any) -> dict[str, Any]:
    """A JSON object, kept as it is (open-ended parts of the protocol, ``_meta``)."""
    if isinstance(value, dict):
        return value
    raise AcpDecodeError(f"expected an object, got {type(value).__name__}")


def as_any(value: Any) -> Any:
    """Any JSON value, kept as it is."""
    return value


def as_const(expected: str) -> Decoder[str]:
    """A decoder accepting only the string ``expected`` (a union's discriminator)."""

    def decode(value: Any) -> str:
        if value != expected:
            raise AcpDecodeError(f"expected {expected!r}, got {value!r}")
        return expected

    return decode


def nullable(decode: Decoder[T]) -> Decoder[T | None]:
    """``decode``, or None for a JSON null."""

    def read(value: Any) -> T | None:
        return None if value is None else decode(value)

    return read


def list_of(decode: Decoder[T], *, skip_invalid: bool = False) -> Decoder[list[T]]:
    """A JSON array of ``decode`` items; ``skip_invalid`` drops the items that fail."""

    def read(value: Any) -> list[T]:
        if not isinstance(value, list):
            raise AcpDecodeError(f"expected an array, got {type(value).__name__}")
        out: list[T] = []
        for index, item in enumerate(value):
            try:
                out.append(decode(item))
            except AcpDecodeError as exc:
                if not skip_invalid:
                    raise AcpDecodeError(f"[{index}]: {exc}") from None
        return out

    return read


def any_of(*decoders: Decoder[Any]) -> Decoder[Any]:
    """The first of ``decoders`` that accepts the value (an untagged union)."""

    def read(value: Any) -> Any:
        reasons = []
        for decode in decoders:
            try:
                return decode(value)
            except AcpDecodeError as exc:
                reasons.append(str(exc))
        raise AcpDecodeError("no variant matches: " + "; ".join(reasons))

    return read


def _object(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise AcpDecodeError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def required_object(data: Any, where: str) -> None:
    """Refuse anything but a JSON object (a model without fields of its own)."""
    _object(data, where)


def required(data: Any, key: str, decode: Decoder[T], where: str) -> T:
    """``data[key]`` read with ``decode``; missing or malformed is an error naming it."""
    obj = _object(data, where)
    if key not in obj:
        raise AcpDecodeError(f"{where}: missing required {key!r}")
    try:
        return decode(obj[key])
    except AcpDecodeError as exc:
        raise AcpDecodeError(f"{where}.{key}: {exc}") from None


def optional(data: Any, key: str, decode: Decoder[T], default: Callable[[], T], where: str,
             *, lenient: bool = False) -> T:
    """``data[key]`` read with ``decode``; missing or null is ``default()``.

    A malformed value is ``default()`` too when ``lenient`` (the schema's
    ``x-deserialize-default-on-error``), else an error naming it.
    """
    obj = _object(data, where)
    value = obj.get(key)
    if value is None:
        return default()
    try:
        return decode(value)
    except AcpDecodeError as exc:
        if lenient:
            return default()
        raise AcpDecodeError(f"{where}.{key}: {exc}") from None


def to_wire(value: Any) -> Any:
    """A model value as JSON: models through their ``to_json``, lists item by item."""
    if isinstance(value, list):
        return [to_wire(item) for item in value]
    to_json = getattr(value, "to_json", None)
    if to_json is not None:
        return to_json()
    return value
