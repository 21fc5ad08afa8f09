"""Golden ACP wire fixtures and the official ACP v1 JSON schema, for the edge and agent tests.

``tests/fixtures/acp/<method>.<request|result>.<who>.json`` is one exact JSON-RPC
frame. A frame one side sends is the frame the other side's tests feed in, so
the edge and the built-in agent are held to the same bytes. ``${NAME}``
placeholders (the version, an alias) are filled in by :func:`frame`.

:func:`validate` checks a value against one definition of the official schema
(``protos/acp/acp-schema-v1.json``, the vendored copy of
``shared/spec/acp-schema-v1.json``) with ``jsonschema`` (draft 2020-12).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "acp"
SCHEMA = REPO / "protos" / "acp" / "acp-schema-v1.json"

#: The schema definition of each fixture's ``params`` or ``result``, by its
#: ``<method>.<request|result>`` prefix.
DEFINITION_OF = {
    "initialize.request": "InitializeRequest",
    "initialize.result": "InitializeResponse",
    "prompt.result": "PromptResponse",
    "request_permission.result": "RequestPermissionResponse",
}


def frame(name: str, **subst: str) -> dict[str, Any]:
    """The fixture ``name`` (without ``.json``), ``${KEY}`` replaced by ``subst[KEY]``."""
    text = (FIXTURES / f"{name}.json").read_text()
    for key, value in subst.items():
        text = text.replace("${" + key + "}", value)
    if "${" in text:
        raise KeyError(f"fixture {name} has an unfilled placeholder")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def payload(name: str, **subst: str) -> dict[str, Any]:
    """The ``params`` or ``result`` of fixture ``name``."""
    message = frame(name, **subst)
    body: dict[str, Any] = message["params"] if "method" in message else message["result"]
    return body


def fixture_names() -> list[str]:
    """Every fixture, without ``.json``."""
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


def definition_of(name: str) -> str:
    """The schema definition a fixture's payload must satisfy."""
    prefix = ".".join(name.split(".")[:2])
    return DEFINITION_OF[prefix]


@functools.cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


@functools.cache
def validator(definition: str) -> jsonschema.Draft202012Validator:
    """A compiled validator of one ``$defs`` entry of the official schema."""
    root = _schema()
    schema = {"$schema": root["$schema"], "$defs": root["$defs"],
              "$ref": f"#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema)


def validate(definition: str, value: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``value`` is a valid ``definition``."""
    validator(definition).validate(value)


def validate_message(message: dict[str, Any]) -> None:
    """A whole JSON-RPC message against the schema's top level (any side, any method)."""
    jsonschema.Draft202012Validator(_schema()).validate(message)
