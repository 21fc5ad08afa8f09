"""A turn one session starts in another runs at most at the sender's autonomy.

A real ``acpgate serve``, one token, ``[sessions] visibility = "all"``. The
token's sessions: ``full`` built-in ones (the attacker's model), a
``supervised`` one on the same model, and two external agents (the ACP SDK
agent, which sends the session tools' extension requests as it is told): one
configured ``readonly``, one ``full``. The low sessions are driven to use the
session tools on the high ones:

- readonly → full built-in: the turn runs readonly, its shell is denied and the
  file it would write never appears; a child it spawns on the full alias is
  readonly too; an external target (or spawn) above readonly is refused;
- supervised → full built-in: the shell asks the target's own client (which
  says no) instead of running; and the capped turn cannot pass more on — the
  full session it sends to from there runs supervised as well.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MSG_SEND_ABOVE_AUTONOMY, MSG_SPAWN_ABOVE_AUTONOMY
from tests.e2e.harness import SDK_AGENT
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.test_principals import call, tool_says

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = """
[agents.low]
kind = "acp"
command = {python}
args = [{sdk}]
env = {{ SDK_AGENT_STATE = {state} }}
autonomy = "readonly"

[agents.careful]
kind = "builtin"
provider = "openai"
model = "attacker"
base_url = "{{model_url}}/v1"
max_retries = 0
autonomy = "supervised"

[agents.ext]
kind = "acp"
command = {python}
args = [{sdk}]
env = {{ SDK_AGENT_STATE = {state} }}

[sessions]
visibility = "all"

[a2a]
enabled = true
"""


async def new(client: RawClient, alias: str, cwd: Path) -> str:
    return str((await client.result("session/new", {"agentAlias": alias,
                                                    "cwd": str(cwd)}))["sessionId"])


async def ext_says(client: RawClient, sid: str, method: str, **params: Any) -> str:
    """The SDK agent of session ``sid`` sends ``_<method>`` to the edge: what it heard."""
    return await client.say(sid, f"ext {method} {json.dumps(params)}")


async def test_a_sent_turn_runs_at_most_at_the_senders_autonomy(tmp_path: Path) -> None:
    extra = AGENTS.format(python=json.dumps(sys.executable), sdk=json.dumps(str(SDK_AGENT)),
                          state=json.dumps(str(tmp_path / "sdk-state.json")))
    asked: list[dict[str, Any]] = []

    async def reject(msg: dict[str, Any]) -> dict[str, Any]:
        asked.append(msg["params"])
        return {"outcome": {"outcome": "selected", "optionId": "reject-once"}}

    async with running_gateway(tmp_path, autonomy="full", extra=extra, max_sessions=40,
                               autonomy_extra='auto_approve = ["sessions_*"]\n') as gw:
        client = RawClient(await gw.connect(await gw.token("a")), reject)
        project = tmp_path / "project"
        project.mkdir()
        full, full2, ext, low, careful = [await new(client, alias, project) for alias in (
            "attacker", "attacker", "ext", "low", "careful")]
        marks = {name: project / name for name in ("sent", "spawned", "asked", "relayed")}

        # readonly sender → full built-in target: the turn is readonly.
        heard = await ext_says(client, low, "acpgate/sessions_send", targetSessionId=full,
                               message=f"shell touch {marks['sent']}")
        assert heard.startswith("ext ok: "), heard
        out = json.loads(heard.removeprefix("ext ok: "))
        assert out["status"] == "completed", heard
        assert "denied by the session policy" in out["reply"], out
        # ... a child it spawns on the full alias likewise (its policy is capped).
        heard = await ext_says(client, low, "acpgate/sessions_spawn", agent="attacker",
                               prompt=f"shell touch {marks['spawned']}")
        assert "denied by the session policy" in json.loads(heard.removeprefix("ext ok: "))[
            "reply"], heard
        # ... and an external agent above readonly is refused: its turn cannot be capped.
        heard = await ext_says(client, low, "acpgate/sessions_send", targetSessionId=ext,
                               message="hello")
        assert heard == "ext error -32003: " + MSG_SEND_ABOVE_AUTONOMY.format(
            session_id=ext, agent="ext", target="full", sender="readonly")
        heard = await ext_says(client, low, "acpgate/sessions_spawn", agent="ext",
                               prompt="hello")
        assert heard == "ext error -32003: " + MSG_SPAWN_ABOVE_AUTONOMY.format(
            agent="ext", target="full", sender="readonly")
        assert asked == []

        # supervised sender → full target: the shell asks the target's own client.
        out = json.loads(await tool_says(client, careful, call(
            "sessions_send", sessionId=full, message=f"shell touch {marks['asked']}")))
        assert "The user denied the `shell` call." in out["reply"], out
        assert [(p["sessionId"], p["toolCall"]["rawInput"]["tool"]) for p in asked] == [
            (full, "shell")]
        # ... and the capped turn passes no more on: full → full2 runs supervised too.
        relay = call("sessions_send", sessionId=full2, message=f"shell touch {marks['relayed']}")
        out = json.loads(await tool_says(client, careful, call(
            "sessions_send", sessionId=full, message=relay)))
        assert "The user denied the `shell` call." in out["reply"], out
        assert [p["sessionId"] for p in asked] == [full, full2]

        # Nothing any of them was asked to write exists; the external agent never ran a turn.
        assert [name for name, path in marks.items() if path.exists()] == []
        history = await tool_says(client, full, call("sessions_history", sessionId=ext))
        assert json.loads(history)["items"] == []
        # The full sessions themselves still act at their own level for their own client.
        own = project / "own"
        await client.result("session/prompt", {"sessionId": full, "prompt": f"shell touch {own}"})
        assert own.exists()
        await client.ws.close()
