"""The auth method the edge picks by itself when an adapter asks for authentication: an
``env_var`` method whose variables are all set, else a known adapter's typeless method
(codex-acp 2.x's ``api-key``) when one of the variables it reads is set in the adapter's
own environment — never from what a method's id, description or ``_meta`` say."""

from __future__ import annotations

import pytest

from services.edge.adapter.auto_login import auto_login_method
from tests.realagents.profiles import CODEX_NAME, CODEX_PROFILE

CODEX_METHODS = CODEX_PROFILE["authMethods"]


@pytest.fixture(autouse=True)
def _no_keys_around(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY", "K1"):
        monkeypatch.delenv(name, raising=False)


def test_codex_26_typeless_api_key_method_when_its_key_is_set() -> None:
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {"OPENAI_API_KEY": "sk-x"}) == "api-key"
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {"CODEX_API_KEY": "sk-x"}) == "api-key"
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {}) == ""  # no key: chat-gpt never
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {"OPENAI_API_KEY": ""}) == ""
    # An explicit "agent" type is the same as none.
    typed = [{**m, "type": "agent"} for m in CODEX_METHODS]
    assert auto_login_method(typed, CODEX_NAME, {"CODEX_API_KEY": "sk-x"}) == "api-key"


def test_acpgate_environment_counts_only_where_pass_env_names_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-of-acpgate")
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {}) == ""
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {}, ["OPENAI_API_KEY"]) == "api-key"
    assert auto_login_method(CODEX_METHODS, CODEX_NAME, {}, ["OPENAI_*"]) == "api-key"


def test_typeless_methods_of_unknown_agents_or_ids_are_never_picked() -> None:
    env = {"OPENAI_API_KEY": "sk-x", "CODEX_API_KEY": "sk-y"}
    # The same methods from an agent not known to read those variables.
    assert auto_login_method(CODEX_METHODS, "some-agent", env) == ""
    assert auto_login_method(CODEX_METHODS, "", env) == ""
    # A method that names a variable in its id, name, description or _meta.
    named = [{"id": "OPENAI_API_KEY", "name": "OPENAI_API_KEY",
              "description": "reads $OPENAI_API_KEY", "_meta": {"env": "OPENAI_API_KEY",
                                                                "api-key": {"provider": "openai"}}}]
    assert auto_login_method(named, CODEX_NAME, env) == ""
    assert auto_login_method(named, "some-agent", env) == ""
    # A known id with another type is not the typeless method.
    assert auto_login_method([{"id": "api-key", "name": "k", "type": "terminal"}],
                             CODEX_NAME, env) == ""


def test_env_var_methods_come_first_and_need_all_their_variables() -> None:
    methods = [*CODEX_METHODS,
               {"id": "k2", "type": "env_var", "vars": [{"name": "K2"}, {"name": "K3"}]}]
    assert auto_login_method(methods, CODEX_NAME, {"K2": "a", "K3": "b",
                                                   "OPENAI_API_KEY": "c"}) == "k2"
    assert auto_login_method(methods, CODEX_NAME, {"K2": "a", "OPENAI_API_KEY": "c"}) == "api-key"
    assert auto_login_method(["junk", {"id": 3}, {"name": "no id"}], CODEX_NAME,
                             {"OPENAI_API_KEY": "c"}) == ""
