"""``_acpgate/agents/list`` from an attacker's gateway client: the agents it may start, and
nothing of how they run.

A real ``acpgate serve`` whose config holds, beside the built-in agents, an external
agent whose command line, arguments, environment, passed variables and workspace are
secrets (a key in ``env``, a token in ``args``, a private path), a disabled agent and
an incomplete one. A plain token's list names exactly the dispatchable aliases (a
disabled or incomplete agent — which ``session/new`` refuses — is not offered), with
the default marked (the connection's ``?agent=`` counts), and the whole answer holds
none of the secrets, no path of the install (config dir, data dir, HOME, workspaces)
and no model server URL. ``session/new`` accepts each listed alias and refuses the
unlisted ones: the list is what the token may use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ENV_KEY = "sk-live-env-5ecret-value"
ARG_KEY = "tok-arg-5ecret-value"
PRIVATE_DIR = "/srv/private-agent-workspace"
AGENTS = f"""
[agents.reviewer]
kind = "acp"
description = "Reviews diffs"
command = "/opt/hidden-bin/reviewer-agent"
args = ["--api-key", "{ARG_KEY}"]
env = {{ REVIEWER_KEY = "{ENV_KEY}" }}
pass_env = ["HIDDEN_PASS_*"]
workspace = "{PRIVATE_DIR}"

[agents.retired]
kind = "acp"
enabled = false
command = "/opt/hidden-bin/retired-agent"

[agents.broken]
kind = "builtin"
provider = "openai"
"""


async def agents_of(ws: Any) -> dict[str, Any]:
    client = RawClient(ws)
    await client.result("initialize", {"protocolVersion": 1})
    result: dict[str, Any] = await client.result("_acpgate/agents/list", {})
    return result


def secrets_of(gw: Gateway) -> list[str]:
    """What no client may learn from the list."""
    assert gw.model is not None
    return [ENV_KEY, ARG_KEY, "REVIEWER_KEY", "HIDDEN_PASS", "/opt/hidden-bin", PRIVATE_DIR,
            str(gw.config_dir), str(gw.data_dir), str(gw.home), gw.model.url, "base_url",
            "command", "env", "workspace"]


async def test_a_token_lists_what_it_may_start_and_nothing_secret(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw", extra=AGENTS) as gw:
        token = await gw.token("mallory")
        ws = await gw.connect(token)
        listed = await agents_of(ws)
        text = json.dumps(listed)
        leaked = [s for s in secrets_of(gw) if s in text]
        assert leaked == [], f"the agent list leaks {leaked}: {text}"
        assert [a["alias"] for a in listed["agents"]] == ["attacker", "demo", "reviewer"]
        assert listed["defaultAgent"] == "attacker"
        assert [a["alias"] for a in listed["agents"] if a["default"]] == ["attacker"]
        by_alias = {a["alias"]: a for a in listed["agents"]}
        assert by_alias["reviewer"] == {"alias": "reviewer", "kind": "acp", "default": False,
                                        "description": "Reviews diffs"}
        assert set(by_alias["attacker"]) == {"alias", "kind", "default", "model"}

        # What it lists is what it may use: an unlisted alias is refused by session/new.
        client = RawClient(ws)
        for alias in ("retired", "broken", "nosuch"):
            _, resp = await client.call("session/new", {"cwd": "", "agentAlias": alias})
            assert "error" in resp and alias in resp["error"]["message"], resp
        sid = (await client.result("session/new", {"cwd": "", "agentAlias": "demo"}))
        assert sid["sessionId"]
        await ws.close()

        # The connection's own default (?agent=) is the one marked.
        async with connect(f"{gw.url}?agent=demo", proxy=None, additional_headers={
                "Authorization": f"Bearer {token.secret}"}) as ws2:
            listed = await agents_of(ws2)
        assert listed["defaultAgent"] == "demo"
        assert [a["alias"] for a in listed["agents"] if a["default"]] == ["demo"]
