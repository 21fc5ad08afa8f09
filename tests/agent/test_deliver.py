"""deliver_file exactly per SPEC §10, including the re-hash that catches a swapped file."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from services.agent.tools.base import ToolError
from services.agent.tools.deliver import DeliverFileTool
from services.common.protocol import MAX_BLOB_BYTES
from tests.agent.harness import make_config, running_agent
from tests.agent.test_tools import Env


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


async def test_deliver_embeds_content_addressed_resource(env: Env) -> None:
    data = b"%PDF-1.4 fake report"
    (env.ws / "Report.PDF").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    result = await DeliverFileTool().run({"path": "Report.PDF", "title": "Quarterly report"},
                                         env.ctx())
    assert result.finalize is not None and result.content is None
    final = await result.finalize()
    assert final.ok and final.title == "Quarterly report"
    uri = f"attachment://deliver/{digest}.pdf"
    assert uri in final.output and len(final.output) < 200  # a short summary, no base64
    resources = [c["content"]["resource"] for c in final.content or []
                 if c["content"]["type"] == "resource"]
    assert resources == [{"uri": uri, "mimeType": "application/pdf",
                          "blob": base64.b64encode(data).decode()}]
    assert (env.ws / "uploads" / f"{digest}.pdf").read_bytes() == data


async def test_swapped_file_fails_without_blob(env: Env) -> None:
    (env.ws / "a.txt").write_text("original")
    result = await DeliverFileTool().run({"path": "a.txt"}, env.ctx())
    (env.ws / "a.txt").write_text("swapped!")  # changed between check and embedding
    assert result.finalize is not None
    final = await result.finalize()
    assert not final.ok and final.content is None
    assert "changed after it was checked" in final.output
    assert final.title == "a.txt"


async def test_swap_to_symlink_outside_fails(env: Env) -> None:
    (env.ws / "b.txt").write_text("inside")
    result = await DeliverFileTool().run({"path": "b.txt"}, env.ctx())
    (env.ws / "b.txt").unlink()
    (env.ws / "b.txt").symlink_to(env.outside / "secret.txt")
    assert result.finalize is not None
    final = await result.finalize()
    assert not final.ok and final.content is None and "TOP SECRET" not in final.output


async def test_oversize_and_refusals(env: Env) -> None:
    big = env.ws / "big.bin"
    with big.open("wb") as f:
        f.truncate(MAX_BLOB_BYTES + 1)
    with pytest.raises(ToolError, match="too large"):
        await DeliverFileTool().run({"path": "big.bin"}, env.ctx())
    exact = env.ws / "exact.bin"
    with exact.open("wb") as f:
        f.truncate(MAX_BLOB_BYTES)
    ok = await DeliverFileTool().run({"path": "exact.bin"}, env.ctx())
    assert ok.ok
    with pytest.raises(ToolError, match="not a regular file"):
        await DeliverFileTool().run({"path": "sub"}, env.ctx())


async def test_deliver_update_over_acp(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("# notes")
    digest = hashlib.sha256(b"# notes").hexdigest()
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "deliver notes.md")
    assert c.requests == []  # deliver_file is auto-approved by default
    (update,) = c.of("tool_call_update")
    assert update["status"] == "completed" and update["title"] == "notes.md"
    assert update["kind"] == "other" and update["name"] == "deliver_file"
    assert update["rawOutput"] == update["body"] and "base64" not in update["rawOutput"]
    assert base64.b64encode(b"# notes").decode() not in update["rawOutput"]
    res = update["content"][-1]["content"]
    assert res["type"] == "resource"
    assert res["resource"]["uri"] == f"attachment://deliver/{digest}.md"
    assert base64.b64decode(res["resource"]["blob"]) == b"# notes"
