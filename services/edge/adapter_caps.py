"""What an adapter can do, and what the edge tells it the client side can do (issue 17).

:class:`AdapterCaps` reads the ``agentCapabilities`` and ``authMethods`` of an
adapter's ``initialize`` result (or the copy the session service recorded for
its alias). :func:`client_capabilities` is the other direction: the
``clientCapabilities`` the edge sends the adapter, promising exactly what will
be honoured under the session's policy — ``fs`` is served by the edge when the
client does not serve it (so reads are always on, writes unless the policy is
``readonly``); ``terminal`` only when the client runs terminals itself and the
policy allows commands (acpgate never runs an adapter's terminal itself: only
the lifecycle service starts processes, and it starts adapters, not shells).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.common.path_policy import may_run_shell
from services.common.policy import SecurityPolicy

#: ACP auth method type whose credentials the adapter reads from its environment.
AUTH_TYPE_ENV_VAR = "env_var"


def _flag(obj: Any, key: str) -> bool:
    return isinstance(obj, dict) and obj.get(key) is True


@dataclass(frozen=True)
class AdapterCaps:
    """The capabilities an adapter advertised in ``initialize``."""

    load_session: bool = False
    resume: bool = False
    image: bool = False
    audio: bool = False
    embedded_context: bool = False
    #: The advertised ``authMethods`` entries, as sent.
    auth_methods: tuple[dict[str, Any], ...] = ()
    #: The ``agentCapabilities`` object as sent (recorded per alias by the session service).
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_agent_capabilities(cls, caps: Any,
                                auth_methods: Any = None) -> AdapterCaps:
        """Read an ``agentCapabilities`` object (anything else reads as no capabilities)."""
        methods = tuple(m for m in auth_methods or () if isinstance(m, dict)) \
            if isinstance(auth_methods, list) else ()
        if not isinstance(caps, dict):
            return cls(auth_methods=methods)
        prompt = caps.get("promptCapabilities")
        session_caps = caps.get("sessionCapabilities")
        return cls(
            load_session=caps.get("loadSession") is True,
            resume=isinstance(session_caps, dict) and isinstance(session_caps.get("resume"), dict),
            image=_flag(prompt, "image"),
            audio=_flag(prompt, "audio"),
            embedded_context=_flag(prompt, "embeddedContext"),
            auth_methods=methods,
            raw=caps,
        )

    @classmethod
    def from_initialize(cls, result: Any) -> AdapterCaps:
        """Read an ``initialize`` result."""
        if not isinstance(result, dict):
            return cls()
        return cls.from_agent_capabilities(result.get("agentCapabilities"),
                                           result.get("authMethods"))

    def env_auth_method(self, env: Mapping[str, str]) -> str:
        """The first advertised ``env_var`` auth method whose variables are all set, or "".

        ``env`` is the agent's configured environment; the variables of the
        environment acpgate runs in count too (the lifecycle service passes
        its own environment on to adapters).
        """
        for method in self.auth_methods:
            if method.get("type") != AUTH_TYPE_ENV_VAR or not isinstance(method.get("id"), str):
                continue
            names = [v.get("name") for v in method.get("vars") or () if isinstance(v, dict)]
            if names and all(isinstance(n, str) and (env.get(n) or os.environ.get(n))
                             for n in names):
                return str(method["id"])
        return ""


def client_capabilities(client_caps: Mapping[str, Any],
                        policy: SecurityPolicy) -> dict[str, Any]:
    """The ``clientCapabilities`` toward an adapter: what the edge and the client will honour."""
    caps: dict[str, Any] = {
        "fs": {"readTextFile": True, "writeTextFile": policy.autonomy != "readonly"},
        "terminal": client_caps.get("terminal") is True and may_run_shell(policy),
    }
    elicitation = client_caps.get("elicitation")
    if isinstance(elicitation, dict):
        caps["elicitation"] = elicitation
    return caps


def client_serves(client_caps: Mapping[str, Any], method_flag: str) -> bool:
    """True when the client advertised ``fs.<method_flag>`` (``readTextFile``/``writeTextFile``)."""
    return _flag(client_caps.get("fs"), method_flag)
