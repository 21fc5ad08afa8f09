"""``acpgate agents add | list | search`` from a local registry file.

An npx, a uvx and a binary manifest each become one ``[agents.<alias>]`` table that
loads with the config schema, the rest of config.toml kept; the key variables are named
with whether they are set (never their values); an unknown id, a malformed manifest, an
existing alias and a platform the manifest lacks are clear errors that leave the file as
it was. ``acpgate doctor`` then reports on what was written: the runtime each entry needs,
and Node's version against the ``engines.node`` the npm package declares.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.common.config import load_config
from tests.e2e.harness import ACPGATE, child_env
from tests.ops.registry_files import (
    binary_agent,
    here,
    npx_agent,
    run,
    uvx_agent,
    write_registry,
)

Capture = pytest.CaptureFixture[str]


def add(capsys: Capture, config_dir: Path, registry: Path, *argv: str) -> tuple[int, str, str]:
    return run(capsys, "agents", "add", *argv, "--registry", str(registry),
               "--config-dir", str(config_dir))


def test_an_npx_agent_is_pinned_to_the_manifest_version(tmp_path: Path, capsys: Capture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    registry = write_registry(tmp_path / "registry.json", npx_agent(args=["--experimental-acp"]),
                              npx_agent("auggie", "@augmentcode/auggie", "0.15.0",
                                        env={"AUGMENT_DISABLE_AUTO_UPDATE": "1"}))
    monkeypatch.setenv("GEMINI_API_KEY", "secret-gemini-key-value")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    code, out, err = add(capsys, tmp_path / "cfg", registry, "gemini")
    assert code == 0, err
    cfg = load_config(tmp_path / "cfg", environ={})
    gemini = cfg.agents["gemini"]
    assert (gemini.kind, gemini.command) == ("acp", "npx")
    assert gemini.args == ("-y", "@google/gemini-cli@0.27.3", "--experimental-acp")
    assert gemini.pass_env == ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert "GEMINI_API_KEY is set" in out and "GOOGLE_API_KEY is not set" in out
    assert "secret-gemini-key-value" not in out + err
    assert "nothing was installed" in out and "@google/gemini-cli@0.27.3" in out
    # A package without a version in its spec gets the manifest's; its env is written.
    code, out, err = add(capsys, tmp_path / "cfg", registry, "auggie", "--alias", "aug")
    assert code == 0, err
    aug = load_config(tmp_path / "cfg", environ={}).agents["aug"]
    assert aug.args == ("-y", "@augmentcode/auggie@0.15.0")
    assert dict(aug.env) == {"AUGMENT_DISABLE_AUTO_UPDATE": "1"} and aug.pass_env == ()
    assert "names no key variable" in out
    # The default config is kept around the new tables: its comments, its demo agent.
    text = (tmp_path / "cfg" / "config.toml").read_text()
    assert "# The built-in agent on the offline demo model" in text
    assert set(load_config(tmp_path / "cfg", environ={}).agents) == {"assistant", "gemini", "aug"}


def test_a_uvx_agent_runs_the_pinned_package(tmp_path: Path, capsys: Capture) -> None:
    registry = write_registry(tmp_path / "registry.json", uvx_agent(args=["serve"]),
                              uvx_agent("pinned", "other-agent==1.4.0", "1.4.0"),
                              uvx_agent("extras", "big-agent[acp]>=2", "2.1.0"))
    for agent_id in ("fast-agent", "pinned", "extras"):
        code, _, err = add(capsys, tmp_path, registry, agent_id)
        assert code == 0, err
    agents = load_config(tmp_path, environ={}).agents
    assert agents["fast-agent"].command == "uvx"
    assert agents["fast-agent"].args == ("fast-agent-acp@0.2.1", "serve")
    assert agents["pinned"].args == ("other-agent@1.4.0",)
    assert agents["extras"].args == ("--from", "big-agent[acp]==2.1.0", "big-agent")


def test_a_binary_agent_names_the_archive_and_where_it_goes(tmp_path: Path,
                                                            capsys: Capture) -> None:
    registry = write_registry(tmp_path / "registry.json", binary_agent(),
                              binary_agent("elsewhere", platforms=("windows-aarch64",)))
    code, out, err = add(capsys, tmp_path, registry, "kimi")
    assert code == 0, err
    kimi = load_config(tmp_path, environ={}).agents["kimi"]
    bin_dir = tmp_path / "agents" / "kimi" / "bin"
    assert kimi.command == str(bin_dir / "kimi") and kimi.args == ("acp",)
    assert f"kimi-1.9-{here()}.tar.gz" in out and str(bin_dir) in out
    assert not bin_dir.exists(), "agents add installs nothing"
    before = (tmp_path / "config.toml").read_text()
    code, _, err = add(capsys, tmp_path, registry, "elsewhere")
    assert code == 2 and "no binary for this machine" in err and "windows-aarch64" in err
    assert (tmp_path / "config.toml").read_text() == before


def test_unknown_ids_malformed_manifests_and_taken_aliases_are_refused(
        tmp_path: Path, capsys: Capture) -> None:
    broken = npx_agent("broken")
    broken["distribution"]["npx"]["package"] = 42
    registry = write_registry(tmp_path / "registry.json", npx_agent(), broken,
                              {"id": "no-dist", "name": "x", "version": "1.0.0",
                               "description": "", "distribution": {"pip": {}}})
    assert add(capsys, tmp_path, registry, "gemini")[0] == 0
    before = (tmp_path / "config.toml").read_text()
    code, _, err = add(capsys, tmp_path, registry, "gemni")
    assert code == 2 and "no agent 'gemni'" in err and "did you mean gemini" in err
    code, _, err = add(capsys, tmp_path, registry, "broken")
    assert code == 2 and "cannot be used" in err
    assert "distribution.npx.package: expected a string" in err
    code, _, err = add(capsys, tmp_path, registry, "no-dist")
    assert code == 2 and "offers none of npx, uvx, binary" in err
    code, _, err = add(capsys, tmp_path, registry, "gemini")
    assert code == 2 and "already has [agents.gemini]" in err and "--force" in err
    assert (tmp_path / "config.toml").read_text() == before
    (tmp_path / "junk.json").write_text("{not json")
    code, _, err = add(capsys, tmp_path, tmp_path / "junk.json", "gemini")
    assert code == 2 and "not JSON" in err
    (tmp_path / "other.json").write_text('{"servers": []}')
    code, _, err = add(capsys, tmp_path, tmp_path / "other.json", "gemini")
    assert code == 2 and "not an ACP registry" in err
    code, _, err = add(capsys, tmp_path, tmp_path / "missing.json", "gemini")
    assert code == 2 and "cannot read the registry file" in err
    assert (tmp_path / "config.toml").read_text() == before
    # --force replaces the table; --alias writes another beside it.
    newer = write_registry(tmp_path / "newer.json", npx_agent(version="0.28.0",
                                                              package="@google/gemini-cli"))
    assert add(capsys, tmp_path, newer, "gemini", "--force")[0] == 0
    assert add(capsys, tmp_path, registry, "gemini", "--alias", "gemini-old")[0] == 0
    agents = load_config(tmp_path, environ={}).agents
    assert agents["gemini"].args == ("-y", "@google/gemini-cli@0.28.0")
    assert agents["gemini-old"].args == ("-y", "@google/gemini-cli@0.27.3")


def test_a_registry_url_must_be_https_and_reachable(tmp_path: Path, capsys: Capture) -> None:
    for url in ("http://cdn.example/registry.json", "file:///etc/passwd"):
        code, _, err = run(capsys, "agents", "add", "x", "--registry", url,
                           "--config-dir", str(tmp_path))
        assert code == 2 and "only https:// URLs or a local file" in err
    code, _, err = run(capsys, "agents", "add", "x", "--registry",
                       "https://127.0.0.1:9/registry.json", "--config-dir", str(tmp_path))
    assert code == 2 and "could not fetch the registry" in err and "--registry FILE" in err
    assert not (tmp_path / "config.toml").exists()


def test_list_and_search(tmp_path: Path, capsys: Capture) -> None:
    broken = npx_agent("broken", package="not a package")
    registry = write_registry(tmp_path / "registry.json", npx_agent(), uvx_agent(),
                              binary_agent(), broken)
    code, out, err = run(capsys, "agents", "search", "--registry", str(registry))
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["fast-agent", "gemini", "kimi"]
    assert "left out" in err and "broken" in err
    code, out, _ = run(capsys, "agents", "search", "moonshot", "--registry", str(registry))
    assert [line.split()[:3] for line in out.splitlines()] == [["kimi", "1.9.0", "binary"]]
    assert add(capsys, tmp_path, registry, "gemini")[0] == 0
    code, out, _ = run(capsys, "agents", "list", "--config-dir", str(tmp_path))
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["*", "assistant", "builtin"]
    assert lines[1].split() == ["gemini", "acp", "npx", "-y", "@google/gemini-cli@0.27.3"]


# ------------------------------------------------------------------ doctor on the result

def fake_tools(bin_dir: Path, node_version: str, marker: Path) -> None:
    """``node``/``npm`` that print versions, and an ``npx`` that leaves ``marker``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("node", f"echo {node_version}"), ("npm", "echo 10.2.4"),
                       ("npx", f"touch {marker}")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{text}\n")
        (bin_dir / name).chmod(0o755)


