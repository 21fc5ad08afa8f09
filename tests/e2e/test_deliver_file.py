"""deliver_file through `acpgate acp` (SPEC §10): the edge relays the embedded resource untouched."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

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
