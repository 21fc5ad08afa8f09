"""JSON-RPC 2.0 framing of the client dialect (SPEC §1), with orjson.

One message per line (stdio) or per text frame (WebSocket). :func:`classify`
turns one raw line into exactly one :class:`Frame` telling the dialect what to
do with it: dispatch a request or notification, route a response, answer an
error, or ignore it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from services.common.protocol import (
    INVALID_REQUEST,
    JSONRPC_VERSION,
    MSG_INVALID_VERSION,
    MSG_PARSE_ERROR,
    PARSE_ERROR,
)

#: A JSON-RPC id as it may appear on the wire (we never echo other types).
JsonRpcId = str | int | float | None


class FrameKind(Enum):
    """What one inbound line is."""

    SKIP = "skip"  # blank line, or a bad notification we must not answer
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"  # answer to one of our outbound requests
    ERROR = "error"  # answer ``error_code``/``error_message`` to ``id``


@dataclass
class Frame:
    """One classified inbound message."""

    kind: FrameKind
    id: JsonRpcId = None
    method: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    #: The whole decoded object (responses: to read ``result``/``error``).
    message: dict[str, Any] = field(default_factory=dict)
    error_code: int = 0
    error_message: str = ""


class JsonRpcError(Exception):
    """An error to answer a request with: ``code`` and ``message`` only (SPEC §1)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def _parse_error(detail: str) -> Frame:
    return Frame(FrameKind.ERROR, None, error_code=PARSE_ERROR,
                 error_message=MSG_PARSE_ERROR.format(detail=detail))


def classify(line: str | bytes) -> Frame:
    """Classify one inbound line or frame (SPEC §1). Never raises."""
    if isinstance(line, bytes | bytearray):
        if not line.strip():
            return Frame(FrameKind.SKIP)
    elif not line.strip():
        return Frame(FrameKind.SKIP)
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return _parse_error(str(exc))
    if isinstance(obj, list):
        return _parse_error("batch requests are not supported")
    if not isinstance(obj, dict):
        return _parse_error(f"expected a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("id"), float) and obj["id"].is_integer() and abs(obj["id"]) >= 2**63:
        # orjson reads integers beyond 64 bits as floats; the stdlib keeps them
        # exact, so the id is echoed back as sent and the client can match it.
        obj["id"] = json.loads(line)["id"]
    has_id = "id" in obj and obj["id"] is not None
    # SPEC §1: result or error plus an id is a response, whatever else the line carries.
    if has_id and ("result" in obj or "error" in obj):
        return Frame(FrameKind.RESPONSE, obj["id"], message=obj)
    if "method" not in obj:
        return _parse_error("missing method")
    if has_id and not _valid_id(obj["id"]):
        return Frame(FrameKind.ERROR, None, error_code=INVALID_REQUEST,
                     error_message="Invalid Request: id must be a string or a number")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        if has_id:
            return Frame(FrameKind.ERROR, obj["id"], error_code=INVALID_REQUEST,
                         error_message=MSG_INVALID_VERSION)
        return Frame(FrameKind.SKIP)
    method = obj["method"]
    if not isinstance(method, str):
        if has_id:
            return Frame(FrameKind.ERROR, obj["id"], error_code=INVALID_REQUEST,
                         error_message="Invalid Request: method must be a string")
        return Frame(FrameKind.SKIP)
    raw_params = obj.get("params")
    params = raw_params if isinstance(raw_params, dict) else {}
    if has_id:
        return Frame(FrameKind.REQUEST, obj["id"], method, params, obj)
    return Frame(FrameKind.NOTIFICATION, None, method, params, obj)


def dumps(message: dict[str, Any]) -> str:
    """One message as a single line of JSON (no newline; neither encoder emits one)."""
    try:
        return orjson.dumps(message).decode()
    except orjson.JSONEncodeError:
        # Only integers beyond 64 bits (a client's huge numeric id) get here.
        return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def result_line(msg_id: JsonRpcId, result: Any) -> str:
    """A JSON-RPC success response."""
    return dumps({"jsonrpc": JSONRPC_VERSION, "id": msg_id, "result": result})


def error_line(msg_id: JsonRpcId, code: int, message: str) -> str:
    """A JSON-RPC error response carrying ``code`` and ``message`` only."""
    return dumps({"jsonrpc": JSONRPC_VERSION, "id": msg_id,
                  "error": {"code": code, "message": message}})


def notification_line(method: str, params: dict[str, Any]) -> str:
    """A JSON-RPC notification."""
    return dumps({"jsonrpc": JSONRPC_VERSION, "method": method, "params": params})


def notification_lines(method: str, params_list: list[dict[str, Any]]) -> list[str]:
    """One JSON-RPC notification line per ``params`` (the same bytes as :func:`notification_line`).

    A burst of updates is encoded in one loop without a Python call per message;
    only a message orjson refuses (an integer beyond 64 bits) takes the slow path.
    """
    out: list[str] = []
    append = out.append
    encode = orjson.dumps
    for params in params_list:
        message = {"jsonrpc": JSONRPC_VERSION, "method": method, "params": params}
        try:
            append(encode(message).decode())
        except orjson.JSONEncodeError:
            append(dumps(message))
    return out


def request_line(msg_id: JsonRpcId, method: str, params: dict[str, Any]) -> str:
    """A JSON-RPC request."""
    return dumps({"jsonrpc": JSONRPC_VERSION, "id": msg_id, "method": method, "params": params})
