"""What an adapter can do, and what the edge tells it the client side can do.

Both directions are the typed ACP models (:mod:`services.common.acp.schema`):

- :func:`read_initialize_result` reads an adapter's ``initialize`` result — its
  ``agentCapabilities`` and ``authMethods`` — and :func:`recorded_capabilities`
  the copy the session service recorded for the alias; what is recorded
  (:func:`recorded_json`) is the adapter's *profile*, its ``initialize`` result
  as it sent it less ``protocolVersion`` and ``agentInfo`` —
  ``{"agentCapabilities", "authMethods", "_meta"}``, raw, so capabilities no
  schema of acpgate's knows yet are kept (:func:`recorded_profile`;
  records of earlier versions hold the ``agentCapabilities`` object alone; a v2
  agent's profile is the v1 reading of its answer, with ``protocolVersion: 2`` and its
  own answer under ``v2``) — so
  the edge's own ``initialize`` can advertise what the connection's default
  agent advertised before any session runs, and an edge that re-adopts a session's
  adapter knows which version it speaks (:func:`recorded_version`);
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
from services.common.acp.v2.agent_init import V2_KEY
from services.common.acp.v2.names import PROTOCOL_V2
from services.common.acp.wire import AcpDecodeError
from services.common.env_names import passes
from services.common.path_policy import may_run_shell
from services.common.policy import SecurityPolicy
from services.common.protocol import META_ACPGATE, META_WARNINGS, PROTOCOL_VERSION

__all__ = [
    "AUTH_TYPE_ENV_VAR",
    "PROFILE_KEYS",
    "agent_warnings",
    "client_capabilities",
    "env_auth_method",
    "profile_of",
    "read_initialize_result",
    "recorded_capabilities",
    "recorded_json",
    "recorded_profile",
    "recorded_version",
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


#: The parts of an adapter's ``initialize`` result its profile keeps.
PROFILE_KEYS = ("agentCapabilities", "authMethods", "_meta")


def profile_of(result: Any) -> dict[str, Any]:
    """An adapter's profile: its ``initialize`` result's :data:`PROFILE_KEYS`, raw."""
    if not isinstance(result, dict):
        return {"agentCapabilities": {}}
    caps = result.get("agentCapabilities")
    out: dict[str, Any] = {"agentCapabilities": caps if isinstance(caps, dict) else {}}
    if isinstance(result.get("authMethods"), list):
        out["authMethods"] = result["authMethods"]
    if isinstance(result.get("_meta"), dict):
        out["_meta"] = result["_meta"]
    if isinstance(result.get(V2_KEY), dict):  # a v2 agent's: its own answer beside
        out["protocolVersion"] = PROTOCOL_V2
        out[V2_KEY] = result[V2_KEY]
    return out


def recorded_json(profile: dict[str, Any]) -> str:
    """The profile as the session service records it (keys sorted, so an unchanged adapter
    records the same text)."""
    return orjson.dumps(profile, option=orjson.OPT_SORT_KEYS).decode()


def recorded_profile(text: str) -> dict[str, Any] | None:
    """The recorded profile (None: nothing recorded, or unreadable); a record of an earlier
    version (the ``agentCapabilities`` object alone) reads as a profile without auth
    methods."""
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    if "agentCapabilities" in value:
        return value
    return {"agentCapabilities": value}


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


def recorded_capabilities(text: str) -> AgentCapabilities:
    """The ``agentCapabilities`` of a recorded profile ("" or unreadable: nothing
    advertised)."""
    profile = recorded_profile(text)
    if profile is None:
        return AgentCapabilities()
    try:
        return AgentCapabilities.from_json(profile.get("agentCapabilities") or {})
    except AcpDecodeError:
        return AgentCapabilities()


def recorded_version(text: str) -> int:
    """The ACP version a recorded profile's adapter answered ``initialize`` with (2 for a
    v2 agent's profile; 1 otherwise, nothing recorded included)."""
    profile = recorded_profile(text)
    return PROTOCOL_V2 if profile and profile.get("protocolVersion") == PROTOCOL_V2 \
        else PROTOCOL_VERSION


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
