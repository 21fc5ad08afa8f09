"""Local ACP Registry files for the ``acpgate agents`` tests, in the registry's real shapes
(github.com/agentclientprotocol/registry: agent.schema.json), and the command run in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acpgate.cli import main
from acpgate.ops.agent_entry import host_platform
from acpgate.ops.registry import PLATFORMS


def npx_agent(agent_id: str = "gemini", package: str = "@google/gemini-cli@0.27.3",
              version: str = "0.27.3", **dist: Any) -> dict[str, Any]:
    return {"id": agent_id, "name": "Gemini CLI", "version": version,
            "description": "Google's official CLI for Gemini", "license": "Apache-2.0",
            "repository": "https://github.com/google-gemini/gemini-cli", "icon": "./icon.svg",
            "distribution": {"npx": {"package": package, **dist}}}


def uvx_agent(agent_id: str = "fast-agent", package: str = "fast-agent-acp",
              version: str = "0.2.1", **dist: Any) -> dict[str, Any]:
    return {"id": agent_id, "name": "fast-agent", "version": version,
            "description": "An agent from PyPI", "distribution": {"uvx": {"package": package,
                                                                          **dist}}}


def binary_agent(agent_id: str = "kimi", platforms: tuple[str, ...] = PLATFORMS,
                 **target: Any) -> dict[str, Any]:
    entries = {p: {"archive": f"https://github.com/MoonshotAI/kimi-cli/releases/download/1.9/"
                              f"kimi-1.9-{p}.tar.gz", "cmd": "./kimi", "args": ["acp"], **target}
               for p in platforms}
    return {"id": agent_id, "name": "Kimi CLI", "version": "1.9.0",
            "description": "Moonshot AI's coding assistant", "distribution": {"binary": entries}}


def write_registry(path: Path, *agents: dict[str, Any], **extra: Any) -> Path:
    path.write_text(json.dumps({"version": "1.0.0", "agents": list(agents), "extensions": [],
                                **extra}))
    return path


def here() -> str:
    """This machine's platform key; the binary tests need one the registry knows."""
    where = host_platform()
    if not where:
        pytest.skip("this machine is no registry platform")
    return where


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``acpgate ARGV`` in this process: exit code, stdout, stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
