"""Generate ``services/common/acp/schema.py`` from the official ACP v1 JSON schema.

Run ``make acp-schema`` after changing :data:`MODELS`, the vendored schema
(``protos/acp/acp-schema-v1.json``, a copy of ``shared/spec/acp-schema-v1.json``)
or the unstable additions (``protos/acp/unstable.json``). The output is
committed; ``tests/common/test_acp_schema.py`` fails when it is stale.

Only the definitions acpgate builds or reads are generated (:data:`MODELS`): an
object definition becomes a frozen, keyword-only dataclass with ``to_json`` and
``from_json``; a union tagged by a ``discriminator`` becomes a base class with
one subclass per tag. A reference to a definition outside :data:`MODELS` stays
raw JSON (the open-ended parts of the protocol: content blocks, MCP servers,
auth methods). Primitive aliases (``SessionId``...) become their Python type.
The reading rules are the schema's: see :mod:`services.common.acp.wire`.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "protos" / "acp" / "acp-schema-v1.json"
UNSTABLE = REPO / "protos" / "acp" / "unstable.json"
OUTPUT = REPO / "services" / "common" / "acp" / "schema.py"

#: The definitions acpgate builds or reads at its boundary, in output order.
MODELS: tuple[str, ...] = (
    # initialize
    "Implementation",
    "FileSystemCapabilities",
    "AuthCapabilities",
    "ElicitationFormCapabilities",
    "ElicitationUrlCapabilities",
    "ElicitationCapabilities",
    "BooleanConfigOptionCapabilities",
    "SessionConfigOptionsCapabilities",
    "ClientSessionCapabilities",
    "ClientCapabilities",
    "PromptCapabilities",
    "McpCapabilities",
    "SessionListCapabilities",
    "SessionDeleteCapabilities",
    "SessionAdditionalDirectoriesCapabilities",
    "SessionResumeCapabilities",
    "SessionCloseCapabilities",
    "SessionForkCapabilities",
    "SessionCapabilities",
    "LogoutCapabilities",
    "AgentAuthCapabilities",
    "AgentCapabilities",
    "InitializeRequest",
    "InitializeResponse",
    # sessions: modes and config options
    "SessionMode",
    "SessionModeState",
    "SessionConfigSelectOption",
    "SessionConfigSelectGroup",
    "SessionConfigOption",
    "NewSessionResponse",
    "LoadSessionResponse",
    "ResumeSessionResponse",
    "SetSessionModeRequest",
    "SetSessionConfigOptionRequest",
    "SetSessionConfigOptionResponse",
    # session/list, session/delete
    "ListSessionsRequest",
    "SessionInfo",
    "ListSessionsResponse",
    "DeleteSessionRequest",
    # prompt turn
    "Usage",
    "PromptResponse",
    "Cost",
    "UsageUpdate",
    "SessionInfoUpdate",
    "CurrentModeUpdate",
    "ConfigOptionUpdate",
    # permission
    "SelectedPermissionOutcome",
    "RequestPermissionOutcome",
    "RequestPermissionResponse",
    # protocol level
    "CancelRequestNotification",
)

#: Defaulted fields generated as optional (None, left out when written) instead: acpgate
#: offers no authentication, and SPEC §2's exact initialize result has no ``auth``.
OPTIONAL_DEFAULTS = {"AgentCapabilities.auth", "ClientCapabilities.auth"}

#: Field names that would shadow a name the class body uses.
_RESERVED = {"list", "dict", "field", "Any", "ClassVar", "TAG"}


def load_schema() -> dict[str, Any]:
    """The official schema's ``$defs`` with the unstable additions merged in."""
    defs: dict[str, Any] = json.loads(SCHEMA.read_text())["$defs"]
    extra = json.loads(UNSTABLE.read_text())
    for name, body in extra["$defs"].items():
        defs[name] = body
    for name, props in extra["properties"].items():
        defs[name] = {**defs[name], "properties": {**defs[name]["properties"], **props}}
    return defs


