"""The JSON-RPC peer itself: answers exactly once, our own requests, the batch reader, the ends.

What every side shares is pinned by ``test_jsonrpc_table.py``; this module pins
the peer's knobs and its edges: the adapter-side setting that never answers an
error without an id, ``data`` on error answers, answers matched by the id's
string form, ``max_running`` on batches, cancellation, ``$/cancel_request`` in both directions (our requests
withdrawn, the other side's looked up and withdrawn), write failures, and lines
from a byte stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from services.common.jsonrpc import (
    OVERSIZE_LINE,
    Answered,
    JsonRpcError,
    JsonRpcPeer,
    Notes,
    PeerClosed,
    error_line,
    integer_ids,
    prefixed_ids,
    read_lines,
)


class Wire:
    """A peer under test: what it sends, what its handler and sink saw."""

    def __init__(self, *, sink: bool = False, answer_unidentified: bool = True,
                 next_id: Any = None, withdraw_method: str | None = None,
                 max_running: int | None = None, uncounted: frozenset[str] = frozenset()) -> None:
        self.out: list[dict[str, Any]] = []
        self.seen: list[tuple[str, dict[str, Any], bool]] = []
        self.runs: list[Notes] = []
        self.errors: list[int] = []
        self.release = asyncio.Event()

        async def send(line: str) -> None:
            self.out.append(orjson.loads(line))

        async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
            self.seen.append((method, params, notification))
            if method == "fail":
                raise JsonRpcError(-32000, "refused", {"why": "because"})
            if method == "crash":
                raise RuntimeError("secret detail")
            if method in ("hang", "wait"):
                await self.release.wait()
            return {"ok": method}

        async def notes(run: Notes) -> None:
            self.runs.append(list(run))

        self.peer = JsonRpcPeer(send, handler, next_id=next_id or integer_ids(),
                                notifications=notes if sink else None,
                                answer_unidentified=answer_unidentified,
                                withdraw_method=withdraw_method,
                                on_error=self.errors.append,
                                max_running=max_running, uncounted=uncounted)

    def feed(self, *messages: Any) -> None:
        for message in messages:
            self.peer.feed(message if isinstance(message, str) else orjson.dumps(message).decode())

    async def settle(self) -> None:
        await self.peer.drain(5)


async def test_errors_carry_data_only_when_given() -> None:
    assert orjson.loads(error_line(1, -32000, "m")) == {
        "jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "m"}}
    w = Wire()
    w.feed({"jsonrpc": "2.0", "id": 1, "method": "fail"}, {"jsonrpc": "2.0", "id": 2, "method": "crash"})
    await w.settle()
    assert w.out == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "refused",
                                              "data": {"why": "because"}}},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "Internal error"}},
    ]
    assert w.errors == [-32000, -32603], "every error answer is counted"


async def test_error_answers_to_our_requests_keep_code_message_and_data() -> None:
    w = Wire()
    first = asyncio.create_task(w.peer.request("m", {}, 5))
    odd = asyncio.create_task(w.peer.request("m", {}, 5))
    await asyncio.sleep(0)
    w.feed({"jsonrpc": "2.0", "id": 0, "error": {"code": -32042, "message": "no", "data": [1, 2]}},
           {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": ""}})
    with pytest.raises(JsonRpcError) as exc:
        await first
    assert (exc.value.code, exc.value.message, exc.value.data) == (-32042, "no", [1, 2])
    with pytest.raises(JsonRpcError) as exc:
        await odd
    assert (exc.value.code, exc.value.message) == (-32603, "error without a message")


async def test_answers_are_matched_by_the_string_form_of_the_id() -> None:
    w = Wire()
    call = asyncio.create_task(w.peer.request("m", {"a": 1}, 5))
    await asyncio.sleep(0)
    assert w.out == [{"jsonrpc": "2.0", "id": 0, "method": "m", "params": {"a": 1}}]
    w.feed({"jsonrpc": "2.0", "id": "0", "result": {"x": 1}})
    assert await call == {"x": 1}
    assert len(w.peer.pending) == 0


async def test_prefixed_ids_count_per_peer() -> None:
    a, b = Wire(next_id=prefixed_ids("zc-out-")), Wire(next_id=prefixed_ids("zc-out-"))
    calls = [asyncio.create_task(w.peer.request("m", {}, 0.01)) for w in (a, a, b)]
    await asyncio.gather(*calls, return_exceptions=True)
    assert [m["id"] for m in a.out] == ["zc-out-0", "zc-out-1"] and b.out[0]["id"] == "zc-out-0"


async def test_adapter_side_never_answers_an_error_without_an_id() -> None:
    """Toward an adapter the edge is the client: its garbage is logged, not answered,
    so two peers can never answer each other's parse errors forever."""
    w = Wire(sink=True, answer_unidentified=False)
    await w.peer.feed_batch([
        "this is not json",
        '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: x"}}',
        "[1]",
        '{"jsonrpc":"2.0","id":{"a":1},"method":"m"}',
        '{"jsonrpc":"1.0","id":3,"method":"m"}',  # has an id: still answered
    ])
    await w.settle()
    assert w.out == [{"jsonrpc": "2.0", "id": 3,
                      "error": {"code": -32600, "message": "Invalid JSON-RPC version"}}]
    assert w.seen == [] and w.runs == []


