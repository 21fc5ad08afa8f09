"""One table of hostile and edge-case lines, answered alike by the edge and the agent (SPEC §1).

Each line goes through the real thing on both sides: the edge's dialect
connection (``serve_connection`` on a real runtime) and the built-in agent
(``AgentServer`` on ``agent_peer``, its stdin read by ``read_lines``). Both are
the one :class:`~services.common.jsonrpc.JsonRpcPeer`, so the answers must be
the same, and they must be the ones the table names: SPEC §1's parse errors
(-32700, id null), -32600 only when an id is present, silence for
notifications and for responses nobody waits for, and ids echoed exactly.

A third check runs each line through the batch reader the edge uses toward
adapters (``feed_batch`` with a notification sink), which recognises the
common notification inline: it must agree with the one classification.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.agent.providers.demo import DemoProvider
from services.agent.rpc import agent_peer
from services.agent.server import AgentServer
from services.common.jsonrpc import OVERSIZE_LINE, JsonRpcPeer, integer_ids, read_lines
from services.edge.transport.connection import LOCAL_OPERATOR, EdgeRuntime, serve_connection
from tests.agent.harness import make_config

BIG = 123456789012345678901234567890


#: In a table entry: "Parse error: " and then the JSON decoder's own words (not pinned here).
DECODER_DETAIL = "<the decoder's detail>"


def parse_error(detail: str = DECODER_DETAIL) -> dict[str, Any]:
    """The SPEC §1 parse error (``detail`` = the whole message after "Parse error: ")."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {detail}"}}


def error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def not_found(rid: Any, method: str = "foo") -> dict[str, Any]:
    return error(rid, -32601, f"Method not found: {method}")


#: (line, the answers both sides give).
TABLE: list[tuple[str, list[dict[str, Any]]]] = [
    # blank lines are skipped
    ("", []),
    ("   ", []),
    ("\t", []),
    # not JSON, not an object, a batch, no method → -32700 with id null
    ("{broken", [parse_error()]),
    ('{"jsonrpc":"2.0","id":1,"method":"foo"} x',
     [parse_error()]),
    ('{"a":1}{"b":2}', [parse_error()]),
    ('\ufeff{"jsonrpc":"2.0","id":1,"method":"foo"}',
     [parse_error()]),
    ('{"jsonrpc":"2.0","id":1,"method":"\udcff"}',  # invalid UTF-8 on stdin (surrogateescape)
     [parse_error()]),
    ('{"jsonrpc":"2.0","id":NaN,"method":"foo"}',
     [parse_error()]),
    ('{"jsonrpc":"2.0","id":1e400,"method":"foo"}',
     [parse_error()]),
    ("[" * 2000 + "]" * 2000, [parse_error()]),
    (OVERSIZE_LINE, [parse_error("line too long")]),
    ("[1,2]", [parse_error("batch requests are not supported")]),
    ("[]", [parse_error("batch requests are not supported")]),
    ("42", [parse_error("expected a JSON object, got int")]),
    ('"x"', [parse_error("expected a JSON object, got str")]),
    ("null", [parse_error("expected a JSON object, got NoneType")]),
    ('{"jsonrpc":"2.0","id":1}', [parse_error("missing method")]),
    ('{"jsonrpc":"1.0","id":1}', [parse_error("missing method")]),
    ('{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}', [parse_error("missing method")]),
    # wrong or missing version: -32600 only when an id is present
    ('{"jsonrpc":"1.0","id":7,"method":"foo"}', [error(7, -32600, "Invalid JSON-RPC version")]),
    ('{"id":"v","method":"foo"}', [error("v", -32600, "Invalid JSON-RPC version")]),
    ('{"jsonrpc":2,"id":8,"method":"foo"}', [error(8, -32600, "Invalid JSON-RPC version")]),
    ('{"jsonrpc":"1.0","method":"foo"}', []),
    ('{"method":"foo","id":null}', []),
    # ids and methods of the wrong type
    ('{"jsonrpc":"2.0","id":{"a":1},"method":"foo"}',
     [error(None, -32600, "Invalid Request: id must be a string or a number")]),
    ('{"jsonrpc":"2.0","id":true,"method":"foo"}',
     [error(None, -32600, "Invalid Request: id must be a string or a number")]),
    ('{"jsonrpc":"2.0","id":[1],"method":"foo"}',
     [error(None, -32600, "Invalid Request: id must be a string or a number")]),
    ('{"jsonrpc":"2.0","id":5,"method":5}', [error(5, -32600, "Invalid Request: method must be a string")]),
    ('{"jsonrpc":"2.0","method":5}', []),
    # notifications are never answered, whatever they ask
    ('{"jsonrpc":"2.0","method":"foo"}', []),
    ('{"jsonrpc":"2.0","id":null,"method":"foo"}', []),
    ('{"jsonrpc":"2.0","method":"session/prompt","params":{}}', []),
    ('{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}', []),
    ('{"jsonrpc":"2.0","method":"foo","result":1}', []),
    # result/error plus an id is a response: routed by id, unknown ids dropped silently
    ('{"jsonrpc":"2.0","id":"zc-out-0","result":{}}', []),
    ('{"jsonrpc":"2.0","id":0,"result":null}', []),
    ('{"jsonrpc":"2.0","id":3,"error":{"code":1}}', []),
    ('{"jsonrpc":"2.0","id":17,"result":{},"method":"foo"}', []),
    ('{"id":4,"error":"not an object"}', []),
    # requests: ids echoed exactly, params not an object = no fields
    ('{"jsonrpc":"2.0","id":"s","method":"foo","params":[1]}', [not_found("s")]),
    ('{"jsonrpc":"2.0","id":"","method":"foo"}', [not_found("")]),
    ('{"jsonrpc":"2.0","id":0,"method":"foo"}', [not_found(0)]),
    ('{"jsonrpc":"2.0","id":-1,"method":"foo"}', [not_found(-1)]),
    ('{"jsonrpc":"2.0","id":1.5,"method":"foo"}', [not_found(1.5)]),
    ('{"jsonrpc":"2.0","id":"\u00e9\u6f22","method":"foo"}', [not_found("\u00e9\u6f22")]),
    ('{"jsonrpc":"2.0","id":1,"id":2,"method":"foo"}', [not_found(2)]),
    ('{"jsonrpc":"2.0","id":9,"method":""}', [not_found(9, "")]),
    (f'{{"jsonrpc":"2.0","id":{BIG},"method":"foo"}}', [not_found(BIG)]),
    (f'{{"jsonrpc":"2.0","id":-{BIG},"method":"foo"}}', [not_found(-BIG)]),
    ('{"jsonrpc":"2.0","id":18446744073709551615,"method":"foo"}', [not_found(2**64 - 1)]),
    ('{"jsonrpc":"2.0","id":-9223372036854775809,"method":"foo"}', [not_found(-(2**63) - 1)]),
    # the dialect methods both sides serve, on params that cannot name a session
    ('{"jsonrpc":"2.0","id":10,"method":"session/prompt","params":[1]}',
     [error(10, -32602, "Missing required parameter: sessionId")]),
    ('{"jsonrpc":"2.0","id":11,"method":"session/prompt","params":{"sessionId":"nope"}}',
     [error(11, -32000, "Session not found: nope")]),
]

