"""The auth method acpgate picks by itself when an adapter asks for authentication.

An adapter that answers a setup request with "authentication required" gets one
``authenticate`` from the edge — ``{"methodId": ...}`` and nothing else: no
credential ever goes in the request. The adapter reads its key from its own
environment (its ``env``, and the variables of acpgate's environment its
``pass_env`` names), which the operator gave it whether or not it logs in. A
method is picked only when the variables it reads are set there:

- an ``env_var`` method (typed) names its variables: all of them must be set
  (:func:`services.edge.adapter.caps.env_auth_method`);
- a method without a ``type`` (ACP's default, ``agent``: the agent authenticates
  itself) names none; its variables are known only from the adapter's own
  documentation, so they are listed here by the adapter's ``agentInfo.name`` and
  the method's id (:data:`KNOWN_AGENT_METHODS`), and one of them set suffices
  (the adapter reads the first it finds). Nothing is guessed from a method's
  name, description or ``_meta`` (ACP forbids assumptions about ``_meta``): an
  agent's own words cannot make acpgate pick a method. An agent that claims
  another's name gains nothing: the variables checked are in its own
  environment, and the request carries only the method id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.env_names import passes
from services.edge.adapter.caps import env_auth_method

__all__ = ["AUTH_TYPE_AGENT", "KNOWN_AGENT_METHODS", "auto_login_method"]

#: ACP's default auth method type (the one a method without ``type`` has).
AUTH_TYPE_AGENT = "agent"

#: Typeless methods of known adapters that read an API key from the adapter's environment:
#: (``agentInfo.name``, method id) → the variables it reads, as its documentation says
#: (codex-acp 2.x: ``api-key`` takes ``CODEX_API_KEY``, else ``OPENAI_API_KEY``).
KNOWN_AGENT_METHODS: dict[tuple[str, str], tuple[str, ...]] = {
    ("@agentclientprotocol/codex-acp", "api-key"): ("CODEX_API_KEY", "OPENAI_API_KEY"),
}


def _is_set(name: str, env: Mapping[str, str], pass_env: Sequence[str]) -> bool:
    """``name`` is set in the adapter's environment (``env``, or acpgate's where
    ``pass_env`` names it)."""
    return bool(env.get(name) or (passes(name, pass_env) and os.environ.get(name)))


def _known_agent_method(auth_methods: Sequence[Any], agent_name: str,
                        env: Mapping[str, str], pass_env: Sequence[str]) -> str:
    for method in auth_methods:
        if not isinstance(method, dict) or not isinstance(method.get("id"), str):
            continue
        if method.get("type", AUTH_TYPE_AGENT) != AUTH_TYPE_AGENT:
            continue
        names = KNOWN_AGENT_METHODS.get((agent_name, method["id"]), ())
        if any(_is_set(n, env, pass_env) for n in names):
            return str(method["id"])
    return ""


def auto_login_method(auth_methods: Sequence[Any], agent_name: str, env: Mapping[str, str],
                      pass_env: Sequence[str] = ()) -> str:
    """The method id the edge authenticates an adapter with, or "" (none fits): an
    ``env_var`` method first, then a known typeless one (module doc). ``agent_name`` is
    the adapter's ``agentInfo.name`` ("" when it sent none)."""
    typed = env_auth_method(auth_methods, env, pass_env)
    if typed or not agent_name:
        return typed
    return _known_agent_method(auth_methods, agent_name, env, pass_env)

