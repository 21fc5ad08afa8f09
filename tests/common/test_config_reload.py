"""Reloading the config: which keys changed, which apply and which wait for a restart, and
:class:`LiveConfig` keeping the running config when the file is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.config import Config, ConfigError, load_config
from services.common.config.reload import changed_keys, describe, needs_restart, reloaded
from services.common.live_config import LiveConfig, log_safe

BASE = """\
[acp]
max_sessions = 4

[gateway]
port = 4000

[agents.a]
kind = "builtin"
provider = "demo"
model = "demo"
"""

CHANGED = """\
[acp]
max_sessions = 6

[gateway]
port = 4001

[gateway.tls]
ca_file = "/ca.pem"

[logging]
level = "debug"

[agents.a]
kind = "builtin"
provider = "demo"
model = "other"

[agents.b]
kind = "acp"
command = "x"
env = { KEY = "secret-value" }
"""


def load(tmp_path: Path, text: str) -> Config:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")
    return load_config(tmp_path, environ={})


def test_changed_keys_are_named_and_split_by_what_a_restart_needs(tmp_path: Path) -> None:
    old, new = load(tmp_path, BASE), load(tmp_path, CHANGED)
    assert changed_keys(old, new) == ("acp.max_sessions", "agents.a.model", "agents.b",
                                      "gateway.port", "gateway.tls.ca_file", "logging.level")
    change = describe(old, new)
    assert change.applied == ("acp.max_sessions", "agents.a.model", "agents.b",
                              "logging.level")
    assert change.restart == ("gateway.port", "gateway.tls.ca_file")
    assert describe(new, new).empty
    assert needs_restart("paths.data_dir") and needs_restart("store.url")
    assert needs_restart("gateway.workers") and needs_restart("services.session_addr")
    assert not needs_restart("gateway.max_connections") and not needs_restart("agents.x.env")


def test_the_running_config_keeps_the_keys_that_need_a_restart(tmp_path: Path) -> None:
    old, new = load(tmp_path, BASE), load(tmp_path, CHANGED)
    running = reloaded(old, new)
    assert running.acp.max_sessions == 6 and running.logging.level == "debug"
    assert set(running.agents) == {"a", "b"} and running.agents["a"].model == "other"
    assert running.gateway.port == 4000 and running.gateway.tls == old.gateway.tls
    # The restart keys stay pending: the next reload names them again.
    assert describe(running, new).restart == ("gateway.port", "gateway.tls.ca_file")


async def test_live_config_applies_a_valid_file_and_keeps_the_running_one_otherwise(
        tmp_path: Path) -> None:
    cfg = load(tmp_path, BASE)
    seen: list[Config] = []
    live = LiveConfig(cfg, lambda: load_config(tmp_path, environ={}))
    live.subscribe(seen.append)

    (tmp_path / "config.toml").write_text(BASE + "\n[bogus]\n", encoding="utf-8")
    assert await live.reload() is None
    assert live.current is cfg and seen == []

    (tmp_path / "config.toml").write_text(CHANGED, encoding="utf-8")
    change = await live.reload()
    assert change is not None and "agents.b" in change.applied
    assert seen == [live.current] and live.current.gateway.port == 4000
    assert "b" in live.current.agents


def test_a_refused_value_never_reaches_the_log() -> None:
    error = ConfigError("/c/config.toml: [agents.b] env: expected a table, got 'sk-123'")
    assert "sk-123" not in log_safe(error) and "[agents.b] env" in log_safe(error)


async def test_a_reloaded_logging_level_restarts_the_log_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    monkeypatch.delenv("ACPGATE_LOG_LEVEL", raising=False)

    from acpgate.reloading import LogFollower
    from services.common.log_output import start_logging, stop_logging

    cfg = load(tmp_path, BASE + '\n[logging]\nlevel = "warning"\nfile = "none"\n')
    follower = LogFollower(cfg, "session")
    start_logging(follower.plan)
    try:
        assert logging.getLogger("acpgate").level == logging.WARNING
        await follower(load(tmp_path, BASE + '\n[logging]\nlevel = "debug"\nfile = "none"\n'))
        assert logging.getLogger("acpgate").level == logging.DEBUG
    finally:
        stop_logging()
