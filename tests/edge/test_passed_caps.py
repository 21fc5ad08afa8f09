"""What the edge's ``initialize`` advertises of an external agent's capabilities: only what
acpgate does for a host what the capability asks (relays its methods and params, or
decides it itself); codex-acp 2.6's ``subagents``, capabilities it cannot serve and every
unknown one are withheld."""

from __future__ import annotations

import copy
from typing import Any

from services.common.acp.capabilities import agent_capabilities
from services.common.acp.v2.names import PROTOCOL_V1
from services.edge.dialect.advertised import merged_capabilities, session_keys
from services.edge.dialect.method_table import DIALECTS
from services.edge.dialect.passed_caps import PASSED, WITHHELD, passed_capabilities
from tests.realagents.profiles import CODEX_PROFILE

OURS = agent_capabilities(load_session=True, resume=True, close=True, list_sessions=True,
                          delete=True, additional_directories=True, fork=True).to_json()
#: The ``sessionCapabilities`` the method table says acpgate decides.
OWN = session_keys(DIALECTS[PROTOCOL_V1].capabilities)


def test_codex_26_profile_is_advertised_without_subagents() -> None:
    agent = CODEX_PROFILE["agentCapabilities"]
    kept = copy.deepcopy(agent)
    got = merged_capabilities(OURS, agent, mcp_allowed=True, own=OWN)
    assert agent == kept  # the recorded profile is not changed
    assert got == {
        "loadSession": True,
        "auth": {"logout": {}},  # logout: relayed to the connection's agent
        "providers": {},  # providers/*: relayed to the connection's agent
        "promptCapabilities": {"embeddedContext": True, "image": True},
        "mcpCapabilities": {"http": True, "sse": False},  # acp: never
        # systemPrompt (a session/new param) and title (session/set_title) are relayed;
        # the others are acpgate's own; subagents is withheld.
        "sessionCapabilities": {"systemPrompt": {}, "title": {}, "list": {}, "delete": {},
                                "additionalDirectories": {}, "resume": {}, "close": {},
                                "fork": {}},
        "_meta": {"authStatus": {}},
    }


def test_capabilities_acpgate_cannot_serve_and_unknown_ones_are_withheld() -> None:
    agent: dict[str, Any] = {
        "auth": {"logout": {}, "status": {}, "futureAuth": {}},
        "sessionCapabilities": {"subagents": {}, "archive": {}, "status": {},
                                "futureThing": {"x": 1}, "systemPrompt": {"mode": {}},
                                "_meta": {"v": 1}},
        "promptCapabilities": {"audio": True, "video": True},
        "mcpCapabilities": {"http": True, "acp": True, "stdio": {}},
        "futureTopLevel": {"on": True},
        "_meta": {"claudeCode": {"promptQueueing": True}},
    }
    assert passed_capabilities(agent) == {
        "auth": {"logout": {}},
        "sessionCapabilities": {"systemPrompt": {"mode": {}}, "_meta": {"v": 1}},
        "promptCapabilities": {"audio": True},
        "mcpCapabilities": {"http": True},
        "_meta": {"claudeCode": {"promptQueueing": True}},
    }
    got = merged_capabilities(OURS, agent, mcp_allowed=False, own=OWN)
    assert "futureTopLevel" not in got and "subagents" not in got["sessionCapabilities"]
    assert got["mcpCapabilities"] == {"http": False, "sse": False}
    # Junk where an object belongs advertises nothing there.
    assert passed_capabilities({"auth": "yes", "sessionCapabilities": None}) == {
        "auth": {}, "sessionCapabilities": {}}


def test_every_withheld_capability_is_outside_what_passes() -> None:
    for name in WITHHELD:
        parent, _, key = name.partition(".")
        inner = PASSED.get(parent)
        assert inner is not None and key not in inner, name
