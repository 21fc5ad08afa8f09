"""Model providers of the built-in agent and the factory that picks one from config."""

from __future__ import annotations

import os
from collections.abc import Mapping

from services.agent.providers.anthropic import AnthropicProvider
from services.agent.providers.base import (
    KeyMissingProvider,
    Provider,
    ProviderError,
    provider_warnings,
)
from services.agent.providers.demo import DemoProvider
from services.agent.providers.http import RetryPolicy
from services.agent.providers.openai import OpenAIProvider
from services.common.config import AgentSection
from services.common.protocol import MSG_API_KEY_MISSING

__all__ = ["KEYED_PROVIDERS", "Provider", "ProviderError", "make_provider", "provider_warnings"]

#: The providers that send the key ``api_key_env`` names (the demo model reads none).
KEYED_PROVIDERS = ("openai", "anthropic")


def make_provider(agent: AgentSection, environ: Mapping[str, str] | None = None) -> Provider:
    """Build the provider an ``[agents.<alias>]`` entry names.

    The API key is read from the environment variable named by ``api_key_env``. No
    ``api_key_env`` means no key (local servers such as Ollama need none); one that names
    an unset or empty variable gives a :class:`KeyMissingProvider`, whose calls fail
    saying so (``MSG_API_KEY_MISSING``) instead of going out without a key.
    """
    env = os.environ if environ is None else environ
    api_key = env.get(agent.api_key_env, "") if agent.api_key_env else ""
    if agent.api_key_env and not api_key and agent.provider in KEYED_PROVIDERS:
        return KeyMissingProvider(agent.provider, MSG_API_KEY_MISSING.format(
            variable=agent.api_key_env, alias=agent.alias))
    retry = RetryPolicy(max_retries=max(0, agent.max_retries))
    timeout = float(agent.request_timeout_secs)
    if agent.provider == "openai":
        return OpenAIProvider(agent.model, api_key=api_key, base_url=agent.base_url,
                              timeout_secs=timeout, retry=retry)
    if agent.provider == "anthropic":
        return AnthropicProvider(agent.model, api_key=api_key, base_url=agent.base_url,
                                 timeout_secs=timeout, retry=retry)
    if agent.provider in ("demo", ""):
        return DemoProvider(agent.model or "demo")
    raise ProviderError(f"unknown provider `{agent.provider}` for agent `{agent.alias}`")
