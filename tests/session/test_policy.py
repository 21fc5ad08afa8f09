"""SPEC §12: the session service's decision of a session's policy (policy_for)."""

from __future__ import annotations

import os
from pathlib import Path

# The decision is checked end to end through the agent's enforcement, which is the
# only place a policy takes effect.
from services.agent.enforce import may_read
from services.common.config import DEFAULT_AUTO_APPROVE, AgentSection, AutonomySection, Config
from services.session.decisions.policy import policy_for


def test_policy_for_builds_from_config(tmp_path: Path) -> None:
    """policy_for: agent workspace as allowed root, [autonomy] lists, per-agent level."""
    cfg = Config(
        config_dir=tmp_path,
        autonomy=AutonomySection(level="supervised", always_ask=("shell",)),
        agents={
            "a": AgentSection(alias="a", provider="demo", model="demo"),
            "f": AgentSection(alias="f", provider="demo", model="demo", autonomy="full"),
        },
    )
    p = policy_for(cfg, "a", "/w")
    assert p.workspace_dir == "/w"
    assert p.allowed_roots == (str(tmp_path / "agents" / "a" / "workspace"),)
    assert p.auto_approve == DEFAULT_AUTO_APPROVE
    assert p.always_ask == ("shell",)
    assert "~/.ssh" in p.forbidden_paths
    assert p.autonomy == "supervised" and p.workspace_only
    f = policy_for(cfg, "f", "/w")
    assert f.autonomy == "full" and not f.workspace_only


def test_default_forbidden_secrets_refused_in_full_mode(tmp_path: Path) -> None:
    """The default forbidden list keeps secrets out of reach even in full mode (§12)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = Config(config_dir=ws.parent / "acpgate-cfg", autonomy=AutonomySection(level="full"))
    p = policy_for(cfg, "x", str(ws))
    assert not may_read(p, "/etc/shadow")
    assert not may_read(p, "/proc/1/environ")
    assert not may_read(p, os.path.expanduser("~/.ssh/id_ed25519"))
    # acpgate's own state: the store with every other conversation, the config file.
    assert not may_read(p, str(cfg.session_db_path))
    assert not may_read(p, str(cfg.config_file))
    assert may_read(p, "/etc/hostname")  # full mode reaches outside the roots
    assert may_read(p, os.path.join(str(ws), "a.txt"))
    # The agent workspace lies under the config dir and stays reachable (allowed root wins).
    assert may_read(p, str(cfg.agent_workspace("x") / "IDENTITY.md"))
