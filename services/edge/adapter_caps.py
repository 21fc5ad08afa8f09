"""What an adapter can do, and what the edge tells it the client side can do (issue 17).

Both directions are the typed ACP models (:mod:`services.common.acp.schema`):

- :func:`read_initialize_result` reads an adapter's ``initialize`` result — its
  ``agentCapabilities`` and ``authMethods`` — and :func:`recorded_capabilities`
  the copy the session service recorded for the alias (:func:`recorded_json` is
  what is recorded), so the edge's own ``initialize`` can advertise what the
  connection's default agent takes before any session runs;
- :func:`client_capabilities` is the ``clientCapabilities`` the edge sends the
  adapter, promising exactly what will be honoured under the session's policy —
  ``fs`` is served by the edge when the client does not serve it (so reads are
  always on, writes unless the policy is ``readonly``); ``terminal`` only when
  the client runs terminals itself and the policy allows commands (acpgate never
  runs an adapter's terminal itself: only the lifecycle service starts
  processes, and it starts adapters, not shells); elicitation as the client
  advertised it (the edge relays elicitation requests to the client);
- :func:`env_auth_method` picks the advertised ``env_var`` auth method whose
  variables are set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from services.common.acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    FileSystemCapabilities,
    InitializeResponse,
)
from services.common.acp.wire import AcpDecodeError
from services.common.env_names import passes
from services.common.path_policy import may_run_shell
from services.common.policy import SecurityPolicy
from services.common.protocol import META_ACPGATE, META_WARNINGS, PROTOCOL_VERSION

__all__ = [
    "AUTH_TYPE_ENV_VAR",
    "agent_warnings",
    "client_capabilities",
    "env_auth_method",
    "read_initialize_result",
    "recorded_capabilities",
    "recorded_json",
]

#: ACP auth method type whose credentials the adapter reads from its environment.
AUTH_TYPE_ENV_VAR = "env_var"


def read_initialize_result(result: Any) -> InitializeResponse:
    """An adapter's ``initialize`` result; one that is not an object advertises nothing.

    Its ``protocolVersion`` is not read: the edge speaks v1 to every adapter, and an
    adapter that left the field out still said what it can do.
    """
    if not isinstance(result, dict):
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)
    try:
        return InitializeResponse.from_json({**result, "protocolVersion": PROTOCOL_VERSION})
    except AcpDecodeError:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)


#: At most this many of the built-in agent's warnings are logged, each cut to this length.
MAX_WARNINGS = 8
MAX_WARNING_CHARS = 500


def agent_warnings(answer: InitializeResponse) -> list[str]:
    """What the built-in agent says is wrong with its configuration
    (``_meta.acpgate.warnings``: sentences), at most a few of bounded length."""
    ours = (answer.meta or {}).get(META_ACPGATE)
    found = ours.get(META_WARNINGS) if isinstance(ours, dict) else None
    if not isinstance(found, list):
        return []
    return [w[:MAX_WARNING_CHARS] for w in found if isinstance(w, str)][:MAX_WARNINGS]


def recorded_json(caps: AgentCapabilities) -> str:
    """The ``agentCapabilities`` as the session service records them (keys sorted, so an
    unchanged adapter records the same text)."""
    return orjson.dumps(caps.to_json(), option=orjson.OPT_SORT_KEYS).decode()


def recorded_capabilities(text: str) -> AgentCapabilities:
    """Recorded ``agentCapabilities`` text ("" or unreadable: nothing advertised)."""
    if not text:
        return AgentCapabilities()
    try:
        return AgentCapabilities.from_json(orjson.loads(text))
    except (orjson.JSONDecodeError, AcpDecodeError):
        return AgentCapabilities()


def client_capabilities(client: ClientCapabilities,
                        policy: SecurityPolicy) -> ClientCapabilities:
    """The ``clientCapabilities`` toward an adapter: what the edge and the client will honour."""
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True,
                                  write_text_file=policy.autonomy != "readonly"),
        terminal=client.terminal and may_run_shell(policy),
        elicitation=client.elicitation,
    )


def env_auth_method(auth_methods: Sequence[Any], env: Mapping[str, str],
                    pass_env: Sequence[str] = ()) -> str:
    """The first advertised ``env_var`` auth method whose variables are all set, or "".

    ``env`` is the agent's configured environment; a variable of the environment
    acpgate runs in counts too when the agent's ``pass_env`` names it (nothing
    else of acpgate's environment reaches an adapter).
    """
    for method in auth_methods:
        if not isinstance(method, dict) or method.get("type") != AUTH_TYPE_ENV_VAR \
                or not isinstance(method.get("id"), str):
            continue
        names = [v.get("name") for v in method.get("vars") or () if isinstance(v, dict)]
        if names and all(isinstance(n, str) and (
                env.get(n) or (passes(n, pass_env) and os.environ.get(n))) for n in names):
            return str(method["id"])
    return ""
