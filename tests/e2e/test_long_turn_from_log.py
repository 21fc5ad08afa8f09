"""A turn longer than what the edge keeps in memory is stored whole, built from the log.

A real ``acpgate acp`` with an external agent streaming well over the edge's per-turn
bound (``TURN_KEEP_CHARS``) in one turn: the turn's history (what a restored agent is
given) holds every chunk in order, one assistant item, exactly as a short turn's would —
the session service built it from the event log. A short turn beside it is unchanged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from services.edge.sessions.turn import TURN_KEEP_CHARS
from tests.e2e.harness import AcpProcess, write_config
from tests.security.scripted_agent import agent_section

pytestmark = pytest.mark.slow

CHUNK_CHARS = 2000
CHUNKS = TURN_KEEP_CHARS // CHUNK_CHARS * 3 // 2


def _history(cfg: Path, sid: str) -> list[tuple[int, str, str]]:
    with sqlite3.connect(cfg / "data" / "sessions" / "acp-sessions.db") as db:
        return [(int(t), str(r), str(x)) for t, r, x in db.execute(
            "SELECT turn, role, text FROM history WHERE session_id = ? ORDER BY seq", (sid,))]


def test_a_turn_past_the_edges_bound_is_stored_whole_from_the_log(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", autonomy="full", extra=agent_section("scripted"))
    proc = AcpProcess(cfg)
    try:
        sid = proc.new_session(agentAlias="scripted")
        assert proc.result("session/prompt", {"sessionId": sid, "prompt": "hello"}
                           )["stopReason"] == "end_turn"
        updates, resp = proc.call("session/prompt", {
            "sessionId": sid, "prompt": f"flood {CHUNKS} {CHUNK_CHARS}"})
        assert resp["result"]["stopReason"] == "end_turn"
        streamed = "".join(m["params"]["update"]["content"]["text"] for m in updates
                           if m.get("method") == "session/update")
        assert len(streamed) == CHUNKS * CHUNK_CHARS > TURN_KEEP_CHARS
        history = _history(cfg, sid)
        assert history[:2] == [(1, "user", "hello"), (1, "assistant", "echo: hello")]
        assert [(t, r) for t, r, _ in history[2:]] == [(2, "user"), (2, "assistant")]
        assert history[2][2] == f"flood {CHUNKS} {CHUNK_CHARS}"
        assert history[3][2] == streamed, "every chunk stored, in order, once"
        assert proc.close() == 0
    finally:
        proc.kill()
