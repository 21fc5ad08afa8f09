"""The real adapters of this tier: where they are installed and how acpgate runs them.

The tier installs npm packages into one cache directory (``.ci/run`` does it,
``ACPGATE_REAL_ADAPTERS`` names it; the pinned list is ``packages.txt``). Each
:class:`RealAdapter` knows its executable under ``node_modules/.bin`` and
writes its ``[agents.<alias>]`` entry, with its model traffic pointed at the
local fake provider (:mod:`tests.realagents.fake_models`) and its state
(home, config) inside the test's own directory. These entries are the ones
the README documents, with the fake URLs and keys in place of real ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The pinned npm packages the tier installs (``.ci/run`` reads the same file).
PACKAGES_FILE = Path(__file__).with_name("packages.txt")
#: Environment variable naming the cache dir (the one holding ``node_modules``).
ENV_DIR = "ACPGATE_REAL_ADAPTERS"


def adapters_dir() -> Path | None:
    """The cache dir, when ``ACPGATE_REAL_ADAPTERS`` names one with ``node_modules``."""
    value = os.environ.get(ENV_DIR, "")
    if not value:
        return None
    path = Path(value)
    return path if (path / "node_modules").is_dir() else None


def _toml_env(env: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }"


def _claude_env(model_url: str, state: Path) -> dict[str, str]:
    home = state / "claude-home"
    home.mkdir(parents=True, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
        # Claude Code refuses to run as root unless told it is sandboxed (CI runs as root).
        "IS_SANDBOX": "1",
        "HOME": str(home),
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
    }


def _codex_env(model_url: str, state: Path) -> dict[str, str]:
    codex_home = state / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model_provider = "fake"\n'
        'model = "gpt-5.1"\n'
        "[model_providers.fake]\n"
        'name = "fake"\n'
        f'base_url = "{model_url}/v1"\n'
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n')
    return {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-fake-key-for-tests",
            "HOME": str(codex_home)}


@dataclass(frozen=True)
class RealAdapter:
    """One npm-installed ACP adapter."""

    alias: str
    #: The executable under ``node_modules/.bin``.
    bin_name: str
    env: Callable[[str, Path], dict[str, str]]
    #: The mode id ``session/set_mode`` switches to in the tier.
    other_mode: str

    def command(self, base: Path) -> Path:
        """The installed executable."""
        return base / "node_modules" / ".bin" / self.bin_name

    def installed(self, base: Path) -> bool:
        """True when the executable is there."""
        return self.command(base).exists()

    def config_entry(self, base: Path, model_url: str, state: Path) -> str:
        """The ``[agents.<alias>]`` entry for acpgate's config.toml."""
        return (f"[agents.{self.alias}]\nkind = \"acp\"\n"
                f"command = {json.dumps(str(self.command(base)))}\n"
                f"env = {_toml_env(self.env(model_url, state))}\n")


CLAUDE = RealAdapter("claude", "claude-agent-acp", _claude_env, "acceptEdits")
CODEX = RealAdapter("codex", "codex-acp", _codex_env, "auto")
ADAPTERS = (CLAUDE, CODEX)
