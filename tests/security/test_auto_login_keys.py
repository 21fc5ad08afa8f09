"""The automatic login never hands a key to an agent that did not ask for that variable.

When an adapter answers "authentication required", acpgate authenticates it by itself
only with a method whose key variables are set in *that adapter's* environment, and
sends the method id alone. A hostile agent cannot talk acpgate into more: it claims
to be codex-acp (whose typeless ``api-key`` method acpgate knows) and advertises
typeless methods named after another agent's key (``OPENAI_API_KEY``, ``_meta``
naming it), while acpgate's own environment holds that key for another agent
(``pass_env``). It gets no ``authenticate`` at all, and the key reaches it in no
message and not in its environment; the agent the key is configured for is logged
in with ``{"methodId": "api-key"}`` and reads the key from its own environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, child_env, workspace_beside_config, write_config
from tests.realagents.profiles import CODEX_NAME, CODEX_PROFILE
from tests.security.typeless_auth_agent import agent_section, received

pytestmark = pytest.mark.slow

SECRET = "sk-acpgate-env-key-0123456789"
OWN_KEY = "sk-evil-own-key-0123456789"
KEYS = "CODEX_API_KEY,OPENAI_API_KEY"
HOSTILE_METHODS = [
    {"id": "OPENAI_API_KEY", "name": "OPENAI_API_KEY",
     "description": "Reads $OPENAI_API_KEY (or CODEX_API_KEY) from the environment"},
    {"id": "api-key", "name": "API Key", "description": "Use $OPENAI_API_KEY",
     "_meta": {"api-key": {"provider": "openai"}, "env": "OPENAI_API_KEY"}},
]


def _new(acp: AcpProcess, work: Path, alias: str) -> dict[str, Any]:
    return acp.call("session/new", {"cwd": str(work), "mcpServers": [],
                                    "agentAlias": alias}, 60)[1]


def _authenticates(log: Path) -> list[dict[str, Any]]:
    return [m for m in received(str(log)) if m.get("method") == "authenticate"]


def test_hostile_agent_named_like_codex_gets_no_key(tmp_path: Path) -> None:
    codex_log, evil_log, other_log = (tmp_path / "codex.log", tmp_path / "evil.log",
                                      tmp_path / "other.log")
    extra = (
        # The agent the key is for: acpgate's OPENAI_API_KEY passed to it by name.
        agent_section("codex", str(codex_log), CODEX_NAME, CODEX_PROFILE["authMethods"],
                      reads=KEYS, pass_env=("OPENAI_API_KEY",))
        # Claims codex-acp's name, advertises methods named after the key; no key for it.
        + agent_section("evil", str(evil_log), CODEX_NAME, HOSTILE_METHODS, reads=KEYS)
        # An unknown agent with a key of its own: its typeless methods are not known to
        # read it, whatever they are called.
        + agent_section("other", str(other_log), "other-agent", HOSTILE_METHODS[:1],
                        env={"OPENAI_API_KEY": OWN_KEY}, reads=KEYS))
    cfg = write_config(tmp_path / "cfg", max_sessions=10, extra=extra)
    acp = AcpProcess(cfg, env={**child_env(), "OPENAI_API_KEY": SECRET})
    try:
        acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        work = workspace_beside_config(tmp_path)
        evil = _new(acp, work, "evil")
        other = _new(acp, work, "other")
        codex = _new(acp, work, "codex")
    finally:
        acp.close()
        acp.kill()

    # The hostile agents: their own refusal, no authenticate, the key nowhere.
    for answer in (evil, other):
        assert answer["error"]["code"] == -32000, answer
        assert answer["error"]["message"] == "Authentication required", answer
    assert _authenticates(evil_log) == [] and _authenticates(other_log) == []
    evil_seen = evil_log.read_text()
    assert SECRET not in evil_seen and OWN_KEY not in evil_seen
    assert "OPENAI_API_KEY" not in received(str(evil_log))[0]["env"]
    assert SECRET not in other_log.read_text() and OWN_KEY not in other_log.read_text()
    # The agent the key is configured for: logged in with the method id alone.
    assert "result" in codex, codex
    assert [m["params"] for m in _authenticates(codex_log)] == [{"methodId": "api-key"}]
    assert SECRET not in codex_log.read_text()
    assert "OPENAI_API_KEY" in received(str(codex_log))[0]["env"]
    assert SECRET not in "".join(acp.stderr) and SECRET not in json.dumps(evil)
