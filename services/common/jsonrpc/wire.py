"""The JSON-RPC 2.0 wire form (SPEC §1): what one line means, and how a message is written.

:func:`classify` turns one raw line into exactly one :class:`Frame` telling the
peer what to do with it: serve a request or notification, route a response,
answer an error, or ignore it. It is the only reader of raw lines, so every
side (the edge toward clients and toward adapters, the built-in agent) treats
bad input alike. The encoders write one message as one line of JSON with
orjson; only an integer beyond 64 bits (a client's huge numeric id, echoed
exactly) takes the stdlib's slower path.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from services.common.line_split import OVERSIZE_LINE, OversizeLine
from services.common.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    JSONRPC_VERSION,
    MSG_ERROR_WITHOUT_MESSAGE,
    MSG_INVALID_ID,
    MSG_INVALID_METHOD,
    MSG_INVALID_VERSION,
    MSG_LINE_TOO_LONG,
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


@dataclass(frozen=True)
class Answered:
    """A handler's ``result`` with what to do once it is written: ``then`` runs right after
    the answer (e.g. to send notifications a client must only see after it)."""

    result: Any
    then: Callable[[], Awaitable[None]]


class JsonRpcError(Exception):
    """A JSON-RPC error: raised by a handler to answer with it, raised to a caller whose
    request was answered with it.

    ``data`` is optional and goes on the wire only when it is set, so a dialect
    answer is ``code`` and ``message`` only (SPEC §1) unless a caller adds it
    (e.g. to relay an adapter's error whole).
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def from_wire(cls, error: Any) -> JsonRpcError:
        """The error object of a response, read leniently (a peer's odd error is still one)."""
        err = error if isinstance(error, dict) else {}
        code = err.get("code")
        message = err.get("message")
        return cls(code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
                   str(message) if message not in (None, "") else MSG_ERROR_WITHOUT_MESSAGE,
                   err.get("data"))


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def _parse_error(detail: str) -> Frame:
    return Frame(FrameKind.ERROR, None, error_code=PARSE_ERROR,
                 error_message=MSG_PARSE_ERROR.format(detail=detail))


def classify(line: str | bytes) -> Frame:
    """Classify one inbound line or frame (SPEC §1). Never raises."""
    if not line.strip():
        return Frame(FrameKind.SKIP)
    if line == OVERSIZE_LINE:
        if isinstance(line, OversizeLine):
            return _parse_error(MSG_LINE_TOO_LONG.format(n=line.size, limit=line.limit))
        return _parse_error("line too long")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return _parse_error(str(exc))
    return classify_message(obj, line)


def classify_message(obj: Any, line: str | bytes) -> Frame:
    """Classify a line already decoded to ``obj`` (``line`` re-reads a huge integer id exactly).

    For a reader that decodes each line itself to take a fast path first (the
    edge's ``session/update`` relay); everything else goes through here.
    """
    if isinstance(obj, list):
        return _parse_error("batch requests are not supported")
    if not isinstance(obj, dict):
        return _parse_error(f"expected a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("id"), float) and obj["id"].is_integer() and abs(obj["id"]) >= 2**63:
        # orjson reads integers beyond 64 bits as floats; the stdlib keeps them
        # exact, so the id is echoed back as sent and the peer can match it.
        obj["id"] = json.loads(line)["id"]
    has_id = "id" in obj and obj["id"] is not None
    # SPEC §1: result or error plus an id is a response, whatever else the line carries.
    if has_id and ("result" in obj or "error" in obj):
        return Frame(FrameKind.RESPONSE, obj["id"], message=obj)
    if "method" not in obj:
        return _parse_error("missing method")
    if has_id and not _valid_id(obj["id"]):
        return Frame(FrameKind.ERROR, None, error_code=INVALID_REQUEST, error_message=MSG_INVALID_ID)
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        if has_id:
            return Frame(FrameKind.ERROR, obj["id"], error_code=INVALID_REQUEST,
                         error_message=MSG_INVALID_VERSION)
        return Frame(FrameKind.SKIP)
    method = obj["method"]
    if not isinstance(method, str):
        if has_id:
            return Frame(FrameKind.ERROR, obj["id"], error_code=INVALID_REQUEST,
                         error_message=MSG_INVALID_METHOD)
        return Frame(FrameKind.SKIP)
    raw_params = obj.get("params")
    params = raw_params if isinstance(raw_params, dict) else {}
    if has_id:
        return Frame(FrameKind.REQUEST, obj["id"], method, params, obj)
    return Frame(FrameKind.NOTIFICATION, None, method, params, obj)


# ---------------------------------------------------------------------- encoders

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


def error_line(msg_id: JsonRpcId, code: int, message: str, data: Any = None) -> str:
    """A JSON-RPC error response: ``code`` and ``message``, plus ``data`` when given."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return dumps({"jsonrpc": JSONRPC_VERSION, "id": msg_id, "error": error})


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
