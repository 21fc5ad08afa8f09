"""Bad input never crashes the agent: every request gets exactly one answer (SPEC §1)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.jsonrpc import JsonRpcError
from tests.agent.harness import make_config, running_agent

METHODS = ["initialize", "session/new", "session/prompt", "session/resume", "session/load",
           "session/cancel", "session/close", "authenticate", "bogus/method"]
KEYS = ["sessionId", "session_id", "prompt", "cwd", "_meta", "mcpServers", "clientCapabilities"]

json_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=12)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["type", "text", "acpgate", "policy", "history",
                                       "resource", "role", "workspaceDir", "autonomy"]),
                      inner, max_size=3),
    max_leaves=8,
)
params_st = st.dictionaries(st.sampled_from(KEYS), json_value, max_size=4)


async def _exercise(tmp: Path, calls: list[tuple[str, dict[str, Any]]],
                    standalone: bool) -> None:
    async def reject(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "cancelled"}}

    # readonly: a random "!…" prompt to the demo model can never reach the shell
    async with running_agent(make_config(tmp, autonomy="readonly"), responder=reject,
                             standalone=standalone) as c:
        for method, params in calls:
            try:
                result = await asyncio.wait_for(c.call(method, params), 10)
            except JsonRpcError as exc:
                assert -32700 <= exc.code <= -32000
            else:
                assert result is not None
        # still alive and well
        assert (await c.call("initialize", {}))["protocolVersion"] == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(st.sampled_from(METHODS), params_st), min_size=1, max_size=6),
       standalone=st.booleans())
def test_random_requests_are_always_answered(tmp_path: Path,
                                             calls: list[tuple[str, dict[str, Any]]],
                                             standalone: bool) -> None:
    """Standalone and behind the edge (where a missing policy is refused, not guessed)."""
    asyncio.run(_exercise(tmp_path, calls, standalone))
