"""A hostile ACP Registry against ``acpgate agents add``.

Whoever serves the registry (or hands over a registry file) chooses every string that
ends up in config.toml and in an adapter's argv. They must not get more than the one
``[agents.<alias>]`` table asked for: no package name that npx/uvx would read as an
option or that is not a package, no shell or TOML syntax that escapes its string, no
variable that loads code or redirects the package index, no alias that walks out of
``agents/`` or names another table, no archive that is not https, no command outside the
archive, no file large enough to hurt — and ``agents add`` runs nothing it names.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from acpgate.ops.registry_fetch import MAX_REGISTRY_BYTES
from services.common.config import load_config
from tests.ops.registry_files import binary_agent, here, npx_agent, run, uvx_agent, write_registry

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def trap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``npx``, ``uvx``, ``node``, ``sh`` first on PATH, each leaving a file if run."""
    bin_dir, ran = tmp_path / "trap-bin", tmp_path / "ran"
    bin_dir.mkdir()
    for name in ("npx", "uvx", "node", "npm", "sh", "bash", "kimi"):
        (bin_dir / name).write_text(f"#!/bin/sh\ntouch {ran}-{name}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return tmp_path


def attempt(capsys: Capture, config_dir: Path, *agents: dict[str, Any], agent_id: str,
            alias: str = "") -> tuple[int, str]:
    registry = write_registry(config_dir.parent / "evil-registry.json", *agents)
    argv = ["agents", "add", "--registry", str(registry), "--config-dir", str(config_dir),
            *([f"--alias={alias}"] if alias else []), "--", agent_id]
    code, _, err = run(capsys, *argv)
    return code, err


def refused(capsys: Capture, config_dir: Path, *agents: dict[str, Any], agent_id: str,
            alias: str = "") -> str:
    """The attempt fails cleanly and config.toml is byte for byte what it was."""
    before = (config_dir / "config.toml").read_bytes()
    code, err = attempt(capsys, config_dir, *agents, agent_id=agent_id, alias=alias)
    assert code == 2, f"accepted: {agents}"
    assert "Traceback" not in err
    assert (config_dir / "config.toml").read_bytes() == before
    return err


@pytest.fixture
def config_dir(tmp_path: Path, capsys: Capture) -> Path:
    """An install with its default config (one built-in agent)."""
    out = tmp_path / "cfg"
    registry = write_registry(tmp_path / "ok.json", npx_agent("seed"))
    assert run(capsys, "agents", "add", "seed", "--registry", str(registry),
               "--config-dir", str(out))[0] == 0
    return out


@pytest.mark.parametrize("package", [
    "@x/y; touch /tmp/pwned", "$(touch /tmp/pwned)", "x`id`", "--registry=https://evil.example/",
    "-y", "../../etc/passwd", "pkg@1.0.0 --foo", "https://evil.example/pkg.tgz",
    "git+ssh://git@evil.example/x.git", "pkg@1.0.0\n", "pkg@>=1 || <2", "file:../x",
])
def test_npx_package_names_that_are_not_packages(capsys: Capture, config_dir: Path,
                                                 package: str) -> None:
    err = refused(capsys, config_dir, npx_agent("evil", package), agent_id="evil")
    assert "cannot be used" in err


@pytest.mark.parametrize("package", ["--from=https://evil.example/x.whl", "x; rm -rf ~",
                                     "x @ https://evil.example/x.whl", "git+https://e/x"])
def test_uvx_package_names_that_are_not_packages(capsys: Capture, config_dir: Path,
                                                 package: str) -> None:
    err = refused(capsys, config_dir, uvx_agent("evil", package), agent_id="evil")
    assert "is not a valid PyPI package name" in err


HOSTILE_ARGS = ['; touch /tmp/pwned', '$(touch /tmp/pwned)', '`id`', '| sh', '&& sh',
                'a" ]\t', 'x"]  [agents.evil]  command = "/bin/sh', "'''", '"""', '\\',
                '\\"', '[agents.assistant]', 'command = "sh"', '# comment', 'ø∑ unicode']


def test_shell_and_toml_syntax_stays_inside_its_strings(trap: Path, capsys: Capture,
                                                        config_dir: Path) -> None:
    # Tabs are text; other control characters are refused (next test).
    args = [a for a in HOSTILE_ARGS if "\t" not in a]
    env = {"EVIL_NOTE": 'x" } [agents.evil] command = "sh', "EMPTY": ""}
    code, err = attempt(capsys, config_dir, npx_agent("evil", "@evil/agent@1.0.0", "1.0.0",
                                                      args=args, env=env), agent_id="evil")
    assert code == 0, err
    raw = tomllib.loads((config_dir / "config.toml").read_text())
    assert set(raw) == {"acp", "agents"}
    assert set(raw["agents"]) == {"assistant", "seed", "evil"}
    assert set(raw["agents"]["evil"]) == {"kind", "command", "args", "env"}
    assert raw["agents"]["evil"]["args"] == ["-y", "@evil/agent@1.0.0", *args]
    assert raw["agents"]["evil"]["env"] == env
    assert raw["agents"]["assistant"] == {"kind": "builtin", "provider": "demo", "model": "demo"}
    agent = load_config(config_dir, environ={}).agents["evil"]
    assert agent.command == "npx" and agent.args[2:] == tuple(args)
    assert not list(trap.glob("ran-*")), "agents add ran a program"


@pytest.mark.parametrize("field,value", [
    ("args", ["ok", "line\n[agents.evil]\ncommand = 'sh'"]), ("args", ["\x1b]0;title\x07"]),
    ("args", ["\x00"]), ("args", ["\x9b31m"]), ("args", "--inspect"), ("args", ["x"] * 65),
    ("args", ["x" * 5000]), ("env", {"A": "1\n[agents.evil]"}), ("env", {"A B": "1"}),
    ("env", {"A=B": "1"}), ("env", ["A=1"]), ("name", "Evil\n[agents.evil]"),
])
def test_control_characters_and_shapes_are_refused(capsys: Capture, config_dir: Path,
                                                   field: str, value: Any) -> None:
    agent = npx_agent("evil")
    if field == "name":
        agent["name"] = value
    else:
        agent["distribution"]["npx"][field] = value
    refused(capsys, config_dir, agent, agent_id="evil")


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES",
                                  "NODE_OPTIONS", "node_options", "NODE_PATH", "PYTHONPATH",
                                  "PYTHONSTARTUP", "BASH_ENV", "npm_config_registry",
                                  "NPM_CONFIG_USERCONFIG", "UV_INDEX_URL", "PIP_INDEX_URL",
                                  "PATH", "HOME", "GLIBC_TUNABLES"])
