"""What acpgate knows about external ACP adapters: their npm packages, the variables they
read an API key from, and which package an ``[agents.<alias>]`` entry runs.

The ACP Registry names no key variables (its agents authenticate themselves), so the
adapters acpgate documents are listed here; ``agents add`` and ``doctor`` both read it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ADAPTER_KEYS", "KNOWN_ADAPTERS", "RUNTIME_HINTS", "adapter_keys", "exact_version",
           "install_hint", "npx_package", "split_npm_spec"]

#: Adapters docs/agents.md documents, by command name: their npm package and key variables.
KNOWN_ADAPTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "claude-agent-acp": ("@agentclientprotocol/claude-agent-acp", ("ANTHROPIC_API_KEY",)),
    "codex-acp": ("@agentclientprotocol/codex-acp", ("OPENAI_API_KEY", "CODEX_API_KEY")),
    "gemini": ("@google/gemini-cli", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
}
#: The same variables by npm package (``npx`` entries), with the packages' older names.
ADAPTER_KEYS: dict[str, tuple[str, ...]] = {
    **{package: keys for package, keys in KNOWN_ADAPTERS.values()},
    "@zed-industries/claude-code-acp": ("ANTHROPIC_API_KEY",),
    "@zed-industries/codex-acp": ("OPENAI_API_KEY", "CODEX_API_KEY"),
}
#: How to get a runtime that is missing, by command name.
RUNTIME_HINTS = {
    "npx": "install Node.js (npx comes with npm)",
    "uvx": "install uv (https://docs.astral.sh/uv/getting-started/installation/)",
}
_VERSION_RE = re.compile(r"[0-9]+(\.[0-9]+){0,2}([-+][0-9A-Za-z.+-]*)?")


def split_npm_spec(spec: str) -> tuple[str, str]:
    """``"@scope/name@1.2.3"`` → ``("@scope/name", "1.2.3")``; no version: ``""``."""
    name, at, version = spec[1:].partition("@") if spec.startswith("@") else \
        spec.partition("@")
    name = "@" + name if spec.startswith("@") else name
    return name, version if at else ""


def npx_package(command: str, args: Sequence[str]) -> tuple[str, str] | None:
    """The npm package (name, pinned version or "") an ``npx`` command line runs, or None."""
    if Path(command).name != "npx":
        return None
    for arg in args:
        if arg.startswith("--package="):
            return split_npm_spec(arg.split("=", 1)[1])
        if not arg.startswith("-"):
            return split_npm_spec(arg)
    return None


def exact_version(version: str) -> bool:
    """True when ``version`` pins one release (``1.2.3``), not a tag or a range."""
    return bool(_VERSION_RE.fullmatch(version)) and version.count(".") >= 2


def adapter_keys(command: str, args: Sequence[str]) -> tuple[str, ...]:
    """The API-key variables the adapter an entry runs is known to read (``()``: none known)."""
    known = KNOWN_ADAPTERS.get(Path(command).name)
    if known is not None:
        return known[1]
    package = npx_package(command, args)
    return ADAPTER_KEYS.get(package[0], ()) if package else ()


def install_hint(command: str) -> str:
    """What to do when ``command`` is not found."""
    name = Path(command).name
    if name in RUNTIME_HINTS:
        return RUNTIME_HINTS[name]
    package = KNOWN_ADAPTERS.get(name, ("", ()))[0]
    return (f"npm install -g {package} (the README names the tested version)" if package
            else "install it")