def snake(name: str) -> str:
    """A wire name as a Python field name (``loadSession`` → ``load_session``)."""
    if name == "_meta":
        return "meta"
    out = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    if keyword.iskeyword(out) or out in _RESERVED:
        out += "_"
    return out


def pascal(value: str) -> str:
    """A tag value as a class name suffix (``value_id`` → ``ValueId``)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_\-\s]", value) if part)


def q(value: Any) -> str:
    """A Python literal for a JSON scalar, strings in double quotes (ruff's style)."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def wrap(text: str, indent: str) -> list[str]:
    """``text`` as lines of at most 99 characters after ``indent``."""
    return textwrap.wrap(text, 99 - len(indent)) or [""]


def first_paragraph(text: str | None) -> str:
    """The first paragraph of a description, on one line."""
    if not text:
        return ""
    return " ".join(text.strip().split("\n\n")[0].split())


def ref_name(schema: dict[str, Any]) -> str | None:
    """The definition a schema refers to (``$ref`` or a single-element ``allOf``)."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


@dataclass
class PyType:
    """How one JSON value is typed, read and written in the generated code."""

    ann: str
    dec: str
    #: True when writing needs ``to_wire`` (models, lists of models).
    wire: bool = False
    nullable: bool = False
    #: Default factory when the field is an object/array with a schema default.
    factory: str = ""


class Generator:
    """Turns :data:`MODELS` of one schema into Python source."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.models = set(MODELS)
        self.lines: list[str] = []

    # ------------------------------------------------------------------ types

    def resolve(self, schema: dict[str, Any], *, skip_invalid: bool = False) -> PyType:
        """The Python type of a property or item schema."""
        name = ref_name(schema)
        if name is not None:
            return self.resolve_ref(name)
        if "anyOf" in schema or "oneOf" in schema:
            members: list[dict[str, Any]] = schema.get("anyOf") or schema.get("oneOf") or []
            real = [m for m in members if m != {"type": "null"}]
            nullable = len(real) != len(members)
            if all("const" in m or m.get("type") == "string" for m in real) and all(
                m.get("type") == "string" for m in real
            ):
                return PyType("str", "as_str", nullable=nullable)
            if len(real) == 1:
                inner = self.resolve(real[0], skip_invalid=skip_invalid)
                return PyType(inner.ann, inner.dec, inner.wire, nullable or inner.nullable)
            parts = [self.resolve(m, skip_invalid=skip_invalid) for m in real]
            return PyType(
                " | ".join(p.ann for p in parts),
                f"any_of({', '.join(p.dec for p in parts)})",
                any(p.wire for p in parts),
                nullable,
            )
        if "const" in schema:
            return PyType("str", "as_str")
        kinds = schema.get("type")
        if isinstance(kinds, list):
            real_kinds = [k for k in kinds if k != "null"]
            nullable = len(real_kinds) != len(kinds)
            kind = real_kinds[0] if len(real_kinds) == 1 else None
        else:
            nullable, kind = False, kinds
        if kind == "string":
            return PyType("str", "as_str", nullable=nullable)
        if kind == "boolean":
            return PyType("bool", "as_bool", nullable=nullable)
        if kind == "integer":
            return PyType("int", "as_int", nullable=nullable)
        if kind == "number":
            return PyType("float", "as_float", nullable=nullable)
        if kind == "object":
            return PyType("dict[str, Any]", "as_object", nullable=nullable, factory="dict")
        if kind == "array":
            item = self.resolve(schema.get("items", {}))
            skip = ", skip_invalid=True" if skip_invalid else ""
            return PyType(f"list[{item.ann}]", f"list_of({item.dec}{skip})", item.wire, nullable,
                          factory="list")
        return PyType("Any", "as_any", nullable=True)

    def resolve_ref(self, name: str) -> PyType:
        """A referenced definition: a generated model, raw JSON, or a primitive."""
        if name in self.models:
            return PyType(name, f"{name}.from_json", wire=True, factory=name)
        target = self.defs[name]
        if target.get("type") == "object" or "properties" in target or "discriminator" in target:
            return PyType("dict[str, Any]", "as_object", factory="dict")
        return self.resolve(target)

    # ------------------------------------------------------------------ properties

    def object_props(self, schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Properties and required names of an object schema, ``allOf`` refs included."""
        props: dict[str, Any] = dict(schema.get("properties", {}))
        required = list(schema.get("required", []))
        for part in schema.get("allOf", []):
            name = ref_name(part)
            if name is not None:
                sub_props, sub_required = self.object_props(self.defs[name])
                props.update(sub_props)
                required += [r for r in sub_required if r not in required]
        return props, required

    def merged_variants(self, schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """An untagged object-level ``anyOf``: every variant's fields, optional unless all
        variants require them; a field typed differently by variants is their union."""
        props, required = self.object_props(schema)
        variants = [self.object_props(v) for v in schema["anyOf"]]
        names: list[str] = []
        for v_props, _ in variants:
            names += [n for n in v_props if n not in names and n not in props]
        for n in names:
            shapes = [v_props[n] for v_props, _ in variants if n in v_props]
            unique = []
            for shape in shapes:
                if shape not in unique:
                    unique.append(shape)
            props[n] = unique[0] if len(unique) == 1 else {"anyOf": unique}
            if all(n in v_req for _, v_req in variants):
                required.append(n)
        return props, required

    def default_json(self, name: str) -> dict[str, Any]:
        """What a model built with no arguments writes (to check schema defaults)."""
        props, _ = self.object_props(self.defs[name])
        out: dict[str, Any] = {}
        for key, prop in props.items():
            if "default" in prop:
                sub = ref_name(prop)
                out[key] = self.default_json(sub) if sub in self.models and sub else prop["default"]
        return out

    # ------------------------------------------------------------------ emit

    def emit(self, line: str = "") -> None:
        """Append one output line."""
        self.lines.append(line)

    def emit_doc(self, text: str, indent: str) -> None:
        """A docstring: paragraphs wrapped to the line length."""
        paragraphs = text.split("\n\n")
        lines: list[str] = []
        for n, para in enumerate(paragraphs):
            if n:
                lines.append("")
            lines += wrap(para, indent)
        if len(lines) == 1 and len(indent) + len(lines[0]) + 6 <= 99:
            self.emit(f'{indent}"""{lines[0]}"""')
            return
        self.emit(f'{indent}"""{lines[0]}')
        for line in lines[1:]:
            self.emit(f"{indent}{line}" if line else "")
        self.emit(f'{indent}"""')

    def field_specs(self, cls: str, props: dict[str, Any],
                    required: list[str]) -> list[tuple[str, str, PyType, str, bool, bool]]:
        """(wire, field, type, default expression, required, lenient) per property."""
        specs = []
        # _meta last: it is the extension slot, read after the fields it extends.
        ordered = sorted(props.items(), key=lambda kv: kv[0] == "_meta")
        for wire, prop in ordered:
            pytype = self.resolve(prop, skip_invalid=bool(prop.get("x-deserialize-skip-invalid-items")))
            lenient = bool(prop.get("x-deserialize-default-on-error"))
            default = ""
            if wire not in required:
                if ("default" in prop and prop["default"] is not None
                        and f"{cls}.{wire}" not in OPTIONAL_DEFAULTS):
                    value = prop["default"]
                    if isinstance(value, dict | list):
                        sub = ref_name(prop)
                        if sub in self.models and value != self.default_json(str(sub)):
                            raise SystemExit(f"{cls}.{wire}: schema default {value} differs "
                                             f"from {sub}()")
                        if value not in ({}, []) and sub not in self.models:
                            raise SystemExit(f"{cls}.{wire}: cannot express default {value}")
                        default = f"field(default_factory={pytype.factory})"
                    else:
                        default = q(value)
                else:
                    pytype = PyType(pytype.ann, pytype.dec, pytype.wire, True, pytype.factory)
                    default = "None"
            specs.append((wire, snake(wire), pytype, default, wire in required, lenient))
        return specs

    def emit_class(self, cls: str, doc: str, props: dict[str, Any], required: list[str],
                   *, base: str = "", tag: tuple[str, str] | None = None) -> None:
        """One frozen keyword-only dataclass with ``to_json``/``from_json``."""
        specs = self.field_specs(cls, props, required)
        self.emit()
        self.emit()
        self.emit("@dataclass(frozen=True, kw_only=True)")
        self.emit(f"class {cls}({base}):" if base else f"class {cls}:")
        self.emit_doc(doc or cls, "    ")
        self.emit()
        if tag is not None:
            self.emit(f"    #: The ``{tag[0]}`` tag of this variant.")
            self.emit(f"    TAG: ClassVar[str] = {q(tag[1])}")
        for wire, name, pytype, default, _req, _len in specs:
            comment = ("Extension metadata (ACP ``_meta``)." if wire == "_meta"
                       else first_paragraph(props[wire].get("description")))
            for text in wrap(comment, "    #: ") if comment else []:
                self.emit("    #: " + text)
            ann = f"{pytype.ann} | None" if pytype.nullable else pytype.ann
            self.emit(f"    {name}: {ann}" + (f" = {default}" if default else ""))
        if not specs and tag is None:
            self.emit("    pass")
        # to_json
        self.emit()
        self.emit("    def to_json(self) -> dict[str, Any]:")
        self.emit('        """This object as ACP JSON (absent optional fields are left out)."""')
        self.emit("        out: dict[str, Any] = {}")
        if tag is not None:
            self.emit(f"        out[{q(tag[0])}] = self.TAG")
        for wire, name, pytype, _default, _req, _len in specs:
            value = f"to_wire(self.{name})" if pytype.wire else f"self.{name}"
            if pytype.nullable:
                self.emit(f"        if self.{name} is not None:")
                self.emit(f"            out[{q(wire)}] = {value}")
            else:
                self.emit(f"        out[{q(wire)}] = {value}")
        self.emit("        return out")
        # from_json
        self.emit()
        self.emit("    @classmethod")
        self.emit(f"    def from_json(cls, data: Any) -> {cls}:")
        self.emit('        """Read ACP JSON; AcpDecodeError names what is wrong."""')
        if tag is not None:
            self.emit(f"        required(data, {q(tag[0])}, as_const(cls.TAG), {q(cls)})")
        if not specs:
            self.emit(f"        required_object(data, {q(cls)})")
            self.emit("        return cls()")
            return
        self.emit("        return cls(")
        for wire, name, pytype, default, req, lenient in specs:
            if req:
                dec = f"nullable({pytype.dec})" if pytype.nullable else pytype.dec
                self.emit(f"            {name}=required(data, {q(wire)}, {dec}, {q(cls)}),")
                continue
            if default.startswith("field(default_factory="):
                factory = default[len("field(default_factory="):-1]
            else:
                factory = f"lambda: {default}"
            tail = ", lenient=True" if lenient else ""
            self.emit(f"            {name}=optional(data, {q(wire)}, {pytype.dec}, {factory}, "
                      f"{q(cls)}{tail}),")
        self.emit("        )")

    def emit_union(self, name: str, schema: dict[str, Any]) -> None:
        """A tagged union: an abstract base with ``from_json``, one dataclass per tag."""
        disc = schema["discriminator"]["propertyName"]
        base_props, base_required = self.object_props(
            {k: v for k, v in schema.items() if k != "oneOf"})
        variants: list[tuple[str, str]] = []
        self.emit()
        self.emit()
        self.emit(f"class {name}:")
        self.emit_doc(f"{first_paragraph(schema.get('description')) or name}\n\n"
                      f"One subclass per ``{disc}`` value; :meth:`from_json` picks it.", "    ")
        self.emit()
        self.emit("    TAG: ClassVar[str]")
        self.emit()
        self.emit("    def to_json(self) -> dict[str, Any]:")
        self.emit('        """This object as ACP JSON."""')
        self.emit("        raise NotImplementedError")
        self.emit()
        self.emit("    @staticmethod")
        self.emit(f"    def from_json(data: Any) -> {name}:")
        self.emit(f'        """The variant ``data[{q(disc)}]`` names; AcpDecodeError if none."""')
        self.emit(f"        tag = data.get({q(disc)}) if isinstance(data, dict) else None")
        for variant in schema["oneOf"]:
            value = variant["properties"][disc]["const"]
            cls = f"{name}{pascal(value)}"
            variants.append((value, cls))
            self.emit(f"        if tag == {q(value)}:")
            self.emit(f"            return {cls}.from_json(data)")
        self.emit(f'        raise AcpDecodeError(f"{name}: unknown {disc} {{tag!r}}")')
        for variant in schema["oneOf"]:
            value = variant["properties"][disc]["const"]
            v_props, v_required = self.object_props(
                {**variant, "properties": {k: v for k, v in variant["properties"].items()
                                           if k != disc}})
            props = {**base_props, **v_props}
            required = [*base_required, *[r for r in v_required if r != disc]]
            doc = first_paragraph(variant.get("description")) or f"{name} with {disc} {value!r}."
            self.emit_class(f"{name}{pascal(value)}", doc, props, required, base=name,
                            tag=(disc, value))

    def emit_model(self, name: str) -> None:
        """One definition of :data:`MODELS`."""
        schema = self.defs[name]
        if "discriminator" in schema:
            self.emit_union(name, schema)
            return
        if "anyOf" in schema and "properties" in schema:
            props, required = self.merged_variants(schema)
        else:
            props, required = self.object_props(schema)
        self.emit_class(name, first_paragraph(schema.get("description")), props, required)

    def generate(self) -> str:
        """The whole module."""
        self.emit('"""ACP v1 models acpgate builds or reads, generated from the official schema.')
        self.emit()
        self.emit("DO NOT EDIT: generated by tools/gen_acp_schema.py from")
        self.emit("protos/acp/acp-schema-v1.json and protos/acp/unstable.json (`make acp-schema`).")
        self.emit("Reading rules: services/common/acp/wire.py.")
        self.emit('"""')
        self.emit()
        self.emit("from __future__ import annotations")
        self.emit()
        self.emit("from dataclasses import dataclass, field")
        self.emit("from typing import Any, ClassVar")
        self.emit()
        self.emit("from services.common.acp.wire import (")
        for helper in ("AcpDecodeError", "any_of", "as_any", "as_bool", "as_const", "as_float",
                       "as_int", "as_object", "as_str", "list_of", "nullable", "optional",
                       "required", "required_object", "to_wire"):
            self.emit(f"    {helper},")
        self.emit(")")
        self.emit()
        self.emit("__all__ = [")
        names = []
        for name in MODELS:
            names.append(name)
            schema = self.defs[name]
            if "discriminator" in schema:
                disc = schema["discriminator"]["propertyName"]
                names += [f"{name}{pascal(v['properties'][disc]['const'])}" for v in schema["oneOf"]]
        for name in sorted(names):
            self.emit(f"    {name!r},".replace("'", '"'))
        self.emit("]")
        for name in MODELS:
            self.emit_model(name)
        text = "\n".join(self.lines) + "\n"
        return _mark_unused(text)


def _mark_unused(text: str) -> str:
    """Drop helper imports the generated classes do not use (ruff F401)."""
    body = text.split("__all__", 1)[1]
    lines = text.split("\n")
    out = []
    for line in lines:
        stripped = line.strip().rstrip(",")
        if line.startswith("    ") and stripped.isidentifier() and stripped in {
            "AcpDecodeError", "any_of", "as_any", "as_bool", "as_const", "as_float", "as_int",
            "as_object", "as_str", "list_of", "nullable", "optional", "required",
            "required_object", "to_wire",
        } and not re.search(rf"\b{stripped}\b", body):
            continue
        out.append(line)
    return "\n".join(out)


def render() -> str:
    """The generated module's text."""
    return Generator(load_schema()).generate()


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the generated module."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the output is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"generated ACP models are stale: {OUTPUT.relative_to(REPO)} "
                  "(run 'make acp-schema')", file=sys.stderr)
            return 1
        print("generated ACP models are up to date")
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
