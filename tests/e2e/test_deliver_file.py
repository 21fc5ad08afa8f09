"""deliver_file through `acpgate acp` (SPEC §10): the edge relays the embedded resource untouched."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply, tool_reply
from tests.e2e.harness import AcpProcess, updates, write_config

pytestmark = pytest.mark.slow


def test_deliver_file_embeds_content_addressed_resource(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    payload = b"%PDF-1.4 quarterly numbers\n" + bytes(range(256))
    (workspace / "report.pdf").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    acp = AcpProcess(cfg)
    try:
        sid = acp.new_session(cwd=str(workspace))
        before, resp = acp.call("session/prompt",
                                {"sessionId": sid, "prompt": "deliver report.pdf"})
        assert resp["result"]["stopReason"] == "end_turn"
        ups = updates(before, sid)
        call = next(u for u in ups if u["sessionUpdate"] == "tool_call"
                    and u["name"] == "deliver_file")
        done = next(u for u in ups if u["sessionUpdate"] == "tool_call_update"
                    and u["toolCallId"] == call["toolCallId"])
        assert done["status"] == "completed"
        assert done["title"] == "report.pdf"  # no caller title → the file name
        assert "base64" not in str(done["rawOutput"]).lower()
        assert done["body"] == done["rawOutput"]
        assert len(str(done["rawOutput"])) < 500  # a short human summary, no blob
        # ... and no machine trailer: the uri is a field of the resource, not summary text.
        assert done["rawOutput"] == f"Delivered report.pdf ({len(payload)} bytes, application/pdf)"
        resources = [c["content"]["resource"] for c in done["content"]
                     if c.get("type") == "content" and c["content"].get("type") == "resource"]
        assert len(resources) == 1
        res = resources[0]
        assert res["uri"] == f"attachment://deliver/{digest}.pdf"  # never from the file name
        assert res["mimeType"] == "application/pdf"
        assert base64.b64decode(res["blob"]) == payload
        # The content-addressed copy sits in the session workspace's uploads/.
        assert (workspace / "uploads" / f"{digest}.pdf").read_bytes() == payload
    finally:
        assert acp.close() == 0


def _tool_messages(body: Any) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def test_the_model_gets_the_uri_as_a_json_field_also_after_a_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed: the tool result keeps the uri as the JSON field `uri` (the model copies it
    into citations), the client's rawOutput stays a summary without it; a restored session's
    model gets the same JSON back from the store."""
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")
    workspace = Path(os.path.realpath(tmp_path / "ws"))
    workspace.mkdir()
    payload = b"a,b\n1,2\n"
    (workspace / "data.csv").write_bytes(payload)
    uri = f"attachment://deliver/{hashlib.sha256(payload).hexdigest()}.csv"
    replies = [tool_reply(("deliver_file", {"path": "data.csv", "title": "Numbers"})),
               text_reply(f"Here: [1]({uri})"), text_reply("still here")]
    with ModelServer(replies) as model:
        cfg = write_config(tmp_path / "cfg", default_agent="boss",
                           extra=agent_entry("boss", model))
        acp = AcpProcess(cfg)
        try:
            sid = acp.new_session(cwd=str(workspace))
            before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "send it"})
            assert resp["result"]["stopReason"] == "end_turn", resp
            (done,) = [u for u in updates(before, sid) if u["sessionUpdate"] == "tool_call_update"]
            assert done["status"] == "completed" and done["title"] == "Numbers"
            assert done["rawOutput"] == f"Delivered data.csv ({len(payload)} bytes, text/csv)"
            assert "attachment://" not in done["rawOutput"] + done["body"]
            (seen,) = _tool_messages(model.requests[1].body)
            result = json.loads(seen)
            assert result == {"delivered": True, "uri": uri,
                              "path": str(workspace / "uploads" / uri.rsplit("/", 1)[1]),
                              "filename": "data.csv", "title": "Numbers", "mimeType": "text/csv",
                              "bytes": len(payload)}
            acp.result("session/close", {"sessionId": sid})
            acp.result("session/resume", {"sessionId": sid})
            acp.result("session/prompt", {"sessionId": sid, "prompt": "and now?"})
            (restored,) = _tool_messages(model.requests[2].body)
            assert json.loads(restored) == result
            acp.result("session/close", {"sessionId": sid})
            replay, resp = acp.call("session/load", {"sessionId": sid})
            assert "result" in resp, resp
            (shown, *_) = [u for u in updates(replay, sid)
                           if u["sessionUpdate"] == "tool_call_update"]
            assert shown["rawOutput"] == done["rawOutput"]  # the client's replay: the summary
            assert acp.close() == 0
        finally:
            acp.kill()
