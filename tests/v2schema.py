"""The ACP v2 schema (``protos/acp/v2/schema.json``, vendored from ``@agentclientprotocol/sdk``
2.4.0) as a check of what acpgate sends a v2 client.

:func:`check_sent` validates one message acpgate sent on a v2 connection: a notification
or request by its method's params definition, a response by the definition of the
method it answers, an error by ``Error``, a batch answer element by element.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

REPO = Path(__file__).resolve().parents[1]
SCHEMA_V2 = REPO / "protos" / "acp" / "v2" / "schema.json"

#: The result definition of each v2 method a client may call.
RESULT_DEFINITIONS = {
    "initialize": "InitializeResponse",
    "auth/login": "LoginAuthResponse",
    "auth/logout": "LogoutAuthResponse",
    "session/new": "NewSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/delete": "DeleteSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/close": "CloseSessionResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
    "session/prompt": "PromptResponse",
    "tool_call/cancel": "CancelToolCallResponse",
    "terminal/cancel": "CancelTerminalResponse",
}
#: The params definition of each method acpgate sends a v2 client.
OUTBOUND_DEFINITIONS = {
    "session/update": "UpdateSessionNotification",
    "session/request_permission": "RequestPermissionRequest",
    "elicitation/create": "CreateElicitationRequest",
    "$/cancel_request": "CancelRequestNotification",
}


@functools.cache
def _defs() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads(SCHEMA_V2.read_text())["$defs"]
    return defs


@functools.cache
def _validator(definition: str) -> jsonschema.protocols.Validator:
    schema = {"$defs": _defs(), "$ref": f"#/$defs/{definition}"}
    cls = jsonschema.validators.validator_for({"$schema":
                                               "https://json-schema.org/draft/2020-12/schema"})
    return cls(schema)  # type: ignore[no-any-return]


def validate_v2(definition: str, value: Any) -> None:
    """Raise :class:`jsonschema.ValidationError` unless ``value`` is a v2 ``definition``."""
    _validator(definition).validate(value)


def check_sent(message: Any, method: str | None = None) -> None:
    """Validate a message acpgate sent a v2 client (module doc); ``method``: the method a
    response answers (unknown: only its error, if any, is checked)."""
    if isinstance(message, list):
        for item in message:
            check_sent(item)
        return
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    sent = message.get("method")
    if isinstance(sent, str):
        definition = OUTBOUND_DEFINITIONS.get(sent)
        if definition is not None:
            validate_v2(definition, message.get("params"))
        else:  # acpgate's own notifications: extension methods only
            assert sent.startswith("_"), f"v2 client sent a non-v2 method: {sent}"
        return
    if "error" in message:
        validate_v2("Error", message["error"])
        return
    definition = RESULT_DEFINITIONS.get(method or "")
    if definition is not None:
        validate_v2(definition, message.get("result"))


@functools.cache
def _agent_side() -> tuple[dict[str, str], dict[str, str]]:
    """The params definition of each method a client sends a v2 agent, and the result
    definition of each request an agent sends a client (from the schema's ``x-method``)."""
    params: dict[str, str] = {}
    results: dict[str, str] = {}
    for name, definition in _defs().items():
        method, side = definition.get("x-method"), definition.get("x-side")
        if not isinstance(method, str):
            continue
        if side == "agent" and name.endswith(("Request", "Notification")):
            params[method] = name
        elif side == "client" and name.endswith("Response"):
            results[method] = name
    params["$/cancel_request"] = "CancelRequestNotification"
    return params, results


def check_to_agent(message: Any, answers: str | None = None) -> None:
    """Validate a message acpgate sent a v2 agent: a request or notification by its
    method's params definition (a method v2 does not have is refused), a response to the
    agent's request ``answers`` by that request's result definition."""
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    params, results = _agent_side()
    sent = message.get("method")
    if isinstance(sent, str):
        assert sent in params or sent.startswith("_"), f"v2 agent sent a non-v2 method: {sent}"
        if sent in params:
            validate_v2(params[sent], message.get("params"))
        return
    if "error" in message:
        validate_v2("Error", message["error"])
        return
    definition = results.get(answers or "")
    if definition is not None:
        validate_v2(definition, message.get("result"))
