"""Session rows as a store before schema v12 wrote them, for the v12 migration tests of
both backends (SQL both accept): a caller inserts :data:`OLD_ROWS` into a v11 database."""

from __future__ import annotations

from typing import Final

#: Rows as v11 (or earlier) stored them, for the v12 step: a v2 agent's child (its id a
#: name-based UUID, version 5, under the parent that spawned it, no agent session, no
#: turn), a session another spawned (a random id), a version-5 id that ran turns, and a
#: top session. Only the first is a child.
CHILD: Final = "0b5e7c1d-3f4a-5b6c-8d7e-9f0a1b2c3d4e"
SPAWNED: Final = "6c1f2e3d-4b5a-4c7d-9e8f-0a1b2c3d4e5f"
RAN: Final = "1a2b3c4d-5e6f-5a7b-9c8d-7e6f5a4b3c2d"
PARENT_KEY: Final = "agent:a:acp:top"
OLD_ROWS: Final = (
    "INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity,"
    " session_key, spawned_by, parent_session_key, owner_session_key, adapter_session_id,"
    " last_turn) VALUES"
    f" ('top', 'a', '/w', 0, 0, '{PARENT_KEY}', '', '', '{PARENT_KEY}', 'agent-top', 1),"
    f" ('{CHILD}', 'a', '/w', 0, 0, 'agent:a:acp:{CHILD}', '{PARENT_KEY}',"
    f" '{PARENT_KEY}', '{PARENT_KEY}', '', 0),"
    f" ('{SPAWNED}', 'a', '/w', 0, 0, 'agent:a:acp:{SPAWNED}', '{PARENT_KEY}',"
    f" '{PARENT_KEY}', '{PARENT_KEY}', '', 0),"
    f" ('{RAN}', 'a', '/w', 0, 0, 'agent:a:acp:{RAN}', '{PARENT_KEY}',"
    f" '{PARENT_KEY}', '{PARENT_KEY}', 'agent-ran', 2)"
)

