"""The edge's event log through a real session service, on each store backend: what the
edge relays goes as chunks and is read back by ``ReadEvents`` event by event, exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.edge.backends.session import SessionBackend
from services.edge.sessions.event_log import EventLog
from services.edge.sessions.feed import SessionFeed

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub


async def _read(stub: Stub, sid: str, after: int = 0, before: int = 0) -> list[pb.LogEvent]:
    return [e async for page in stub.ReadEvents(pb.ReadEventsRequest(
        session_id=sid, after_event_id=after, before_event_id=before)) for e in page.events]


async def test_relayed_lines_and_actions_are_read_back_as_relayed(
        store_stub: Stub, tmp_path: Path) -> None:
    sid = "chunked"
    await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id=sid, agent_alias="alpha", workspace_dir=str(tmp_path)))
    log = EventLog(SessionBackend.of_stub(store_stub), lambda _sid: ("", 0), lambda _sid: None)
    await log.begin("edge-test", interrupt=False)
    try:
        feed = SessionFeed(sid, max_chars=1 << 20, start_id=1000)
        turn = feed.reserve_id()
        log.turn(sid, turn, "running")
        log.action(sid, turn, turn, "prompt", b'{"prompt":1}')
        relayed = []
        for burst in range(40):  # bursts that follow each other: a few chunks
            updates = [f"chunk {burst}.{i} é" for i in range(25)]
            events = feed.stamp(updates, None)
            relayed += events
            log.updates(sid, turn, events)
        cancel = feed.reserve_id()
        log.action(sid, cancel, turn, "cancel", b'{"method":"session/cancel"}')
        late = feed.stamp([{"sessionUpdate": "tool_call", "toolCallId": "t1"}], None)
        log.updates(sid, turn, late)
        log.turn(sid, turn, "cancelled")
        assert await log.flush()
    finally:
        await log.close()
    got = await _read(store_stub, sid)
    expected = [(turn, "prompt"), *[(e.event_id, "update") for e in relayed],
                (cancel, "cancel"), (late[0].event_id, "update")]
    assert [(e.event_id, e.kind) for e in got] == expected
    lines = {e.event_id: e.line.encode() for e in [*relayed, *late]}
    assert all(e.payload == lines[e.event_id] for e in got if e.kind == "update")
    assert all(e.turn_id == turn for e in got)
    # A range inside the relayed run is cut exactly.
    middle = relayed[300].event_id
    assert [e.event_id for e in await _read(store_stub, sid, middle - 1, middle + 2)] == \
        [middle, middle + 1]


async def test_running_turn_only_reads_from_the_running_turns_prompt(
        store_stub: Stub, tmp_path: Path) -> None:
    """What an edge re-adopting a session reads: the running turn's events alone, not the
    turns before it; nothing once no turn runs."""
    sid = "running"
    await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id=sid, agent_alias="alpha", workspace_dir=str(tmp_path)))
    log = EventLog(SessionBackend.of_stub(store_stub), lambda _sid: ("", 0), lambda _sid: None)
    await log.begin("edge-test", interrupt=False)
    feed = SessionFeed(sid, max_chars=1 << 20, start_id=1000)

    def turn(state: str) -> tuple[int, list[int]]:
        turn_id = feed.reserve_id()
        log.turn(sid, turn_id, "running")
        log.action(sid, turn_id, turn_id, "prompt", b'{"prompt":1}')
        events = feed.stamp([f"chunk {i}" for i in range(30)], None)
        log.updates(sid, turn_id, events)
        if state != "running":
            log.turn(sid, turn_id, state)
        return turn_id, [e.event_id for e in events]

    async def running_only() -> list[pb.LogEvent]:
        return [e async for page in store_stub.ReadEvents(pb.ReadEventsRequest(
            session_id=sid, running_turn_only=True)) for e in page.events]

    try:
        for _ in range(3):
            turn("completed")
        assert await log.flush()
        assert await running_only() == []
        running, updates = turn("running")
        assert await log.flush()
        got = await running_only()
        assert [(e.event_id, e.kind) for e in got] == \
            [(running, "prompt"), *[(u, "update") for u in updates]]
        assert all(e.turn_id == running for e in got)
        assert len(await _read(store_stub, sid)) == 4 * 31  # the whole log is still there
    finally:
        await log.close()
