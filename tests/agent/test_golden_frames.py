"""The built-in agent against the golden wire fixtures the edge tests use too.

What the edge sends the agent (its ``initialize``, its permission answers) is fed
in exactly as the edge's own tests pin it; what the agent answers must be the
exact frame the edge's tests read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent.harness import (
    TEST_VERSION,
    ScriptedProvider,
    call,
    make_config,
    running_agent,
    say,
)
from tests.golden import payload, validate


@pytest.mark.parametrize("request_name", ["initialize.request.edge", "initialize.request.client"])
async def test_initialize_answers_the_golden_result(tmp_path: Path, request_name: str) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        result = await c.call("initialize", payload(request_name, VERSION=TEST_VERSION))
        assert c.server._elicitation is True  # form mode, as the edge passed it on
    assert result == payload("initialize.result.agent", VERSION=TEST_VERSION, ALIAS="a")
    validate("InitializeResponse", result)


async def test_prompt_result_is_the_golden_frame(tmp_path: Path, ws: Path) -> None:
    """usage is ACP's PromptResponse.usage (the edge reads it there)."""
    async with running_agent(make_config(tmp_path), ScriptedProvider([say("hi")])) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "hello")
    assert result == payload("prompt.result.agent")


def _answering(fixture: str):
    async def responder(method: str, params: dict[str, Any]) -> Any:
        return payload(fixture)
    return responder


@pytest.mark.parametrize(("fixture", "ran", "sentence"), [
    ("request_permission.result.relayed", True, None),
    ("request_permission.result.timeout", False,
     # the edge's wait (timeoutSecs), not the agent's own 30 s
     "The `shell` call was denied automatically: the user gave no answer within 45 seconds."),
    ("request_permission.result.client_error", False,
     "The `shell` call was denied automatically: the approval request could not be answered "
     "(the client failed or left)."),
    ("request_permission.result.client_gone", False,
     "The `shell` call was denied automatically: the approval request could not be answered "
     "(the client failed or left)."),
])
async def test_edge_permission_answers(tmp_path: Path, ws: Path, fixture: str, ran: bool,
                                       sentence: str | None) -> None:
    """Each answer the edge can relay (SPEC §6, docs/contracts.md) means what it says."""
    provider = ScriptedProvider([call("shell", {"command": "touch approved"}), say("done")])
    async with running_agent(make_config(tmp_path), provider, _answering(fixture)) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "run it")
    assert (ws / "approved").exists() is ran
    if sentence is not None:
        (update,) = c.of("tool_call_update")
        assert update["rawOutput"] == sentence
