"""The real adapters of this tier: where they are installed and how acpgate runs them.

The tier installs npm packages into one cache directory (``.ci/run`` does it,
``ACPGATE_REAL_ADAPTERS`` names it; the pinned list is ``packages.txt``). Each
:class:`RealAdapter` knows its executable under ``node_modules/.bin`` and
writes its ``[agents.<alias>]`` entry, with its model traffic pointed at the
local fake provider (:mod:`tests.realagents.fake_models`) and its state
(home, config) inside the test's own directory. These entries are the ones
docs/agents.md documents, with the fake URLs and keys in place of real ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.realagents.fake_gemini import GEMINI_KEY

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


def gemini_home(state: Path) -> Path:
    """gemini-cli's HOME in the test's state dir (its settings under ``.gemini/``)."""
    home = state / "gemini-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _gemini_env(model_url: str, state: Path) -> dict[str, str]:
    return {"HOME": str(gemini_home(state)), "GOOGLE_GEMINI_BASE_URL": model_url,
            "GEMINI_API_KEY": GEMINI_KEY, "GEMINI_CLI_TRUST_WORKSPACE": "true"}


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
    #: Its arguments (gemini-cli speaks ACP with ``--acp``).
    args: tuple[str, ...] = ()
    #: The mode in which it asks permission before running a shell command ("" = the mode
    #: it starts in does): claude-agent-acp starts in ``auto``, which asks nothing.
    ask_mode: str = ""
    #: Its ``session/load`` (or ``resume``) works in a fresh process. gemini-cli 0.61's does
    #: at times: it starts the session's record anew while reading it, so it restores the
    #: session, answers "No previous sessions found for this project." or replays an empty
    #: conversation, whichever comes first; acpgate carries the conversation over itself
    #: for the last two.
    restores_itself: bool = True
    #: Its prompt result reports token usage (``usage`` or ``_meta.quota``).
    reports_usage: bool = True
    #: It advertises ``sessionCapabilities.fork``: acpgate's fork runs its own.
    forks_itself: bool = False
    #: It announces a tool call with a ``tool_call`` update; gemini-cli 0.61 only in the
    #: permission request it sends first (then ``tool_call_update``).
    announces_tool_calls: bool = True

    def command(self, base: Path) -> Path:
        """The installed executable."""
        return base / "node_modules" / ".bin" / self.bin_name

    def installed(self, base: Path) -> bool:
        """True when the executable is there."""
        return self.command(base).exists()

    def config_entry(self, base: Path, model_url: str, state: Path,
                     env: dict[str, str] | None = None) -> str:
        """The ``[agents.<alias>]`` entry for acpgate's config.toml (``env``: instead of the
        adapter's own)."""
        args = f"args = {json.dumps(list(self.args))}\n" if self.args else ""
        return (f"[agents.{self.alias}]\nkind = \"acp\"\n"
                f"command = {json.dumps(str(self.command(base)))}\n{args}"
                f"env = {_toml_env(self.env(model_url, state) if env is None else env)}\n")

    def argv(self, base: Path) -> list[str]:
        """The command line that runs it directly."""
        return [str(self.command(base)), *self.args]


CLAUDE = RealAdapter("claude", "claude-agent-acp", _claude_env, "acceptEdits", ask_mode="default",
                     forks_itself=True)
CODEX = RealAdapter("codex", "codex-acp", _codex_env, "workspace-write", ask_mode="read-only",
                    forks_itself=True)
GEMINI = RealAdapter("gemini", "gemini", _gemini_env, "autoEdit", args=("--acp",),
                     restores_itself=False, announces_tool_calls=False)
ADAPTERS = (CLAUDE, CODEX, GEMINI)