async def test_batches_keep_stream_order() -> None:
    """A run of notifications is delivered before the response or request that ends it."""
    w = Wire(sink=True)
    order: list[str] = []
    call = asyncio.create_task(w.peer.request("session/prompt", {}, 5))
    await asyncio.sleep(0)
    call.add_done_callback(lambda _: order.append("result"))

    def note(i: int) -> str:
        return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"i": i}}).decode()

    await w.peer.feed_batch([note(0), note(1), "", '{"jsonrpc":"2.0","id":7,"method":"ask"}', note(2),
                             '{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}', note(3)])
    order.extend(f"run{len(run)}" for run in w.runs)
    assert await call == {"stopReason": "end_turn"}
    await w.settle()
    assert [[p["i"] for _, p in run] for run in w.runs] == [[0, 1], [2], [3]]
    assert order == ["run2", "run1", "run1", "result"]
    assert w.seen == [("ask", {}, False)]
    assert w.out[-1] == {"jsonrpc": "2.0", "id": 7, "result": {"ok": "ask"}}


async def test_a_batch_is_read_no_further_than_max_running_uncounted_methods_aside() -> None:
    """With ``max_running`` handlers running, the rest of a batch waits until one finishes;
    an ``uncounted`` method runs beside the bound."""
    w = Wire(sink=True, max_running=2, uncounted=frozenset({"wait"}))

    def req(i: int, method: str) -> str:
        return orjson.dumps({"jsonrpc": "2.0", "id": i, "method": method}).decode()

    feeding = asyncio.create_task(w.peer.feed_batch(
        [req(1, "hang"), req(2, "wait"), req(3, "hang"), req(4, "ask")]))
    for _ in range(10):  # whatever is ready runs: the batch stays held at the bound
        await asyncio.sleep(0)
    assert [method for method, _, _ in w.seen] == ["hang", "wait", "hang"]
    assert not feeding.done()
    w.release.set()
    await feeding
    await w.settle()
    assert [method for method, _, _ in w.seen] == ["hang", "wait", "hang", "ask"]
    assert sorted(m["id"] for m in w.out) == [1, 2, 3, 4]


async def test_cancelled_requests_are_answered_and_notifications_are_not() -> None:
    w = Wire()
    w.feed({"jsonrpc": "2.0", "id": "r", "method": "hang"}, {"jsonrpc": "2.0", "method": "hang"})
    await asyncio.sleep(0)
    assert w.peer.running == 2
    await w.peer.drain(0.01)  # bounded: the handlers are still running
    await w.peer.cancel()
    assert w.out == [{"jsonrpc": "2.0", "id": "r", "error": {"code": -32603,
                                                            "message": "Request cancelled"}}]
    assert w.peer.running == 0


async def test_the_other_sides_requests_are_known_while_served_and_can_be_withdrawn() -> None:
    """ACP ``$/cancel_request`` toward us: the handler can see what a pending request is
    (by the id's string form) and withdraw it; a withdrawn request is answered -32800
    ``Request cancelled`` once; an answered or unknown one cannot be withdrawn."""
    w = Wire()
    w.feed({"jsonrpc": "2.0", "id": 7, "method": "hang", "params": {"p": 1}},
           {"jsonrpc": "2.0", "id": "x", "method": "hang"},
           {"jsonrpc": "2.0", "id": 8, "method": "quick"})
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert w.peer.serving(7) == ("hang", {"p": 1}) == w.peer.serving("7")
    assert w.peer.serving(8) is None, "answered already"
    assert w.peer.serving(None) is None and w.peer.serving(True) is None
    assert w.peer.withdraw(7) is True
    assert w.peer.withdraw("nope") is False and w.peer.withdraw(8) is False
    await asyncio.sleep(0)
    assert w.peer.serving(7) is None
    assert w.peer.withdraw(7) is False, "withdrawn and answered: nothing left to withdraw"
    w.release.set()
    await w.settle()
    assert w.out == [
        {"jsonrpc": "2.0", "id": 8, "result": {"ok": "quick"}},
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -32800, "message": "Request cancelled"}},
        {"jsonrpc": "2.0", "id": "x", "result": {"ok": "hang"}},
    ]
    assert w.errors == [-32800]


