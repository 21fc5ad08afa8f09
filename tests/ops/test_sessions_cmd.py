"""``acpgate sessions list|show|delete`` through a real ``acpgate serve``.

The operator lists every principal's stored sessions (owners by token label),
reads one's history readably, and deletes a stored one; a session being
served is not deleted from under its client, and without a running service
the command says so instead of opening the database.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import ACPGATE, child_env
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_list_show_and_delete_stored_sessions(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running_gateway(tmp_path / "gw") as gw:
        token = await gw.token("ci-runner")
        client = RawClient(await gw.connect(token))
        kept = (await client.result("session/new", {"cwd": str(work)}))["sessionId"]
        await client.result("session/prompt", {"sessionId": kept, "prompt": "first question"})
        await client.result("session/prompt", {"sessionId": kept,
                                                "prompt": "shell echo tool-output-line"})
        await client.result("session/close", {"sessionId": kept})
        live = (await client.result("session/new", {"cwd": str(work)}))["sessionId"]
        await client.result("session/prompt", {"sessionId": live, "prompt": "still here"})

        code, out, err = await gw.cli("sessions", "list")
        assert code == 0, err
        rows = {line.split()[0]: line for line in out.splitlines()[1:]}
        assert "ci-runner" in rows[kept] and "first question" in rows[kept]
        assert " active " in rows[live] and " active " not in rows[kept]
        code, out, err = await gw.cli("sessions", "list", "--json", "--query", "first")
        assert code == 0, err
        assert [r["session_id"] for r in json.loads(out)] == [kept]

        code, out, err = await gw.cli("sessions", "show", kept)
        assert code == 0, err
        assert f"session {kept}" in out and "owner ci-runner" in out
        assert "you: first question" in out and "agent: echo: first question" in out
        assert "→ shell" in out and "tool-output-line" in out and "── turn 2" in out
        code, out, err = await gw.cli("sessions", "show", kept, "--json")
        assert code == 0, err
        shown = json.loads(out)
        assert shown["session"]["session_id"] == kept and len(shown["history"]) >= 4

        code, _, err = await gw.cli("sessions", "delete", live)
        assert code == 1 and "is being served" in err, err
        code, out, err = await gw.cli("sessions", "delete", kept)
        assert (code, out.strip()) == (0, f"deleted {kept}"), err
        code, _, err = await gw.cli("sessions", "show", kept)
        assert code == 1 and f"Session not found: {kept}" in err, err
        await client.ws.close()
    # No service runs any more: nothing is read from the database behind its back.
    code, _, err = await gw.cli("sessions", "list")
    assert code == 1 and "no acpgate service runs" in err, err


def test_sessions_without_an_action_is_a_usage_error(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run([*ACPGATE, "sessions", "--config-dir", str(tmp_path)],
                          capture_output=True, text=True, env=child_env(), timeout=60)
    assert done.returncode == 2 and "list, show or delete" in done.stderr
