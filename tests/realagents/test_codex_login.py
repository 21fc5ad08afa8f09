"""codex-acp 2.6 (``@agentclientprotocol/codex-acp``) on v1, directly and through acpgate.

- Its ``initialize`` still answers the recorded profile
  (:data:`tests.realagents.profiles.CODEX_PROFILE`); through acpgate the same, less
  ``sessionCapabilities.subagents`` (native subagent sessions need the client's
  ``clientCapabilities.subagents``, which acpgate does not forward).
- Its ``authMethods`` carry no ``type``. With OpenAI's own provider and
  ``OPENAI_API_KEY`` in its environment, ``session/new`` fails "Authentication
  required" directly until the client authenticates; through acpgate it works at
  once: acpgate authenticates with its ``api-key`` method by itself, sending the
  method id alone (the adapter reads the key from its environment).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest

from services.edge.adapter.caps import profile_of
from tests.e2e.harness import AcpProcess
from tests.realagents.adapters import CODEX
from tests.realagents.compare import SLOW_WAIT
from tests.realagents.fake_models import FakeModelServer
from tests.realagents.profiles import CODEX_PROFILE

pytestmark = pytest.mark.timeout(300)
INIT = {"protocolVersion": 1, "clientCapabilities": {}}


def _openai_env(model_url: str, state: Path) -> dict[str, str]:
    """codex on OpenAI's own provider (pointed at the fake), an API key in its environment,
    never logged in."""
    home = state / "codex-home"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "gpt-5.1"\nopenai_base_url = "{model_url}/v1"\n')
    return {"CODEX_HOME": str(home), "HOME": str(home),
            "OPENAI_API_KEY": "sk-fake-key-for-tests"}


def _stop(peer: AcpProcess) -> None:
    kids = peer.descendants()
    try:
        peer.close(10)
    except subprocess.TimeoutExpired:
        pass
    for kid in kids:
        try:
            kid.kill()
        except psutil.NoSuchProcess:
            pass


def _new(peer: AcpProcess, work: Path) -> dict[str, Any]:
    return peer.call("session/new", {"cwd": str(work), "mcpServers": []}, SLOW_WAIT)[1]


def test_codex_profile_and_automatic_login(npm_dir: Path, model_server: FakeModelServer,
                                           tmp_path: Path) -> None:
    if not CODEX.installed(npm_dir):
        pytest.skip(f"{CODEX.bin_name} is not installed in {npm_dir}")
    work = tmp_path / "ws"
    work.mkdir()
    env = _openai_env(model_server.url, tmp_path / "direct")
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR", "TZ")}
    direct = AcpProcess(work, argv=CODEX.argv(npm_dir), env={**base, **env}, cwd=work)
    try:
        init = direct.result("initialize", INIT)
        refused = _new(direct, work)
    finally:
        _stop(direct)
    assert profile_of(init) == CODEX_PROFILE
    assert refused["error"] == {"code": -32000, "message": "Authentication required"}

    cfg = tmp_path / "cfg"
    cfg.mkdir()
    env = _openai_env(model_server.url, tmp_path / "through")
    (cfg / "config.toml").write_text(
        '[acp]\ndefault_agent = "codex"\n\n'
        + CODEX.config_entry(npm_dir, model_server.url, tmp_path / "through", env))
    through = AcpProcess(cfg)
    try:
        got = through.result("initialize", INIT)
        new = _new(through, work)
    finally:
        through.close(SLOW_WAIT)
        through.kill()
    session = got["agentCapabilities"]["sessionCapabilities"]
    assert "subagents" not in session and {"systemPrompt", "title"} <= set(session)
    assert got["authMethods"] == CODEX_PROFILE["authMethods"]
    assert "result" in new and new["result"]["sessionId"], new