async def test_our_requests_given_up_on_are_withdrawn_when_configured() -> None:
    """ACP ``$/cancel_request`` from us: a request that timed out or whose caller was
    cancelled is withdrawn with the configured notification; an answered one, or any on
    a peer without one, is not."""
    w = Wire(next_id=prefixed_ids("zc-out-"), withdraw_method="$/cancel_request")
    with pytest.raises(TimeoutError):
        await w.peer.request("ask", {}, 0.01)
    caller = asyncio.create_task(w.peer.request("ask", {}, 3600))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    answered = asyncio.create_task(w.peer.request("ask", {}, 3600))
    await asyncio.sleep(0)
    w.feed({"jsonrpc": "2.0", "id": "zc-out-2", "result": {}})
    assert await answered == {}
    await w.settle()
    withdrawn = [m["params"] for m in w.out if m.get("method") == "$/cancel_request"]
    assert withdrawn == [{"requestId": "zc-out-0"}, {"requestId": "zc-out-1"}]
    plain = Wire()
    with pytest.raises(TimeoutError):
        await plain.peer.request("ask", {}, 0.01)
    await plain.settle()
    assert [m.get("method") for m in plain.out] == ["ask"]


async def test_drain_stops_at_abort() -> None:
    w = Wire()
    w.feed({"jsonrpc": "2.0", "id": 1, "method": "hang"})
    abort = asyncio.Event()
    abort.set()
    await asyncio.wait_for(w.peer.drain(3600, abort), 5)
    assert w.peer.running == 1
    w.release.set()
    await w.settle()
    assert w.out == [{"jsonrpc": "2.0", "id": 1, "result": {"ok": "hang"}}]


async def test_input_end_and_write_failure_fail_our_requests() -> None:
    w = Wire()
    waiting = asyncio.create_task(w.peer.request("m", {}, 3600))
    await asyncio.sleep(0)

    async def no_more_lines() -> Any:
        for line in ():
            yield line

    await w.peer.serve(no_more_lines())
    with pytest.raises(PeerClosed):
        await waiting
    with pytest.raises(PeerClosed):
        await w.peer.request("m", {}, 3600)

    sends: list[str] = []

    async def broken(line: str) -> None:
        sends.append(line)
        raise BrokenPipeError("gone")

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        return {}

    peer = JsonRpcPeer(broken, handler, next_id=integer_ids())
    with pytest.raises(PeerClosed):
        await peer.request("m", {}, 3600)
    peer.feed('{"jsonrpc":"2.0","id":1,"method":"m"}')
    await peer.drain(5)
    await peer.notify("n", {})
    assert len(sends) == 1, "nothing more is written once the other side is gone"


async def test_the_first_close_names_the_cause() -> None:
    w = Wire()
    waiting = asyncio.create_task(w.peer.request("m", {}, 3600))
    await asyncio.sleep(0)
    w.peer.close_outbound(lambda: LookupError("first"))
    w.peer.close_outbound(lambda: PeerClosed("second"))
    with pytest.raises(LookupError, match="first"):
        await waiting
    with pytest.raises(LookupError, match="first"):
        await w.peer.request("m", {}, 1)


async def test_read_lines_turns_an_oversize_line_into_one_marker() -> None:
    stream = asyncio.StreamReader()
    stream.feed_data(b'{"a":1}\n' + b"x" * 300_000 + b"\n\n" + b"\xff{\n" + b"tail")
    stream.feed_eof()
    got = [line async for line in read_lines(stream, max_line=100_000)]
    assert got == ['{"a":1}', OVERSIZE_LINE, "", "\udcff{", "tail"]
    assert (got[1].size, got[1].limit) == (300_000, 100_000)


def test_line_splitter_one_by_one_counts_a_skipped_line_across_chunks_and_keeps_going() -> None:
    """The oversize marker carries the line's whole length, wherever the chunks cut it; a
    line of exactly the limit is a line; a line still being skipped at EOF is reported."""
    from services.common.jsonrpc import OversizeLine
    from services.common.line_split import LineSplitter

    cutter = LineSplitter(10, blocks=False)
    out: list[str] = []
    for chunk in (b"0123456789\nabc", b"defghijklmnop", b"qrst\nok", b"\n", b"zzzzzzzzzzzz"):
        out += cutter.feed(chunk)
    last = cutter.end()
    assert out[0] == "0123456789" and out[2] == "ok"
    assert isinstance(out[1], OversizeLine) and (out[1].size, out[1].limit) == (20, 10)
    assert isinstance(last, OversizeLine) and last.size == 12
    big = LineSplitter(10, blocks=False).feed(b"x" * 50 + b"\ny\n")  # one chunk longer than the limit
    assert isinstance(big[0], OversizeLine) and big[0].size == 50 and big[1] == "y"


async def test_an_answered_result_runs_its_then_after_the_answer_is_written() -> None:
    out: list[Any] = []

    async def send(line: str) -> None:
        out.append(orjson.loads(line))

    async def then() -> None:
        await send(orjson.dumps({"jsonrpc": "2.0", "method": "after"}).decode())

    async def handler(method: str, params: dict[str, Any], notification: bool) -> Any:
        return Answered({"sessionId": "s"}, then)

    peer = JsonRpcPeer(send, handler, next_id=integer_ids())
    peer.feed(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new"}).decode())
    await peer.drain(5)
    assert out == [{"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}},
                   {"jsonrpc": "2.0", "method": "after"}]