IDS = [f"{i}:{line[:40]}" for i, (line, _) in enumerate(TABLE)]


async def edge_answers(runtime: EdgeRuntime, line: str) -> list[str]:
    """What the edge writes back for ``line`` alone on one client connection."""
    out: list[str] = []

    async def incoming() -> AsyncIterator[str]:
        yield line

    async def send(message: str) -> None:
        out.append(message)

    await asyncio.wait_for(serve_connection(runtime, incoming(), send, caller=LOCAL_OPERATOR), 30)
    return out


async def agent_answers(tmp: Path, line: str) -> list[str]:
    """What the built-in agent writes to stdout for ``line`` alone on its stdin."""
    cfg = make_config(tmp)
    server = AgentServer(cfg, "a", cfg.agents["a"], DemoProvider(chunk_delay=0),
                         version="table", environ={})
    written: list[bytes] = []

    async def write_line(data: bytes) -> None:
        written.append(data)

    peer = agent_peer(write_line, server)
    server.attach(peer)
    stdin = asyncio.StreamReader()
    stdin.feed_data(line.encode("utf-8", errors="surrogateescape") + b"\n")
    stdin.feed_eof()
    await asyncio.wait_for(peer.serve(read_lines(stdin)), 30)
    await peer.drain(30)
    await server.shutdown()
    for data in written:
        assert data.endswith(b"\n") and data.count(b"\n") == 1  # one message per line
    return [data.decode()[:-1] for data in written]


def _decoded(lines: list[str], expected: list[dict[str, Any]]) -> list[Any]:
    """The answers as objects, a decoder's detail replaced where the table leaves it open."""
    # The stdlib keeps integers beyond 64 bits exact (orjson would read them as floats).
    answers = [json.loads(text) for text in lines]
    for got, want in zip(answers, expected, strict=False):
        if want.get("error", {}).get("message") == parse_error()["error"]["message"]:
            message = got.get("error", {}).get("message", "")
            if message.startswith("Parse error: ") and len(message) > len("Parse error: "):
                got["error"]["message"] = want["error"]["message"]
    return answers


@pytest.mark.parametrize(("line", "expected"), TABLE, ids=IDS)
def test_edge_and_agent_answer_alike(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime,
                                     tmp_path: Path, line: str,
                                     expected: list[dict[str, Any]]) -> None:
    edge = loop.run_until_complete(edge_answers(runtime, line))
    agent = loop.run_until_complete(agent_answers(tmp_path, line))
    assert _decoded(edge, expected) == expected
    assert _decoded(agent, expected) == expected
    assert edge == agent, "byte for byte the same lines"
    for answer in expected:
        if isinstance(answer["id"], int) and abs(answer["id"]) >= 2**63:
            assert f'"id":{answer["id"]}' in edge[0], "a huge integer id is echoed exactly"


async def _peer_answers(line: str, *, batch: bool) -> tuple[list[str], list[tuple[str, Any]]]:
    """Answers and notifications of one plain peer, fed line by line or through feed_batch."""
    out: list[str] = []
    notes: list[tuple[str, Any]] = []

    async def send(message: str) -> None:
        out.append(message)

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        if notification:
            notes.append((method, params))
            return None
        return {"served": method}

    async def sink(run: list[tuple[str, dict[str, Any]]]) -> None:
        notes.extend(run)

    if batch:
        peer = JsonRpcPeer(send, handler, next_id=integer_ids(), notifications=sink)
        await peer.feed_batch([line])
    else:
        peer = JsonRpcPeer(send, handler, next_id=integer_ids())
        peer.feed(line)
    await peer.drain(10)
    return out, notes


@pytest.mark.parametrize("line", [line for line, _ in TABLE], ids=IDS)
async def test_batch_reader_agrees_with_the_one_classification(line: str) -> None:
    assert await _peer_answers(line, batch=True) == await _peer_answers(line, batch=False)