def test_variables_that_load_code_or_move_the_index(capsys: Capture, config_dir: Path,
                                                    name: str) -> None:
    err = refused(capsys, config_dir, npx_agent("evil", env={name: "/tmp/evil"}),
                  agent_id="evil")
    assert f"refuses to set {name}" in err


@pytest.mark.parametrize("alias", ["../x", "../../etc", "a/b", "a.b", "x]\n[y", ".hidden",
                                   "-rf", "x" * 65, "agents.assistant", "a b", "ü"])
def test_aliases_that_leave_their_table_or_directory(capsys: Capture, config_dir: Path,
                                                     alias: str) -> None:
    err = refused(capsys, config_dir, npx_agent("gemini"), agent_id="gemini", alias=alias)
    assert "expected letters, digits" in err
    assert not (config_dir.parent / "x").exists()


@pytest.mark.parametrize("agent_id", ["../x", "Evil", "x.y", "a/b", "-x"])
def test_ids_outside_the_registry_pattern(capsys: Capture, config_dir: Path,
                                          agent_id: str) -> None:
    err = refused(capsys, config_dir, npx_agent(agent_id), agent_id=agent_id)
    assert "is not a registry id" in err


@pytest.mark.parametrize("target", [
    {"archive": "http://evil.example/kimi.tar.gz"}, {"archive": "file:///etc/passwd"},
    {"archive": "https://evil.example/a b.tgz"}, {"cmd": "../../../bin/sh"},
    {"cmd": "/bin/sh"}, {"cmd": "~/evil"}, {"cmd": "./bin/../../x"}, {"cmd": "x;sh"},
])
def test_binary_archives_and_commands(trap: Path, capsys: Capture, config_dir: Path,
                                      target: dict[str, str]) -> None:
    here()
    refused(capsys, config_dir, binary_agent("evil", **target), agent_id="evil")
    assert not list(trap.glob("ran-*"))


def test_a_huge_registry_is_refused_unread(tmp_path: Path, capsys: Capture,
                                           config_dir: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(MAX_REGISTRY_BYTES * 8)  # sparse: costs no disk
    before = (config_dir / "config.toml").read_bytes()
    code, _, err = run(capsys, "agents", "add", "x", "--registry", str(huge),
                       "--config-dir", str(config_dir))
    assert code == 2 and "larger than 4 MiB" in err
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    code, _, err = run(capsys, "agents", "add", "x", "--registry", str(deep),
                       "--config-dir", str(config_dir))
    assert code == 2 and "Traceback" not in err
    assert (config_dir / "config.toml").read_bytes() == before


def test_nothing_the_registry_names_is_run(trap: Path, capsys: Capture,
                                           config_dir: Path) -> None:
    for agent in (npx_agent("a", args=["--acp"]), uvx_agent("b"), binary_agent("kimi")):
        code, err = attempt(capsys, config_dir, agent, agent_id=agent["id"])
        assert code == 0, err
    assert not list(trap.glob("ran-*")), "agents add ran a program"
    assert not (config_dir / "agents").exists(), "agents add installs nothing"
