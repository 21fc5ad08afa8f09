"""Skills inherited by ACP sessions (the seed: sessions inherit the agent's personality *and
skills* from the agent workspace), through `acpgate acp` and a real agent process.

The agent workspace holds `skills/<name>/SKILL.md`; the model (a local fake) gets the usable
ones listed in its system prompt next to IDENTITY.md, loads one with `skill_load`, reads a
file beside it with `file_read`, and cannot make `skill_load` follow a skill symlinked out of
`skills/`. A broken skill is left out and breaks nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply, tool_reply
from tests.e2e.harness import AcpProcess, updates, write_config

pytestmark = pytest.mark.slow


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_skills_are_listed_loaded_and_confined(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")
    agent_ws = Path(os.path.realpath(tmp_path / "agent-home"))
    _write(agent_ws / "IDENTITY.md", "You are Relay, the release assistant.")
    _write(agent_ws / "MEMORY.md", "MEMORY-IS-NOT-READ")
    _write(agent_ws / "skills" / "release" / "SKILL.md",
           "---\nname: release\ndescription: Cut a release (tag, changelog, publish).\n---\n"
           "1. Read checklist.md beside this file.\n2. Run `make release`.\n")
    _write(agent_ws / "skills" / "release" / "checklist.md", "CHECKLIST: bump the version")
    _write(agent_ws / "skills" / "broken" / "SKILL.md", "no front matter at all\n")
    outside = tmp_path / "outside"
    _write(outside / "SKILL.md", "---\ndescription: smuggled\n---\nOUTSIDE-SECRET\n")
    (agent_ws / "skills" / "escape").symlink_to(outside, target_is_directory=True)
    work = Path(os.path.realpath(tmp_path / "work"))
    work.mkdir()
    replies = [
        tool_reply(("skill_load", {"name": "release"}),
                   ("file_read", {"path": str(agent_ws / "skills" / "release" / "checklist.md")})),
        text_reply("released"),
        tool_reply(("skill_load", {"name": "escape"}), ("skill_load", {"name": "../outside"})),
        text_reply("refused"),
    ]
    with ModelServer(replies) as model:
        cfg = write_config(tmp_path / "cfg", default_agent="relay", autonomy="supervised",
                           extra=agent_entry("relay", model, f'workspace = "{agent_ws}"'))
        acp = AcpProcess(cfg)
        try:
            acp.handlers["session/request_permission"] = lambda p: {
                "outcome": {"outcome": "cancelled"}}
            sid = acp.new_session(cwd=str(work))
            before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "release"})
            assert resp["result"]["content"] == "released", resp
            assert not [m for m in before if m.get("method") == "session/request_permission"]
            system = model.requests[0].body["messages"][0]
            assert system["role"] == "system"
            prompt = system["content"]
            assert "You are Relay, the release assistant." in prompt
            assert "- `release`: Cut a release (tag, changelog, publish)." in prompt
            assert "broken" not in prompt and "smuggled" not in prompt and "escape" not in prompt
            assert "MEMORY-IS-NOT-READ" not in prompt
            assert "skill_load" in [t["function"]["name"] for t in model.requests[0].body["tools"]]
            done = {u["toolCallId"]: u for u in updates(before, sid)
                    if u["sessionUpdate"] == "tool_call_update"}
            loaded, beside = (done[c] for c in ("call_0", "call_1"))
            assert loaded["status"] == "completed" and loaded["kind"] == "read"
            assert "2. Run `make release`." in loaded["rawOutput"]
            assert beside["status"] == "completed"
            assert "CHECKLIST: bump the version" in beside["rawOutput"]

            before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "again"})
            assert resp["result"]["content"] == "refused", resp
            outputs = [u["rawOutput"] for u in updates(before, sid)
                       if u["sessionUpdate"] == "tool_call_update"]
            assert all(u["status"] == "failed" for u in updates(before, sid)
                       if u["sessionUpdate"] == "tool_call_update")
            assert "resolves outside" in outputs[0] and "`../outside` is not a skill name" in \
                outputs[1]
            assert not any("OUTSIDE-SECRET" in o for o in outputs)
            assert acp.close() == 0
        finally:
            acp.kill()
