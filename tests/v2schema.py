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
