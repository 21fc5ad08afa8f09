"""A built-in agent whose ``api_key_env`` names an unset variable says so.

Before, the request went out without a key and the user saw only the provider's
401. Against a real ``acpgate acp`` and a local model server: the first prompt
fails -32603 naming the variable and the config key, nothing reaches the model
server, and the edge's log (acpgate's stderr) says so when the session starts,
as the agent's own log does when it starts — never with a key in it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fake_model import ModelServer, text_reply
from tests.e2e.harness import AcpProcess, workspace_beside_config, write_config

pytestmark = pytest.mark.slow

#: A variable no test environment sets.
UNSET = "ACPGATE_E2E_NEVER_SET_KEY"
PROBLEM = f"{UNSET} (agents.keyless.api_key_env) is not set"


def _events(lines: list[str], event: str) -> list[dict[str, Any]]:
    """The JSON log records ``event`` among ``lines`` (other lines are skipped)."""
    out: list[dict[str, Any]] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == event:
            out.append(record)
    return out


def test_a_missing_api_key_is_named_on_the_first_prompt_and_in_the_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    with ModelServer([text_reply("a reply nobody asked for")]) as model:
        entry = f"""
[agents.keyless]
kind = "builtin"
provider = "openai"
model = "fake-model"
base_url = "{model.url}/v1"
api_key_env = "{UNSET}"
max_retries = 0
"""
        cfg = write_config(tmp_path / "cfg", default_agent="keyless", extra=entry)
        acp = AcpProcess(cfg)
        try:
            sid = acp.new_session(cwd=str(workspace_beside_config(tmp_path)))
            error = acp.error("session/prompt", {"sessionId": sid, "prompt": "hello"})
            # The agent's error exactly, acpgate's context beside it.
            assert error == {"code": -32603, "message": PROBLEM, "data": {"acpgate": {
                "during": "session/prompt", "agent": "keyless"}}}, error
            assert model.requests == []  # nothing went out without a key
        finally:
            assert acp.close() == 0
    # The edge said so at session start (the agent's own log is a file of the lease's).
    (warning,) = _events(acp.stderr, "agent_warning")
    assert (warning["warning"], warning["alias"], warning["session_id"]) == (
        PROBLEM, "keyless", sid)
    agent_logs = [line for path in (cfg / "data" / "lifecycle").rglob("*.log")
                  for line in path.read_text(errors="replace").splitlines()]
    assert any(r.get("problem") == PROBLEM for r in _events(agent_logs, "agent_misconfigured"))
