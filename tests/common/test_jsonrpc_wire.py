"""SPEC §1 framing: classification of raw lines and the encoders (services.common.jsonrpc.wire)."""

from __future__ import annotations

import json

import orjson
import pytest

from services.common.jsonrpc import FrameKind, classify, error_line
from services.common.protocol import INVALID_REQUEST, PARSE_ERROR


@pytest.mark.parametrize("line", ["", "   ", "\t"])
def test_blank_lines_are_skipped(line: str) -> None:
    assert classify(line).kind is FrameKind.SKIP


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        ("{not json", None),
        ("[1,2]", "batch"),
        ("42", "expected a JSON object"),
        ('"x"', "expected a JSON object"),
        ('{"jsonrpc":"2.0","id":1}', "missing method"),
    ],
)
def test_parse_errors(line: str, detail: str | None) -> None:
    frame = classify(line)
    assert frame.kind is FrameKind.ERROR
    assert frame.id is None
    assert frame.error_code == PARSE_ERROR
    assert frame.error_message.startswith("Parse error: ")
    if detail:
        assert detail in frame.error_message


def test_wrong_version_with_id_is_invalid_request() -> None:
    frame = classify('{"jsonrpc":"1.0","id":7,"method":"initialize"}')
    assert (frame.kind, frame.id, frame.error_code, frame.error_message) == (
        FrameKind.ERROR, 7, INVALID_REQUEST, "Invalid JSON-RPC version")


def test_wrong_version_without_id_is_silent() -> None:
    assert classify('{"jsonrpc":"1.0","method":"initialize"}').kind is FrameKind.SKIP
    assert classify('{"method":"initialize","id":null}').kind is FrameKind.SKIP


def test_null_id_is_a_notification() -> None:
    frame = classify('{"jsonrpc":"2.0","id":null,"method":"session/cancel","params":{"sessionId":"a"}}')
    assert frame.kind is FrameKind.NOTIFICATION
    assert frame.params == {"sessionId": "a"}


def test_params_not_an_object_means_no_fields() -> None:
    frame = classify('{"jsonrpc":"2.0","id":"a","method":"x","params":[1]}')
    assert frame.kind is FrameKind.REQUEST and frame.params == {}


def test_responses_are_routed() -> None:
    frame = classify('{"jsonrpc":"2.0","id":"zc-out-0","result":{"ok":1}}')
    assert frame.kind is FrameKind.RESPONSE and frame.id == "zc-out-0"
    frame = classify('{"jsonrpc":"2.0","id":"zc-out-1","error":{"code":1,"message":"m"}}')
    assert frame.kind is FrameKind.RESPONSE


def test_error_line_shape() -> None:
    msg = orjson.loads(error_line(None, PARSE_ERROR, "Parse error: x"))
    assert msg == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: x"}}


def test_result_with_method_is_still_a_response() -> None:
    """§1: a line with result/error plus an id is a response (routed or dropped), never a request."""
    frame = classify('{"jsonrpc":"2.0","id":17,"result":{},"method":"foo"}')
    assert frame.kind is FrameKind.RESPONSE and frame.id == 17
    frame = classify('{"jsonrpc":"2.0","id":"zc-out-3","error":{"code":1,"message":"x"},"method":"m"}')
    assert frame.kind is FrameKind.RESPONSE and frame.id == "zc-out-3"


def test_huge_integer_id_is_echoed_exactly() -> None:
    big = 123456789012345678901234567890
    frame = classify('{"jsonrpc":"2.0","id":' + str(big) + ',"method":"foo"}')
    assert frame.kind is FrameKind.REQUEST and frame.id == big and isinstance(frame.id, int)
    line = error_line(frame.id, -32601, "Method not found: foo")
    assert f'"id":{big}' in line
    assert json.loads(line)["id"] == big
