"""A session workspace is never acpgate's own state nor a credential store.

``workspace_refusal`` over real directories: the relation (is / lies inside /
contains) to the config dir, the data dir and the credential stores among the
forbidden paths; the agent workspace's exemption; the home-dir rule; the
exact-path opt-in ``[autonomy] allow_cwd``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from services.common.config import (
    AgentSection,
    AutonomySection,
    Config,
    GatewaySection,
    PathsSection,
)
from services.common.protocol import MSG_CWD_REFUSED, MSG_CWD_REFUSED_LOCAL
from services.session.decisions.confinement import CREDENTIAL_STORE, OWN_STATE, workspace_refusal


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "home"
    (d / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(d))
    return d


def make(tmp_path: Path, **autonomy: object) -> Config:
    return Config(config_dir=tmp_path / "cfg",
                  paths=PathsSection(data_dir=str(tmp_path / "elsewhere" / "data")),
                  autonomy=replace(AutonomySection(), **autonomy),  # type: ignore[arg-type]
                  agents={"a": AgentSection(alias="a", provider="demo", model="demo")})


def why(cfg: Config, path: Path) -> tuple[str, str] | None:
    refusal = workspace_refusal(cfg, str(path))
    return None if refusal is None else (refusal.relation, refusal.what)


def test_own_state_is_refused_however_related(tmp_path: Path, home: Path) -> None:
    cfg = make(tmp_path)
    data = tmp_path / "elsewhere" / "data"
    assert why(cfg, cfg.config_dir) == ("is", OWN_STATE)
    assert why(cfg, data) == ("is", OWN_STATE)
    assert why(cfg, data / "sessions") == ("lies inside", OWN_STATE)
    assert why(cfg, cfg.config_dir / "agents") == ("lies inside", OWN_STATE)
    assert why(cfg, tmp_path / "elsewhere") == ("contains", OWN_STATE)
    assert why(cfg, tmp_path) == ("contains", OWN_STATE)
    assert why(cfg, tmp_path / "project") is None
    # A sibling sharing a name prefix is not inside.
    assert why(cfg, tmp_path / "cfg2") is None


def test_the_agent_workspace_inside_the_config_dir_is_fine(tmp_path: Path, home: Path) -> None:
    cfg = make(tmp_path)
    workspace = cfg.config_dir / "agents" / "a" / "workspace"
    workspace.mkdir(parents=True)
    assert why(cfg, workspace) is None
    assert why(cfg, workspace / "sub") is None
    # Not another directory of the config dir that merely looks like one.
    assert why(cfg, cfg.config_dir / "agents" / "b" / "workspace") == ("lies inside", OWN_STATE)


def test_credential_stores_but_not_the_tree_holding_home(tmp_path: Path, home: Path) -> None:
    cfg = make(tmp_path, forbidden_paths=("~/.ssh", str(tmp_path / "vault"), str(tmp_path),
                                          "relative/secrets"))
    assert why(cfg, home / ".ssh") == ("is", CREDENTIAL_STORE)
    assert why(cfg, home / ".ssh" / "keys") == ("lies inside", CREDENTIAL_STORE)
    assert why(cfg, home) == ("contains", CREDENTIAL_STORE)
    assert why(cfg, tmp_path / "vault" / "x") == ("lies inside", CREDENTIAL_STORE)
    # tmp_path holds the home dir (like /root for root): a project inside it is fine, the
    # stores inside still count; a relative entry names no place of its own.
    assert why(cfg, home / "project") is None


def test_allow_cwd_opts_in_exact_paths_only(tmp_path: Path, home: Path) -> None:
    cfg = make(tmp_path, allow_cwd=(str(home), "~/.ssh"))
    assert why(cfg, home) is None
    assert why(cfg, home / ".ssh") is None
    assert why(cfg, home / ".ssh" / "deeper") == ("lies inside", CREDENTIAL_STORE)


def test_the_message_names_the_reason_not_the_path(tmp_path: Path, home: Path) -> None:
    cfg = make(tmp_path)
    refusal = workspace_refusal(cfg, str(tmp_path / "elsewhere" / "data"))
    assert refusal is not None
    message = refusal.message()
    assert message == MSG_CWD_REFUSED.format(relation="is", what=OWN_STATE)
    assert str(tmp_path) not in message and "[autonomy] allow_cwd" in message


def test_a_token_store_kept_elsewhere_is_own_state_too(tmp_path: Path, home: Path) -> None:
    tokens = tmp_path / "srv" / "secrets" / "tokens.db"
    cfg = replace(make(tmp_path), gateway=GatewaySection(token_db=str(tokens)))
    assert why(cfg, tmp_path / "srv") == ("contains", OWN_STATE)
    assert why(cfg, tmp_path / "srv" / "secrets") == ("contains", OWN_STATE)
    assert why(cfg, tmp_path / "srv" / "other") is None


def test_the_local_user_may_work_in_a_directory_holding_guarded_paths(
        tmp_path: Path, home: Path) -> None:
    """For the local user of ``acpgate acp`` only; the default is the gateway's."""
    cfg = make(tmp_path, forbidden_paths=("~/.ssh",))
    data = tmp_path / "elsewhere" / "data"
    assert why(cfg, tmp_path) == ("contains", OWN_STATE)
    assert why(cfg, home) == ("contains", CREDENTIAL_STORE)
    assert workspace_refusal(cfg, str(tmp_path), local_user=True) is None
    assert workspace_refusal(cfg, str(home), local_user=True) is None
    # What is or lies inside guarded paths stays refused, naming the innermost one and the
    # line that would allow the directory.
    refusal = workspace_refusal(cfg, str(data / "sessions"), local_user=True)
    assert refusal is not None
    assert (refusal.relation, refusal.path) == ("lies inside", str(data.resolve()))
    assert refusal.message() == MSG_CWD_REFUSED_LOCAL.format(
        relation="lies inside", what=OWN_STATE, path=data.resolve(),
        cwd=f'"{(data / "sessions").resolve()}"', config_file=cfg.config_dir / "config.toml")
    ssh = workspace_refusal(cfg, str(home / ".ssh"), local_user=True)
    assert ssh is not None and (ssh.relation, ssh.what) == ("is", CREDENTIAL_STORE)
