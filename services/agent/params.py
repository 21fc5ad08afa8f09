"""Reading what the edge (or an editor) sends the built-in agent: param aliases, acpgate's
``_meta``, and the environment the agent's own children get.

Pure: no I/O, no session state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common.config import ENV_PREFIX, Config
from services.common.protocol import META_ACPGATE

__all__ = ["acpgate_meta", "first", "shell_environment"]


def first(params: Mapping[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` present and not null (SPEC §1 param aliases)."""
    for key in keys:
        if params.get(key) is not None:
            return params[key]
    return None


def acpgate_meta(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params._meta.acpgate`` ({} when absent or not an object)."""
    meta = params.get("_meta")
    inner = meta.get(META_ACPGATE) if isinstance(meta, dict) else None
    return inner if isinstance(inner, dict) else {}


def shell_environment(cfg: Config, environ: Mapping[str, str]) -> dict[str, str]:
    """The shell's environment: ours minus every provider API key variable and acpgate's
    own configuration overrides (``ACPGATE_<section>__<key>``: not the shell's business;
    the lease markers stay, the reaper finds a detached descendant by them)."""
    secret_names = {a.api_key_env for a in cfg.agents.values() if a.api_key_env}
    return {k: v for k, v in environ.items()
            if k not in secret_names and not (k.startswith(ENV_PREFIX) and "__" in k)}
