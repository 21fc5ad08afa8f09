"""``@agentclientprotocol/codex-acp`` (v1 and v2) through acpgate on ACP v2.

With ``protocol = 2`` acpgate speaks v2 to the adapter: a v1 client gets v1 (the prompt
answered when the adapter's turn goes idle), a v2 client v2. Everything acpgate wrote to
the adapter (recorded by ``tee_stdin.py``) is checked against the vendored v2 schema.
Skipped unless the codex-acp 2.x package is installed in ``$ACPGATE_REAL_ADAPTERS``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, streamed_text, updates
from tests.realagents.adapters import _codex_env, _toml_env
from tests.realagents.fake_models import HELLO, SLOW_TRIGGER, FakeModelServer
from tests.v2schema import check_sent, check_to_agent

SLOW_WAIT = 120.0
PACKAGE = Path("node_modules") / "@agentclientprotocol" / "codex-acp" / "package.json"
TEE = Path(__file__).with_name("tee_stdin.py")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def codex(npm_dir: Path, model_server: FakeModelServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    package = npm_dir / PACKAGE
    if not package.exists() or not json.loads(package.read_text())["version"].startswith("2."):
        pytest.skip("@agentclientprotocol/codex-acp 2.x is not installed")
    root = tmp_path_factory.mktemp("codex2")
    work = root / "ws"
    work.mkdir()
    log = root / "to-agent.jsonl"
    cfg = root / "cfg"
    cfg.mkdir()
    args = [str(TEE), str(log), str(npm_dir / "node_modules" / ".bin" / "codex-acp")]
    (cfg / "config.toml").write_text(
        '[acp]\ndefault_agent = "codex2"\nsession_timeout_secs = 120\n\n'
        f'[agents.codex2]\nkind = "acp"\nprotocol = 2\ncommand = {json.dumps(sys.executable)}\n'
        f"args = {json.dumps(args)}\n"
        f"env = {_toml_env(_codex_env(model_server.url, root / 'state'))}\n")
    yield cfg, work, log


def _sent_to_agent(log: Path) -> list[dict[str, Any]]:
    got = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    for message in got:
        check_to_agent(message, None if "method" in message else "session/request_permission")
    return got


def test_v1_client_on_codex_over_v2(codex: tuple[Path, Path, Path]) -> None:
    cfg, work, log = codex
    acp = AcpProcess(cfg)
    try:
        init = acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["protocolVersion"] == 1
        _, new = acp.call("session/new", {"cwd": str(work), "mcpServers": []}, SLOW_WAIT)
        assert "result" in new, new
        sid = new["result"]["sessionId"]
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "hello"}]}, SLOW_WAIT)
        assert resp["result"]["stopReason"] == "end_turn", resp
        assert "".join(HELLO) in streamed_text(before)
        kinds = {u["sessionUpdate"] for u in updates(before, sid)}
        assert "state_update" not in kinds and "user_message_chunk" not in kinds, kinds
        rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": SLOW_TRIGGER}]})
        acp.read_until(lambda m: m.get("method") == "session/update"
                       and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk",
                       SLOW_WAIT)
        acp.notify("session/cancel", {"sessionId": sid})
        _, resp = acp.response(rid, SLOW_WAIT)
        assert resp["result"]["stopReason"] == "cancelled", resp
    finally:
        acp.close(SLOW_WAIT)
        acp.kill()
    got = _sent_to_agent(log)
    assert got[0]["method"] == "initialize" and got[0]["params"]["protocolVersion"] == 2


def test_v2_client_on_codex_over_v2(codex: tuple[Path, Path, Path]) -> None:
    cfg, work, log = codex
    acp = AcpProcess(cfg)
    acp.check = check_sent
    try:
        init = acp.result("initialize", {"protocolVersion": 2,
                                         "info": {"name": "tier", "version": "1"}})
        assert init["protocolVersion"] == 2
        _, new = acp.call("session/new", {"cwd": str(work)}, SLOW_WAIT)
        sid = new["result"]["sessionId"]
        _, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "hello"}]}, SLOW_WAIT)
        assert "messageId" in resp["result"], resp
        after, idle = acp.read_until(
            lambda m: m.get("method") == "session/update"
            and m["params"]["update"].get("state") == "idle", SLOW_WAIT)
        assert idle["params"]["update"]["stopReason"] == "end_turn"
        assert "".join(HELLO) in streamed_text(after)
    finally:
        acp.close(SLOW_WAIT)
        acp.kill()
    _sent_to_agent(log)
