"""`acpgate acp` is quiet on stderr unless asked, and its log file has the rest.

Editors read an agent's stderr — Emacs' acp.el turns every chunk into an error
event — so a real ``acpgate acp`` session (new + prompt, the built-in agent on
the e2e fake model server) writes nothing there at the default level, while
the install's log file (``<data dir>/logs/acpgate.log``) holds the info lines,
the startup line first among them. ``ACPGATE_LOG_LEVEL=info`` asks for them on
stderr too; ``ACPGATE_LOG_FORMAT=text`` makes both readable text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fake_model import API_KEY_ENV, ModelServer, text_reply
from tests.e2e.harness import AcpProcess, workspace_beside_config, write_config

pytestmark = pytest.mark.slow

KEY = "sk-e2e-quiet-0123456789"


def _config(tmp_path: Path, url: str, name: str) -> Path:
    entry = f"""
[agents.model]
kind = "builtin"
provider = "openai"
model = "fake-model"
base_url = "{url}/v1"
api_key_env = "{API_KEY_ENV}"
max_retries = 0
"""
    return write_config(tmp_path / name, default_agent="model", extra=entry)


def _session(cfg: Path, work: Path) -> AcpProcess:
    acp = AcpProcess(cfg)
    try:
        sid = acp.new_session(cwd=str(work))
        result = acp.result("session/prompt", {"sessionId": sid, "prompt": "hello"})
        assert result["stopReason"] == "end_turn", result
    finally:
        assert acp.close() == 0
    return acp


def _json_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_default_level_writes_nothing_on_stderr_and_everything_to_the_log_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, KEY)
    monkeypatch.setenv("ACPGATE_LOG_LEVEL", "")  # the harness would ask for warnings
    work = workspace_beside_config(tmp_path)
    with ModelServer([text_reply("hi there"), text_reply("hi again")]) as model:
        quiet = _config(tmp_path, model.url, "quiet")
        acp = _session(quiet, work)
        assert acp.stderr == [], "".join(acp.stderr)
        events = _json_events(quiet / "data" / "logs" / "acpgate.log")
        (startup,) = [e for e in events if e["event"] == "startup"]
        assert startup["process"] == "acp" and startup["pid"] == acp.proc.pid
        assert startup["serves"] == "ACP on stdio"
        assert startup["session_addr"].startswith("unix:")
        assert startup["data_dir"] == str(quiet / "data") and startup["version"]
        assert {"session_created", "lease_spawned"} <= {e["event"] for e in events}
        assert all(e["level"] == "info" or e["level"] == "warning" for e in events)

        monkeypatch.setenv("ACPGATE_LOG_LEVEL", "info")
        monkeypatch.setenv("ACPGATE_LOG_FORMAT", "text")
        loud = _config(tmp_path, model.url, "loud")
        acp = _session(loud, work)
    said = "".join(acp.stderr)
    assert " INFO " in said and "session_created" in said and "startup" in said
    assert not said.lstrip().startswith("{"), "text, not JSON"
    text = (loud / "data" / "logs" / "acpgate.log").read_text()
    assert "session_created" in text and f"acp[{acp.proc.pid}]" in text
    for where in (said, text):
        assert KEY not in where  # the provider key never reaches a log
