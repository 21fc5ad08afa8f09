"""The session's event log in the store, on SQLite and PostgreSQL: batches of many sessions,
idempotent appends, fenced parts, turn states set once, interrupted turns, replay reads."""

from __future__ import annotations

import orjson

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.log_forms import FORM_TEXT_CHUNKS, TEXT_CHUNK_MID, TEXT_CHUNK_TAIL
from services.common.turn_items import TurnAccumulator
from services.session.api.turn_from_log import turn_items_from_log
from services.session.store import HistoryEntry, NewSession, SessionStore
from services.session.store.event_log import (
    REFUSED_FENCED,
    REFUSED_NOT_FOUND,
    EventChunk,
    LoggedEvent,
    SessionBatch,
    TurnMark,
)
from tests.session.conftest import Backend

TTL = 30_000


def ev(event_id: int, turn_id: int = 0, kind: str = "update",
       payload: bytes = b'{"x":1}') -> LoggedEvent:
    return LoggedEvent(event_id, turn_id, kind, payload, 1)


async def read_all(store: SessionStore, sid: str, **kw: int) -> list[LoggedEvent]:
    return [e async for page in store.iter_events(sid, **kw) for e in page]


async def test_a_batch_of_many_sessions_is_written_and_read_back(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    await store.create_session(NewSession("b", "alpha", "/w"))
    refused = await store.append_events([
        SessionBatch("a", [ev(10, 10, "prompt"), ev(11, 10), ev(12, 10, payload=b"\x00\xff")],
                     [TurnMark(10, "running", 1)]),
        SessionBatch("b", [ev(5)]),
        SessionBatch("missing", [ev(1)]),
    ])
    assert refused == ["", "", REFUSED_NOT_FOUND]
    got = await read_all(store, "a")
    assert [(e.event_id, e.kind, e.payload) for e in got] == [
        (10, "prompt", b'{"x":1}'), (11, "update", b'{"x":1}'), (12, "update", b"\x00\xff")]
    assert [e.event_id for e in await read_all(store, "a", after=10, before=12)] == [11]
    assert await store.turn_states("a") == {10: "running"}


async def test_an_event_sent_twice_is_stored_once(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    batch = SessionBatch("a", [ev(1), ev(2)])
    assert await store.append_events([batch]) == [""]
    assert await store.append_events([batch, SessionBatch("a", [ev(2), ev(3)])]) == ["", ""]
    assert [e.event_id for e in await read_all(store, "a")] == [1, 2, 3]


async def test_pages_cover_every_event_in_order(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    await store.append_events([SessionBatch("a", [ev(i) for i in range(1, 1202)])])
    pages = [page async for page in store.iter_events("a", page=500)]
    assert [len(p) for p in pages] == [500, 500, 201]
    assert [e.event_id for p in pages for e in p] == list(range(1, 1202))


async def test_a_fenced_part_writes_nothing_and_the_others_are_written(
        store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w", gateway_instance_id="host-a",
                               claim_ttl_ms=TTL))
    await store.create_session(NewSession("b", "alpha", "/w"))
    refused = await store.append_events([
        SessionBatch("a", [ev(1)], holder="host-b", generation=1),
        SessionBatch("a", [ev(2)], holder="host-a", generation=2),
        SessionBatch("b", [ev(3)], holder="host-b", generation=0),
        SessionBatch("a", [ev(4)], holder="host-a", generation=1),
    ])
    assert refused == [REFUSED_FENCED, REFUSED_FENCED, "", ""]
    assert [e.event_id for e in await read_all(store, "a")] == [4]
    # Released: the holder's last events still land; after another host's claim, not.
    assert await store.release_claim("a", "host-a", 1)
    assert await store.append_events([SessionBatch("a", [ev(5)], holder="host-a",
                                                   generation=1)]) == [""]
    await store.claim("a", "host-a", ttl_ms=TTL)  # restored on the same host: generation 2
    assert await store.append_events([SessionBatch("a", [ev(7)], holder="host-a",
                                                   generation=1)]) == [""]
    await store.release_claim("a", "host-a")
    await store.claim("a", "host-b", ttl_ms=TTL)
    await store.release_claim("a", "host-b")
    assert await store.append_events([SessionBatch("a", [ev(6)], holder="host-a",
                                                   generation=1)]) == [REFUSED_FENCED]


async def test_bad_parts_are_refused_whole(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    refused = await store.append_events([
        SessionBatch("a", [ev(1), ev(2, kind="forged")]),
        SessionBatch("a", [ev(3)], [TurnMark(3, "done", 1)]),
        SessionBatch("a", [ev(0)]),
        SessionBatch("a", [ev(2**53)]),
    ])
    assert all(r.startswith("invalid:") for r in refused)
    assert await read_all(store, "a") == []


async def test_a_final_turn_state_is_never_changed(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    await store.append_events([SessionBatch("a", [], [TurnMark(7, "running", 1),
                                                      TurnMark(7, "completed", 2)])])
    await store.append_events([SessionBatch("a", [], [TurnMark(7, "running", 3),
                                                      TurnMark(7, "cancelled", 4)])])
    assert await store.turn_states("a") == {7: "completed"}


async def test_a_parts_marks_of_several_turns_apply_in_order(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    await store.append_events([SessionBatch("a", [ev(1, 7)], [
        TurnMark(7, "running", 1), TurnMark(7, "cancelled", 2), TurnMark(7, "completed", 3),
        TurnMark(8, "running", 4), TurnMark(9, "failed", 5)])])
    assert await store.turn_states("a") == {7: "cancelled", 8: "running", 9: "failed"}


async def test_a_fenced_or_missing_parts_turn_marks_are_not_written(
        store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w", gateway_instance_id="host-a",
                               claim_ttl_ms=TTL))
    refused = await store.append_events([
        SessionBatch("a", [ev(1, 1)], [TurnMark(1, "running", 1)], holder="host-b",
                     generation=1)])
    assert refused == [REFUSED_FENCED]
    refused = await store.append_events([
        SessionBatch("gone", [ev(1, 1)], [TurnMark(1, "running", 1)])])
    assert refused == [REFUSED_NOT_FOUND]
    assert await store.turn_states("a") == {}


async def test_running_turns_of_a_dead_instance_are_interrupted(store: SessionStore) -> None:
    await store.create_session(NewSession("mine", "alpha", "/w", gateway_instance_id="slot-0",
                               claim_ttl_ms=TTL))
    await store.create_session(NewSession("live", "alpha", "/w", gateway_instance_id="other",
                               claim_ttl_ms=TTL))
    await store.create_session(NewSession("free", "alpha", "/w"))
    for sid, holder in (("mine", "slot-0"), ("live", "other"), ("free", None)):
        await store.append_events([SessionBatch(sid, [], [TurnMark(1, "running", 1)],
                                                holder=holder)])
    assert await store.interrupt_turns(instance_id="slot-0") == 2
    assert await store.turn_states("mine") == {1: "interrupted"}
    assert await store.turn_states("free") == {1: "interrupted"}
    assert await store.turn_states("live") == {1: "running"}
    # The dead turn's late end does not change it back.
    await store.append_events([SessionBatch("mine", [], [TurnMark(1, "completed", 9)])])
    assert await store.turn_states("mine") == {1: "interrupted"}
    assert await store.interrupt_turns(session_id="live") == 1
    assert await store.turn_states("live") == {1: "interrupted"}


async def test_a_new_sessions_log_covers_every_turn(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    await store.append_turn("a", [HistoryEntry(role="user", text="first")])
    await store.append_events([SessionBatch("a", [ev(1)])])
    assert await store.log_start("a") == 1


async def test_a_forks_log_starts_after_its_copied_turns(store: SessionStore) -> None:
    await store.create_session(NewSession("p", "alpha", "/w"))
    await store.append_turn("p", [HistoryEntry(role="user", text="old")])
    await store.fork_session("p", "a", agent_alias="alpha", gateway_instance_id="i",
                             claim_ttl_ms=TTL)
    assert await store.log_start("a") == 0
    await store.append_events([SessionBatch("a", [ev(1)])])
    await store.append_turn("a", [HistoryEntry(role="user", text="new")])
    await store.append_events([SessionBatch("a", [ev(2)])])
    assert await store.log_start("a") == 2


async def test_a_deleted_session_takes_its_log_with_it(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    await store.append_events([SessionBatch("a", [ev(1)], [TurnMark(1, "running", 1)])])
    assert await store.delete_session("a")
    await store.create_session(NewSession("a", "alpha", "/w"))
    assert await read_all(store, "a") == []
    assert await store.turn_states("a") == {}


def chunk(first: int, lines: list[bytes], prefix: bytes = b"", turn_id: int = 1) -> EventChunk:
    return EventChunk(first, first + len(lines) - 1, turn_id, "update", b"\n".join(lines), 1,
                      prefix)


async def test_a_chunk_is_read_back_as_its_events_one_by_one(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    head = b'{"params":{"update":{"eventId":'
    relayed = [b"10}}}", b"11,\"t\":\"\xc3\xa9\"}}}", b"12}}}"]
    refused = await store.append_events([SessionBatch(
        "a", [ev(9, 9, "prompt"), ev(13, 9, "cancel")], [TurnMark(9, "running", 1)],
        chunks=[chunk(10, relayed, head, turn_id=9), chunk(14, [b"x", b"y"], turn_id=9)])])
    assert refused == [""]
    got = await read_all(store, "a")
    assert [(e.event_id, e.turn_id, e.kind, e.payload) for e in got] == [
        (9, 9, "prompt", b'{"x":1}'), *[(10 + i, 9, "update", head + line)
                                        for i, line in enumerate(relayed)],
        (13, 9, "cancel", b'{"x":1}'), (14, 9, "update", b"x"), (15, 9, "update", b"y")]
    # Bounds inside a chunk cut it there; pages count events, not chunks.
    assert [e.event_id for e in await read_all(store, "a", after=10, before=15)] == \
        [11, 12, 13, 14]
    assert [e.event_id for e in await read_all(store, "a", after=11, before=12)] == []
    pages = [[e.event_id for e in p] async for p in store.iter_events("a", page=4)]
    assert pages == [[9, 10, 11, 12], [13, 14, 15]]


async def test_a_chunk_sent_again_is_stored_once(store: SessionStore, backend: Backend) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    first = SessionBatch("a", chunks=[chunk(1, [b"a", b"b"])])
    assert await store.append_events([first]) == [""]
    assert await store.append_events([first, SessionBatch(
        "a", chunks=[chunk(1, [b"a", b"b"]), chunk(3, [b"c"])])]) == ["", ""]
    assert [e.payload for e in await read_all(store, "a")] == [b"a", b"b", b"c"]
    assert await backend.count("SELECT count(*) FROM event_chunks") == 2


async def test_many_chunks_are_read_in_order_across_queries(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    chunks = [chunk(1 + 3 * i, [b"%d" % (1 + 3 * i + j) for j in range(3)])
              for i in range(150)]
    await store.append_events([SessionBatch("a", chunks=chunks)])
    got = await read_all(store, "a", after=5, before=440)
    assert [e.event_id for e in got] == list(range(6, 440))
    assert all(e.payload == b"%d" % e.event_id for e in got)


async def test_a_chunk_of_text_chunks_is_read_back_as_their_lines(store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    head = b'{"params":{"update":{"_meta":{"acpgate":{"eventId":'
    texts = [b"hello", b"w\xc3\xb6rld"]
    await store.append_events([SessionBatch("a", chunks=[EventChunk(
        41, 42, 7, "update", b"\n".join(texts), 1, head, FORM_TEXT_CHUNKS)])])
    assert [(e.event_id, e.payload) for e in await read_all(store, "a")] == [
        (41 + i, head + b"%d" % (41 + i) + TEXT_CHUNK_MID.encode() + text
         + TEXT_CHUNK_TAIL.encode()) for i, text in enumerate(texts)]


async def test_a_chunk_whose_payload_does_not_match_its_ids_is_refused(
        store: SessionStore) -> None:
    await store.create_session(NewSession("a", "alpha", "/w"))
    bad = EventChunk(1, 3, 0, "update", b"one\ntwo", 1)
    backwards = EventChunk(5, 4, 0, "update", b"", 1)
    no_form = EventChunk(6, 6, 0, "update", b"x", 1, b"", 9)
    prompt_text = EventChunk(7, 7, 0, "prompt", b"x", 1, b"", FORM_TEXT_CHUNKS)
    refused = await store.append_events([SessionBatch("a", chunks=[c]) for c in
                                         (bad, backwards, no_form, prompt_text)])
    assert all(r.startswith("invalid:") for r in refused), refused
    assert await read_all(store, "a") == []


async def test_a_turn_is_built_from_its_chunks_as_from_their_lines(store: SessionStore) -> None:
    """A spilled turn's items come from the log: a chunk of assistant text chunks gives its
    texts as stored, and the items are those its lines, parsed one by one, give; events
    of other turns are left out, an unreadable line is skipped either way."""
    await store.create_session(NewSession("a", "alpha", "/w"))
    head = (b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":'
            b'{"sessionUpdate":"agent_message_chunk","messageId":"m1","_meta":{"acpgate":'
            b'{"eventId":')
    tool = (b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":'
            b'{"sessionUpdate":"tool_call","toolCallId":"t1","title":"look","status":"pending"}}}')
    await store.append_events([SessionBatch("a", [
        ev(10, 10, "prompt"), ev(14, 10, payload=tool), ev(17, 20, payload=tool),
        ev(18, 10, payload=b"not json")], [TurnMark(10, "running", 1)], chunks=[
        EventChunk(11, 13, 10, "update", "Hello, \nw\u00f6rld\n!".encode(), 1, head,
                   FORM_TEXT_CHUNKS),
        EventChunk(15, 16, 10, "update", b"more\ntext", 1, head, FORM_TEXT_CHUNKS)])])
    items, plan = await turn_items_from_log(store, "a", 10)
    reference = TurnAccumulator(user_text="")
    for e in await read_all(store, "a", after=10):
        if e.turn_id == 10 and e.kind == "update" and e.payload.startswith(b"{"):
            reference.add_many([orjson.loads(e.payload)["params"]["update"]])
    assert items == reference.items[1:] and plan is None
    texts = [i.text for i in items if i.role == pb.HistoryItem.ROLE_ASSISTANT]
    assert len(texts) == 2 and "Hello, w\u00f6rld!" in texts[0] and "moretext" in texts[1]
    # Read as chunks, a range is cut to its bounds, inside a chunk too.
    cut = [(c.first, c.last, c.parts()) async for page in store.iter_chunks(
        "a", after=11, before=16) for c in page]
    assert cut == [(12, 13, ["w\u00f6rld".encode(), b"!"]), (14, 14, [tool]),
                   (15, 15, [b"more"])]
