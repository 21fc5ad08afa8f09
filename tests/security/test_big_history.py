"""A session with a big history can still be loaded.

Five 15 MB prompts made ``session/load`` fail ("agent process connection lost"):
the edge sent the built-in agent the whole history as one JSON-RPC line, past
every line and message limit on the way, and held it several times over. A real
``acpgate acp`` (the offline demo model, which echoes each prompt: each turn
stores about twice the prompt) gets three 15 MiB prompts — about 90 MiB of
history, more than any single line may carry — then loads the session again:
the load answers, the replay is complete and exact, and the restored agent
knows the conversation (its next turn goes through with it). The memory this
takes is measured by ``make bench`` (group ``history``), not asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, message_texts, updates, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MIB = 1024 * 1024
PROMPTS = 3
#: Generous: a 15 MiB line goes through the edge, the store and the agent several times.
WAIT = 240.0


def big_prompt(n: int) -> str:
    return f"prompt {n} " + chr(ord("a") + n) * (15 * MIB)


def test_a_session_of_big_prompts_loads_whole(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    work = tmp_path / "work"
    work.mkdir()
    acp = AcpProcess(cfg)
    try:
        sid = acp.result("session/new", {"cwd": str(work)})["sessionId"]
        live: list[dict[str, Any]] = []
        for n in range(PROMPTS):
            before, resp = acp.call("session/prompt",
                                    {"sessionId": sid, "prompt": big_prompt(n)}, wait=WAIT)
            assert resp["result"]["stopReason"] == "end_turn", resp
            live.extend(updates(before, sid))
        assert acp.result("session/close", {"sessionId": sid}) == {}

        seen, resp = acp.call("session/load", {"sessionId": sid, "cwd": str(work)}, wait=WAIT)
        assert "result" in resp, resp
        *replayed, commands = updates(seen, sid)  # the restored agent's commands last
        assert commands["sessionUpdate"] == "available_commands_update"
        users = [u["content"]["text"] for u in replayed
                 if u["sessionUpdate"] == "user_message_chunk"]
        assert users == [big_prompt(n) for n in range(PROMPTS)]
        # every update as it was streamed, each echo's chunks joined into its message
        assert [u for u in replayed if u["sessionUpdate"] != "user_message_chunk"] == live
        echoes = [text for kind, text in message_texts(replayed)
                  if kind == "agent_message_chunk"]
        assert len(echoes) == PROMPTS and all(big_prompt(n) in echoes[n] for n in range(PROMPTS))

        # The restored agent carries on (the demo model says how long the prompt was).
        _, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "and now?"}, wait=WAIT)
        assert resp["result"]["stopReason"] == "end_turn", resp
    finally:
        assert acp.close() == 0
