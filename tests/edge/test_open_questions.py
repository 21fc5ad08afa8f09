"""Which logged questions (permission requests, elicitations) an edge re-adopting a session
asks again: those the log shows without an answer — not one answered, denied or withdrawn
(its answer logged with ``answer: null``), not another method, not an unreadable event."""

from __future__ import annotations

import orjson

from services.edge.sessions.open_questions import OpenQuestions

PERMISSION = "session/request_permission"
ELICITATION = "elicitation/create"


def _asked(rid: object, title: str) -> bytes:
    return orjson.dumps({"method": PERMISSION, "requestId": rid,
                         "params": {"toolCall": {"title": title}, "options": []}})


def _answered(rid: object, answer: object) -> bytes:
    return orjson.dumps({"method": PERMISSION, "requestId": rid, "answer": answer})


def test_only_requests_without_an_answer_are_open() -> None:
    questions = OpenQuestions()
    questions.see("permission", _asked("p1", "answered"))
    questions.see("permission", _asked(2, "open"))
    questions.see("update", _asked("p9", "not a permission event"))
    questions.see("permission", _asked("p3", "withdrawn"))
    questions.see("permission", _answered("p1", {"outcome": {"outcome": "cancelled"}}))
    questions.see("permission", _answered("p3", None))
    questions.see("permission", b"{not json")
    questions.see("permission", orjson.dumps({"method": "session/prompt",
                                              "requestId": "e1", "params": {}}))
    questions.see("permission", orjson.dumps({"method": PERMISSION, "params": {}}))
    open_ = questions.open()
    assert [(q.request_id, q.params["toolCall"]["title"]) for q in open_] == [(2, "open")]


def test_an_answer_matches_its_request_by_the_ids_string_form() -> None:
    questions = OpenQuestions()
    questions.see("permission", _asked(7, "asked with an integer id"))
    questions.see("permission", _answered("7", {"outcome": {"outcome": "selected"}}))
    assert questions.open() == []


def test_a_new_turn_forgets_the_previous_ones_questions() -> None:
    questions = OpenQuestions()
    questions.see("permission", _asked("p1", "an earlier turn's"))
    questions.clear()
    assert questions.open() == []


def test_an_elicitation_without_an_answer_is_open_with_its_method() -> None:
    questions = OpenQuestions()
    form = {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}
    questions.see("permission", orjson.dumps({"method": ELICITATION, "requestId": "e1",
                                              "params": form}))
    questions.see("permission", orjson.dumps({"method": ELICITATION, "requestId": "e2",
                                              "params": form}))
    questions.see("permission", orjson.dumps({"method": ELICITATION, "requestId": "e2",
                                              "answer": {"action": "cancel"}}))
    assert [(q.request_id, q.method, q.params) for q in questions.open()] == [
        ("e1", ELICITATION, form)]
