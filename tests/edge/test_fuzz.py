"""Hypothesis fuzz of the dialect: arbitrary lines never kill the edge (SPEC §1).

Runs in-process against :func:`serve_connection` with a real runtime (embedded
session and lifecycle services over gRPC) for speed. Every request with an id
gets exactly one valid JSON-RPC response; notifications get none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.edge.transport.connection import LOCAL_OPERATOR, EdgeRuntime, serve_connection

METHODS = ["initialize", "authenticate", "session/prompt", "session/cancel", "session/stop",
           "session/close", "session/list", "session/update", "session/event", "session/set_mode",
           "session/fork", "foo", ""]

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4) |
                           st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)
ids = st.integers(-1000, 10**6) | st.text(max_size=12) | st.none() | st.booleans() | \
    st.floats(allow_nan=False, allow_infinity=False) | st.lists(st.integers(), max_size=2)
params = st.dictionaries(
    st.sampled_from(["sessionId", "session_id", "prompt", "type", "update", "cwd", "cursor", "x"]),
    json_values, max_size=4) | json_values


@st.composite
def rpc_objects(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    if draw(st.booleans()):
        obj["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2, None]))
    if draw(st.integers(0, 9)) > 0:
        obj["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=10) | json_scalars)
    if draw(st.booleans()):
        obj["id"] = draw(ids)
    if draw(st.booleans()):
        obj["params"] = draw(params)
    if draw(st.integers(0, 5)) == 0:
        obj[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return obj


lines = st.one_of(
    rpc_objects().map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=40),
    st.just(""),
).filter(lambda s: "\n" not in s and "\r" not in s)


def expected_responses(line: str) -> tuple[int, Any]:
    """(how many answers, the id they carry) by JSON-RPC rules, independently of the edge."""
    if not line.strip():
        return 0, None
    try:
        obj = json.loads(line)
    except ValueError:
        return 1, None
    if not isinstance(obj, dict):
        return 1, None
    has_id = obj.get("id") is not None
    if has_id and ("result" in obj or "error" in obj):
        return 0, None  # §1: a response (to us, or unknown and dropped), whatever else it has
    if "method" not in obj:
        return 1, None
    if not has_id:
        return 0, None
    rid = obj["id"]
    if isinstance(rid, bool) or not isinstance(rid, str | int | float):
        return 1, None
    return 1, rid


async def _serve(rt: EdgeRuntime, batch: list[str]) -> list[str]:
    out: list[str] = []

    async def incoming() -> AsyncIterator[str]:
        for item in batch:
            yield item

    async def send(line: str) -> None:
        out.append(line)

    await asyncio.wait_for(serve_connection(rt, incoming(), send, caller=LOCAL_OPERATOR), 60)
    return out


def _check(batch: list[str], out: list[str]) -> None:
    responses = []
    for raw in out:
        assert "\n" not in raw
        msg = json.loads(raw)
        assert msg["jsonrpc"] == "2.0"
        assert "method" not in msg, "no sessions exist, so no outbound requests or updates"
        assert ("result" in msg) != ("error" in msg)
        if "error" in msg:
            assert set(msg["error"]) == {"code", "message"}
            assert isinstance(msg["error"]["code"], int) and isinstance(msg["error"]["message"], str)
        responses.append(msg)
    expected_total = 0
    expected_ids: list[Any] = []
    for line in batch:
        n, rid = expected_responses(line)
        expected_total += n
        if rid is not None:
            expected_ids.append(rid)
    assert len(responses) == expected_total
    got_ids = [m["id"] for m in responses if m["id"] is not None]
    assert sorted(map(json.dumps, got_ids)) == sorted(map(json.dumps, expected_ids))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(lines, min_size=1, max_size=8))
def test_arbitrary_lines(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime,
                         batch: list[str]) -> None:
    _check(batch, loop.run_until_complete(_serve(runtime, batch)))


def test_edge_still_serves_after_fuzz(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime) -> None:
    async def scenario() -> list[str]:
        out: list[str] = []
        got = asyncio.Event()

        async def incoming() -> AsyncIterator[str]:
            yield '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"agentAlias":"sdk"}}'
            await got.wait()  # keep the connection open until the answer arrived

        async def send(line: str) -> None:
            out.append(line)
            got.set()

        await asyncio.wait_for(serve_connection(runtime, incoming(), send, caller=LOCAL_OPERATOR),
                               60)
        return out

    out = loop.run_until_complete(scenario())
    assert json.loads(out[0])["result"]["sessionId"]
    assert runtime.registry.active == {}, "the connection's sessions are released when it ends"


def test_session_new_in_flight_at_disconnect_is_released(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime) -> None:
    batch = ['{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"agentAlias":"sdk"}}']
    out = loop.run_until_complete(_serve(runtime, batch))
    # Input ended while it ran: it is still answered, then its session is released.
    assert len(out) == 1 and json.loads(out[0])["result"]["sessionId"]
    assert runtime.registry.active == {} and runtime.registry.reserved == 0


# ----------------------------------------------------------------- with a live session

SID = "<<live-session>>"
SESSION_METHODS = ["session/prompt", "session/prompt", "session/cancel", "session/update",
                   "session/event", "session/set_mode", "session/list", "initialize"]
prompt_parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=30)}),
    st.fixed_dictionaries({"text": st.text(max_size=30)}),
    st.fixed_dictionaries({"type": st.just("resource"), "resource": st.fixed_dictionaries(
        {"uri": st.text(max_size=20), "text": st.text(max_size=20)})}),
    st.fixed_dictionaries({"type": st.just("resource"), "resource": st.fixed_dictionaries(
        {"uri": st.text(max_size=20), "mimeType": st.sampled_from(["image/png", "text/plain"]),
         "blob": st.text(alphabet="QUJDRA==+/ x!", max_size=24)})}),
    json_values,
)


@st.composite
def session_frames(draw: st.DrawFn) -> tuple[bool, dict[str, Any]]:
    """(is a request, frame without id) aimed at the live session most of the time."""
    p: dict[str, Any] = {}
    if draw(st.integers(0, 5)) > 0:
        p[draw(st.sampled_from(["sessionId", "session_id"]))] = draw(
            st.just(SID) | st.just(SID) | st.text(max_size=8) | json_scalars)
    if draw(st.booleans()):
        p["prompt"] = draw(st.text(max_size=30) | st.lists(prompt_parts, max_size=4) | json_values)
    if draw(st.booleans()):
        p[draw(st.sampled_from(["type", "update", "cwd", "cursor"]))] = draw(json_values)
    frame = {"jsonrpc": "2.0", "method": draw(st.sampled_from(SESSION_METHODS)), "params": p}
    return draw(st.integers(0, 4)) > 0, frame


class LiveConnection:
    """A long-lived in-process connection that refuses every permission it is asked."""

    def __init__(self, rt: EdgeRuntime) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.answers: dict[int, list[dict[str, Any]]] = {}
        self.arrived = asyncio.Event()
        self.task = asyncio.create_task(serve_connection(rt, self._incoming(), self._send,
                                                          caller=LOCAL_OPERATOR))
        self.sid = ""
        self._next = 0

    async def _incoming(self) -> AsyncIterator[str]:
        while (item := await self.queue.get()) is not None:
            yield item

    async def _send(self, line: str) -> None:
        msg = json.loads(line)
        assert msg["jsonrpc"] == "2.0"
        if "method" in msg:
            if "id" in msg:  # back-channel: deny / decline at once
                result: dict[str, Any] = ({"action": "decline"}
                                          if msg["method"] == "elicitation/create" else
                                          {"outcome": {"outcome": "selected",
                                                       "optionId": "reject-once"}})
                self.queue.put_nowait(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                                  "result": result}))
            return
        assert ("result" in msg) != ("error" in msg)
        if "error" in msg:
            assert set(msg["error"]) == {"code", "message"}
        self.answers.setdefault(msg["id"], []).append(msg)
        self.arrived.set()

    def next_id(self) -> int:
        self._next += 1
        return self._next

    async def request(self, frame: dict[str, Any]) -> int:
        rid = self.next_id()
        self.queue.put_nowait(json.dumps({**frame, "id": rid}))
        return rid

    async def wait_for(self, ids: list[int]) -> None:
        async def all_in() -> None:
            while not all(i in self.answers for i in ids):
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(all_in(), 60)


@pytest.fixture(scope="module")
def live(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveConnection]:
    ws = tmp_path_factory.mktemp("live-ws")

    async def start() -> LiveConnection:
        conn = LiveConnection(runtime)
        rid = await conn.request({"jsonrpc": "2.0", "method": "session/new",
                                  "params": {"agentAlias": "demo", "cwd": str(ws)}})
        await conn.wait_for([rid])
        conn.sid = conn.answers[rid][0]["result"]["sessionId"]
        return conn

    conn = loop.run_until_complete(start())
    yield conn
    conn.queue.put_nowait(None)
    loop.run_until_complete(asyncio.wait_for(conn.task, 60))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(frames=st.lists(session_frames(), min_size=1, max_size=6))
def test_fuzz_with_live_session(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime,
                                live: LiveConnection,
                                frames: list[tuple[bool, dict[str, Any]]]) -> None:
    async def scenario() -> None:
        ids = []
        for is_request, frame in frames:
            text = json.dumps(frame).replace(json.dumps(SID), json.dumps(live.sid))
            if is_request:
                ids.append(await live.request(json.loads(text)))
            else:
                live.queue.put_nowait(text)
        await live.wait_for(ids)
        # settle: a prompt sent as a notification may still run; wait until the slot is free
        session = runtime.registry.active[live.sid]
        await asyncio.wait_for(session.wait_turn(), 60)
        for rid in ids:
            assert len(live.answers[rid]) == 1, live.answers[rid]
        assert live.sid in runtime.registry.active, "the live session survived"

    loop.run_until_complete(scenario())
