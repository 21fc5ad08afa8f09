"""The built-in agent's modes (autonomy) and model option, and its usage reports.

- modes: readonly / supervised / full, never above the policy the edge sent;
- config option ``model`` (category ``model``) over the configured models;
- ``usage_update`` after each turn and ``usage`` on the prompt result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.jsonrpc import JsonRpcError
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say
from tests.golden import validate

SUPERVISED = {"autonomy": "supervised"}


def _policy(ws: Path, autonomy: str) -> dict[str, Any]:
    return {"workspaceDir": str(ws), "autonomy": autonomy, "workspaceOnly": autonomy != "full"}


async def test_new_session_offers_modes_up_to_the_ceiling_and_the_models(tmp_path: Path,
                                                                        ws: Path) -> None:
    cfg = make_config(tmp_path, model="m1", models=("m2", "m1", "m3"))
    async with running_agent(cfg) as c:
        result = await c.call("session/new", {"cwd": str(ws), "mcpServers": [], "_meta": {
            "acpgate": {"policy": _policy(ws, "supervised")}}})
    validate("NewSessionResponse", result)
    assert result["modes"]["currentModeId"] == "supervised"
    assert [m["id"] for m in result["modes"]["availableModes"]] == ["readonly", "supervised"]
    (option,) = result["configOptions"]
    assert (option["id"], option["category"], option["type"], option["currentValue"]) == \
        ("model", "model", "select", "m1")
    assert [o["value"] for o in option["options"]] == ["m1", "m2", "m3"]


async def test_set_mode_makes_the_session_more_careful_never_more_powerful(
        tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("shell", {"command": "touch ran"}), say("done")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws, policy=_policy(ws, "supervised"))
        assert await c.call("session/set_mode", {"sessionId": sid, "modeId": "readonly"}) == {}
        assert c.of("current_mode_update") == [
            {"sessionUpdate": "current_mode_update", "currentModeId": "readonly"}]
        await c.prompt(sid, "run")
        with pytest.raises(JsonRpcError) as above:
            await c.call("session/set_mode", {"sessionId": sid, "modeId": "full"})
        with pytest.raises(JsonRpcError) as unknown:
            await c.call("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
    assert not (ws / "ran").exists()
    assert "shell" not in {t.name for t in provider.calls[0][2]}  # readonly: no shell offered
    assert above.value.code == -32602 and "full" in above.value.message
    assert unknown.value.code == -32602


async def test_full_mode_again_restores_the_ceilings_reach(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws, policy=_policy(ws, "full"))
        await c.call("session/set_mode", {"sessionId": sid, "modeId": "supervised"})
        session = c.server._sessions[sid]
        assert (session.policy.autonomy, session.policy.workspace_only) == ("supervised", True)
        await c.call("session/set_mode", {"sessionId": sid, "modeId": "full"})
        assert (session.policy.autonomy, session.policy.workspace_only) == ("full", False)


async def test_model_option_switches_the_provider(tmp_path: Path, ws: Path) -> None:
    made: dict[str, ScriptedProvider] = {}

    def provider_for(model: str) -> ScriptedProvider:
        made[model] = ScriptedProvider([say(f"from {model}")])
        return made[model]

    cfg = make_config(tmp_path, model="m1", models=("m2",))
    async with running_agent(cfg, ScriptedProvider([say("from m1")]),
                             provider_for=provider_for) as c:
        sid = await c.new_session(ws, policy=_policy(ws, "supervised"))
        result = await c.call("session/set_config_option",
                              {"sessionId": sid, "configId": "model", "value": "m2"})
        validate("SetSessionConfigOptionResponse", result)
        assert result["configOptions"][0]["currentValue"] == "m2"
        await c.prompt(sid, "hello")
        with pytest.raises(JsonRpcError) as bad_model:
            await c.call("session/set_config_option",
                         {"sessionId": sid, "configId": "model", "value": "gpt-9"})
        with pytest.raises(JsonRpcError) as bad_option:
            await c.call("session/set_config_option",
                         {"sessionId": sid, "configId": "temperature", "value": "hot"})
    assert list(made) == ["m2"] and len(made["m2"].calls) == 1
    assert "from m2" in c.text()
    assert bad_model.value.code == -32602 and bad_option.value.code == -32602


async def test_usage_update_after_each_turn(tmp_path: Path, ws: Path) -> None:
    """The provider's token counts: usage_update (context used of the budget) and usage."""
    provider = ScriptedProvider([call("file_read", {"path": "nope"}), say("done")])
    async with running_agent(make_config(tmp_path, context_budget_chars=4000), provider) as c:
        sid = await c.new_session(ws, policy=_policy(ws, "supervised"))
        result = await c.prompt(sid, "go")
    (update,) = c.of("usage_update")
    assert update == {"sessionUpdate": "usage_update", "used": 5, "size": 1000}  # say(): 3 + 2
    assert c.kinds()[-1] == "usage_update"
    validate("SessionNotification", {"sessionId": sid, "update": update})
    assert result["usage"] == {"totalTokens": 11, "inputTokens": 8, "outputTokens": 3}  # 5+3, 1+2


def _capped(sid: str, text: str, cap: Any) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}],
            "_meta": {"acpgate": {"autonomyCap": cap}}}


async def test_a_turn_cap_holds_for_that_turn_only(tmp_path: Path, ws: Path) -> None:
    """``_meta.acpgate.autonomyCap`` (a turn another session started)
    runs that one turn at the capped level — a `full` session capped `readonly` offers no
    shell, and its shell call is refused; the next turn runs at its mode again, and the
    session's mode never changed."""
    provider = ScriptedProvider([call("shell", {"command": "touch capped"}), say("no"),
                                 call("shell", {"command": "touch free"}), say("yes")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws, policy=_policy(ws, "full"))
        await c.call("session/prompt", _capped(sid, "run", "readonly"))
        session = c.server._sessions[sid]
        assert (session.policy.autonomy, session.chosen.autonomy) == ("full", "full")
        await c.prompt(sid, "run again")
    assert not (ws / "capped").exists()
    assert "shell" not in {t.name for t in provider.calls[0][2]}
    assert (ws / "free").exists()
    assert "shell" in {t.name for t in provider.calls[2][2]}
    failed = [u for u in c.of("tool_call_update") if u.get("status") == "failed"]
    assert len(failed) == 1 and "denied by the session policy" in str(failed[0])


async def test_a_supervised_cap_asks_and_a_bad_cap_is_refused(tmp_path: Path, ws: Path) -> None:
    """A `full` session's turn capped `supervised` asks before the shell (the client says
    no: nothing runs); a cap that is no level is -32602 and runs no turn."""
    async def reject(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": "reject-once"}}

    provider = ScriptedProvider([call("shell", {"command": "touch asked"}), say("ok")])
    async with running_agent(make_config(tmp_path), provider, responder=reject) as c:
        sid = await c.new_session(ws, policy=_policy(ws, "full"))
        await c.call("session/prompt", _capped(sid, "run", "supervised"))
        for bad in ("root", 3, ["full"]):
            with pytest.raises(JsonRpcError) as refused:
                await c.call("session/prompt", _capped(sid, "run", bad))
            assert refused.value.code == -32602 and "autonomyCap" in refused.value.message
    assert [m for m, _ in c.requests] == ["session/request_permission"]
    assert not (ws / "asked").exists()
    assert len(provider.calls) == 2
