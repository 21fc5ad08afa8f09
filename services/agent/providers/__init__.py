"""Model providers of the built-in agent and the factory that picks one from config."""

from __future__ import annotations

import os
from collections.abc import Mapping

from services.agent.providers.anthropic import AnthropicProvider
from services.agent.providers.base import Provider, ProviderError
from services.agent.providers.demo import DemoProvider
from services.agent.providers.http import RetryPolicy
from services.agent.providers.openai import OpenAIProvider
from services.common.config import AgentSection

__all__ = ["Provider", "ProviderError", "make_provider"]


def make_provider(agent: AgentSection, environ: Mapping[str, str] | None = None) -> Provider:
    """Build the provider an ``[agents.<alias>]`` entry names.

    The API key is read from the environment variable named by ``api_key_env``;
    a missing key is not an error here (local servers such as Ollama need none),
    the provider's 401 will say so.
    """
    env = os.environ if environ is None else environ
    api_key = env.get(agent.api_key_env, "") if agent.api_key_env else ""
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
