"""The remote transport's pure parts: the RFD routing, the event streams, the budget.

``services/edge/transport/streamable/routing.py`` decides where each message goes;
``streams.py`` numbers, keeps and bounds events. No sockets here: the wire is
tested in ``tests/gateway/test_streamable_*.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.edge.transport.outqueue import PutResult
from services.edge.transport.streamable.routing import (
    CAPTURED,
    CONNECTION,
    Router,
    classify,
    id_key,
)
from services.edge.transport.streamable.streams import (
    REPLAY_CHARS,
    REPLAY_EVENTS,
    Budget,
    EventStream,
)


def req(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if rid is not None:
        msg["id"] = rid
    return msg


def answer(rid: Any, result: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result if result is not None else {}}


def test_ids_are_keyed_by_type() -> None:
    assert id_key(1) != id_key("1")
    assert id_key(True) is None and id_key({}) is None
    assert id_key(None) == ("null", None)


def test_the_initialize_answer_is_captured() -> None:
    r = Router()
    r.accepted(classify(req("initialize", {}, 0)), None)
    assert r.route(answer(0)) == CAPTURED
    assert r.route(answer(0)) == CONNECTION  # only once


def test_session_new_attaches_and_its_answer_goes_on_the_connection_stream() -> None:
    r = Router()
    r.accepted(classify(req("session/new", {}, 2)), None)
    assert r.route(answer(2, {"sessionId": "s1"})) == CONNECTION
    assert "s1" in r.attached
    # From then on the session's messages go on its stream, everything else does not.
    assert r.route(req("session/update", {"sessionId": "s1"}, None)) == "s1"
    assert r.route(req("session/update", {"sessionId": "s2"}, None)) == CONNECTION
    assert r.route(req("fs/read_text_file", {"path": "/x"}, "zc-out-1")) == CONNECTION


def test_answers_follow_their_request() -> None:
    r = Router()
    r.attach("s1")
    r.accepted(classify(req("session/prompt", {"sessionId": "s1"}, 3)), "s1")
    r.accepted(classify(req("session/list", {}, 4)), None)
    r.accepted(classify(req("session/load", {"sessionId": "s1"}, 5)), "s1")
    r.accepted(classify(req("session/delete", {"sessionId": "s9"}, 6)), None)
    assert r.route(answer(3)) == "s1"
    assert r.route(answer(4)) == CONNECTION
    assert r.route(answer(5)) == CONNECTION  # load: the RFD's connection stream
    assert r.route(answer(6)) == CONNECTION  # s9 has no stream


def test_the_rfd_s_400s() -> None:
    r = Router()
    prompt = classify(req("session/prompt", {"sessionId": "s1"}))
    assert r.check(prompt, None) is not None and r.check(prompt, None).status == 400  # type: ignore[union-attr]
    assert r.check(prompt, "s2") is not None
    assert r.check(prompt, "s1") is None
    # A load needs no header (the Python SDK sends none), but may carry one.
    assert r.check(classify(req("session/load", {"sessionId": "s1"})), None) is None
    # An answer must come for the session its request went out on.
    r.attach("s1")
    assert r.route(req("session/request_permission", {"sessionId": "s1"}, "zc-out-1")) == "s1"
    ans = classify(answer("zc-out-1"))
    assert r.check(ans, "s2") is not None
    assert r.check(ans, "s1") is None and r.check(ans, None) is None


def test_attached_sessions_are_bounded() -> None:
    idle: list[str] = []
    r = Router(evict=lambda: idle.pop(0) if idle else None, max_sessions=2)
    assert r.attach("a") and r.attach("b")
    assert not r.attach("c")  # nothing may be dropped
    idle.append("a")
    assert r.attach("c") and list(r.attached) == ["b", "c"]


def test_a_stream_numbers_replays_and_forgets_past_its_bound() -> None:
    s = EventStream(None)
    for n in range(5):
        s.append(f"m{n}")
    events, chars, count = s.take(1 << 20)
    assert [e.id for e in events] == [1, 2, 3, 4, 5] and count == 5 and chars == 10
    token, gap = s.attach(2)  # a reader that saw 1..2
    assert gap is None
    events, chars, count = s.take(1 << 20)
    assert [e.id for e in events] == [3, 4, 5] and count == 0  # written before: no budget back
    s.detach(token)
    assert s.reader is None
    for _ in range(REPLAY_EVENTS + 10):
        s.append("x")
    s.take(1 << 30)
    _, gap = s.attach(0)
    assert gap is not None and gap.missed_from == 1
    assert s.take(1 << 30)[0][0].id == gap.missed_to + 1
    big = EventStream("s")
    big.append("y" * (REPLAY_CHARS + 1))
    big.append("z")
    big.take(1 << 30)
    _, gap = big.attach(0)
    assert gap is not None  # the oversized one was dropped once written


def test_a_new_reader_replaces_the_old_one() -> None:
    s = EventStream(None)
    old, _ = s.attach(None)
    new, _ = s.attach(None)
    assert s.reader is new and old is not new
    s.detach(old)
    assert s.reader is new


async def test_the_budget_waits_in_order_and_bounds_what_waits() -> None:
    budget = Budget(max_chars=10, max_messages=2, max_waiting=1, max_waiting_chars=100)
    log: list[str] = []
    assert await budget.admit(5, 1, lambda: log.append("a"), 1) is PutResult.QUEUED
    assert await budget.admit(5, 1, lambda: log.append("b"), 1) is PutResult.QUEUED
    waiting = asyncio.ensure_future(budget.admit(5, 1, lambda: log.append("c"), 30))
    await asyncio.sleep(0)
    assert await budget.admit(5, 1, lambda: log.append("d"), 1) is PutResult.OVERFLOW
    budget.release(5, 1)
    assert await waiting is PutResult.QUEUED
    assert log == ["a", "b", "c"]
    assert await budget.admit(5, 1, lambda: None, 0.01) is PutResult.TIMED_OUT
    budget.close()
    assert await budget.admit(1, 1, lambda: None, 1) is PutResult.CLOSED
