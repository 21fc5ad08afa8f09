"""An observer from the attacker's side: a second connection of the session's own token,
attached with ``role: "observer"``, tries everything that would change or end the live
session while its controller's turn waits on a permission request.

Every method naming the observed session other than detach, attach, list and fork is
refused -32006 — served by acpgate (delete, close, stop, cancel, prompt, the mode, config
and model changes, load, resume, inbound events) or relayed to the agent (extension and
unknown methods), as a request, under the ``session_id`` alias, or as a notification —
and nothing of it reaches the agent. A permission answer from the observer counts for
nothing, even one to a request it was asked while it was a controller. The controller's
turn and its permission request survive, and the session stays live and loadable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.attach_client import initialize, read_until, text_of
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, Token, running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: Every method an observer might use to change or end the session, or its agent's state.
ACTING = ("session/delete", "session/close", "session/stop", "session/cancel",
          "session/prompt", "session/set_mode", "session/set_config_option",
          "session/set_model", "session/load", "session/resume", "session/event",
          "session/update", "_vendor/poke", "future/method")


def _is_permission(msg: dict[str, Any]) -> bool:
    return msg.get("method") == "session/request_permission"


def _answer(request_id: Any, option: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id,
                       "result": {"outcome": {"outcome": "selected", "optionId": option}}})


async def _client(gw: Gateway, token: Token, name: str) -> RawClient:
    client = RawClient(await gw.connect(token))
    await client.result("initialize", initialize(name))
    return client


async def test_an_observer_can_neither_end_nor_change_the_session(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with running_gateway(tmp_path, extra=agent_section("hostile", str(log))) as gw:
        token = await gw.token("owner")
        owner = await _client(gw, token, "laptop")
        sid = (await owner.result("session/new", {"agentAlias": "hostile"}))["sessionId"]
        prompt_id = await owner.send("session/prompt", {"sessionId": sid, "prompt": "ask"})
        asked = (await read_until(owner.ws, _is_permission))[-1]

        watcher = await _client(gw, token, "phone")
        await watcher.result("session/attach", {"sessionId": sid, "role": "observer",
                                                "historyPolicy": "none"})
        params = {"sessionId": sid, "prompt": "x", "modeId": "x", "configId": "x",
                  "value": "x", "modelId": "x", "cwd": str(tmp_path)}
        for method in ACTING:
            _, err = await watcher.call(method, params)
            assert err.get("error", {}).get("code") == -32006, (method, err)
            assert "observer" in err["error"]["message"]
        _, alias = await watcher.call("session/delete", {"session_id": sid})
        assert alias["error"]["code"] == -32006, alias
        for method in ("session/cancel", "session/delete", "_vendor/poke"):
            await watcher.send(method, {"sessionId": sid}, notify=True)
        # An answer to the controller's permission request, which it was never asked.
        await watcher.ws.send(_answer(asked["id"], "forged"))
        _, listed = await watcher.call("session/list", {})
        assert sid in [s["sessionId"] for s in listed["result"]["sessions"]], listed
        assert not log.exists() or "cancel" not in log.read_text(), "a cancel reached the agent"

        # The controller's turn and its pending request survived; its answer is the one.
        await owner.ws.send(_answer(asked["id"], "allow"))
        seen, resp = await owner.until_response(prompt_id)
        assert resp["result"]["stopReason"] == "end_turn", resp
        assert '"optionId": "allow"' in text_of(seen), text_of(seen)
        assert (await gw.metrics())["acpgate_active_sessions"] == 1
        assert "echo: still here" in await owner.say(sid, "still here")
        await watcher.ws.close()

        # And it is still the owner's to close and load again.
        await owner.result("session/close", {"sessionId": sid})
        await owner.ws.close()
        again = await _client(gw, token, "laptop")
        await again.result("session/load", {"sessionId": sid})
        reply = await again.say(sid, "back")  # the agent is handed the whole conversation
        assert "Assistant: echo: still here" in reply and reply.endswith("back"), reply
        await again.ws.close()


async def test_a_controller_turned_observer_cannot_answer_what_it_was_asked(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("hostile")) as gw:
        token = await gw.token("owner")
        owner = await _client(gw, token, "laptop")
        sid = (await owner.result("session/new", {"agentAlias": "hostile"}))["sessionId"]
        prompt_id = await owner.send("session/prompt", {"sessionId": sid, "prompt": "ask"})
        asked = (await read_until(owner.ws, _is_permission))[-1]

        second = await _client(gw, token, "phone")
        await second.send("session/attach", {"sessionId": sid, "historyPolicy": "none"})
        its_copy = (await read_until(second.ws, _is_permission))[-1]  # a controller: asked
        await second.result("session/detach", {"sessionId": sid})
        await second.result("session/attach", {"sessionId": sid, "role": "observer",
                                                "historyPolicy": "none"})
        await second.ws.send(_answer(its_copy["id"], "forged"))
        _, ping = await second.call("session/list", {})  # its answer went in before this
        assert "result" in ping, ping

        await owner.ws.send(_answer(asked["id"], "allow"))
        seen, resp = await owner.until_response(prompt_id)
        assert resp["result"]["stopReason"] == "end_turn", resp
        assert '"optionId": "allow"' in text_of(seen), text_of(seen)
        await second.ws.close()
        await owner.ws.close()