def doctor(config_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([*ACPGATE, "doctor", "--json", "--config-dir", str(config_dir)],
                          capture_output=True, text=True, env=env, timeout=120)
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_doctor_checks_each_added_agent_and_the_node_its_package_declares(
        tmp_path: Path, capsys: Capture) -> None:
    registry = write_registry(tmp_path / "registry.json",
                              npx_agent("claude-acp", "@agentclientprotocol/claude-agent-acp",
                                        "0.101.0"),
                              uvx_agent(), binary_agent())
    config_dir = tmp_path / "cfg"
    for agent_id in ("claude-acp", "fast-agent", "kimi"):
        code, _, err = add(capsys, config_dir, registry, agent_id)
        assert code == 0, err
    # npx's cache holds the package as npx fetched it: it declares Node >= 22.
    package = (tmp_path / "npm" / "_npx" / "3f2a" / "node_modules" / "@agentclientprotocol"
               / "claude-agent-acp")
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps(
        {"name": "@agentclientprotocol/claude-agent-acp", "version": "0.101.0",
         "engines": {"node": ">=22"}}))
    marker = tmp_path / "npx-ran"
    env = child_env()
    env.pop("ANTHROPIC_API_KEY", None)
    env.update(PATH=str(tmp_path / "bin"), npm_config_cache=str(tmp_path / "npm"))
    fake_tools(tmp_path / "bin", "v20.11.1", marker)
    checks = doctor(config_dir, env)
    assert checks["config"]["status"] == "ok"
    assert checks["agent claude-acp"]["status"] == "ok"
    key = checks["key claude-acp"]
    assert key["status"] == "warn" and "ANTHROPIC_API_KEY" in key["why"]
    uvx = checks["agent fast-agent"]
    assert uvx["status"] == "fail" and "'uvx' is not found" in uvx["why"]
    assert "install uv" in uvx["fix"]
    kimi = checks["agent kimi"]
    assert kimi["status"] == "fail" and str(config_dir / "agents" / "kimi" / "bin") in kimi["why"]
    node = checks["node"]
    assert node["status"] == "fail" and "node v20.11.1 does not fit" in node["why"]
    assert "claude-agent-acp 0.101.0 declares node >=22" in node["why"]
    assert ">=22" in node["fix"]
    # A Node that fits passes; a version of the package npx has not fetched is not judged.
    fake_tools(tmp_path / "bin", "v22.12.0", marker)
    node = doctor(config_dir, env)["node"]
    assert node["status"] == "ok" and "claude-acp wants >=22" in node["why"]
    fake_tools(tmp_path / "bin", "v20.11.1", marker)
    shutil.rmtree(tmp_path / "npm" / "_npx")
    assert doctor(config_dir, env)["node"]["status"] == "ok"
    assert not marker.exists(), "neither agents add nor doctor runs the agent"
