"""The method table is the one place a client's ACP methods are declared: every row is
routed, every handler is a row's, and what it says agrees with the schemas' names."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.common.acp import names
from services.common.acp.v2.names import PROTOCOL_V1, PROTOCOL_V2
from services.common.protocol import ACPGATE_METHOD_PREFIX
from services.edge.dialect.advertised import V2Place, own_capabilities, session_keys
from services.edge.dialect.method_table import (
    DIALECTS,
    METHODS,
    TO_AGENT,
    UNRELAYED,
    Method,
    Route,
)

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = (PROTOCOL_V1, PROTOCOL_V2)
#: Where a client's method handlers live.
HANDLER_MODULES = (
    *(f"services.edge.dialect.handlers.{p.stem}"
      for p in sorted((ROOT / "services/edge/dialect/handlers").glob("*.py"))
      if p.stem != "__init__"),
    "services.edge.dialect.v2.setup",
    "services.edge.dialect.v2.prompt",
    "services.edge.dialect.host_view",
    "services.edge.dialect.agents_list",
)
#: ``(conn, params)`` coroutines that are parts of a handler, not handlers.
PARTS = {"services.edge.dialect.handlers.initialize.initialize_v1": "v1's half of initialize"}


def _unwrapped(handler: Any) -> Any:
    return inspect.unwrap(handler)


def _handlers() -> Iterator[tuple[str, Any]]:
    """Every public ``async def name(conn, params)`` of the handler modules."""
    for module_name in HANDLER_MODULES:
        module = importlib.import_module(module_name)
        for name, fn in vars(module).items():
            if name.startswith("_") or not inspect.iscoroutinefunction(fn) \
                    or fn.__module__ != module_name:
                continue
            if list(inspect.signature(fn).parameters) == ["conn", "params"]:
                yield f"{module_name}.{name}", fn


def test_every_row_is_routed_in_each_version_it_names() -> None:
    """A served row has its handler under its wire name in each version that has it; a
    relayed one has none (the relay answers it); a v1 method v2 lacks is refused there."""
    for m in METHODS:
        for version in VERSIONS:
            name, handlers = m.name(version), DIALECTS[version].handlers
            if m.route is Route.RELAYED:
                assert name is None or name not in handlers, (m, version)
            elif name is not None:
                assert _unwrapped(handlers[name]) is _unwrapped(m.served_by(version)), \
                    (m, version)
        if m.v1 is not None and m.v2 is None:
            assert m.v1 in DIALECTS[PROTOCOL_V2].handlers, f"{m.v1}: v2 must refuse it"


def test_every_handled_method_is_a_row() -> None:
    """Nothing is routed that the table does not declare."""
    for version in VERSIONS:
        declared = {n for m in METHODS for n in (m.v1, m.v2) if n}
        assert set(DIALECTS[version].handlers) <= declared, version


def test_every_handler_serves_a_row() -> None:
    """A handler module's ``(conn, params)`` coroutine is some row's handler: a method is
    never handled without being declared."""
    used = {id(_unwrapped(h)) for m in METHODS for h in (m.handler, m.handler_v2) if h}
    unused = [name for name, fn in _handlers() if id(fn) not in used and name not in PARTS]
    assert not unused, f"handlers no row of the method table names: {unused}"


def test_names_are_the_schemas_or_acpgates_own() -> None:
    """A row's v1 name is a v1 schema method (or acpgate's own), its v2 name a v2 one or
    one of v1's unstable methods (which acpgate serves or relays in v2 as in v1)."""
    own = {"session/stop", "session/event", "session/attach", "session/detach"}
    v1 = names.AGENT_METHODS_V1 | names.PROTOCOL_METHODS_V1 | names.CLIENT_METHODS_V1
    v2 = names.AGENT_METHODS_V2 | names.PROTOCOL_METHODS_V2 | names.CLIENT_METHODS_V2 \
        | names.UNSTABLE_METHODS_V1
    for m in METHODS:
        for name, schema in ((m.v1, v1), (m.v2, v2)):
            if name is not None and name not in own \
                    and not name.startswith(ACPGATE_METHOD_PREFIX):
                assert name in schema, name


def test_the_relay_reads_its_rows() -> None:
    """Relayed rows are what a session-less call may pass to the connection's agent;
    acpgate's session-creating rows are never relayed."""
    assert TO_AGENT == {"logout", "providers/list", "providers/set", "providers/disable"}
    assert UNRELAYED == {"session/fork", "session/attach", "session/detach"}


def test_capabilities_read_from_the_table() -> None:
    """What initialize promises follows the rows, the store and the client's kind."""
    v1 = DIALECTS[PROTOCOL_V1].capabilities
    assert own_capabilities(v1, persistent=True, remote=True) == {
        "loadSession", "sessionCapabilities.list", "sessionCapabilities.delete",
        "sessionCapabilities.resume", "sessionCapabilities.close",
        "sessionCapabilities.additionalDirectories", "sessionCapabilities.fork",
        "sessionCapabilities.attach"}
    assert own_capabilities(v1, persistent=False, remote=True) == {"sessionCapabilities.attach"}
    assert own_capabilities(v1, persistent=True, remote=False) == \
        own_capabilities(v1, persistent=True, remote=True) - {"sessionCapabilities.attach"}
    v2 = DIALECTS[PROTOCOL_V2].capabilities
    assert "loadSession" not in {c.key for c in v2}  # v2 replays with session/resume
    assert session_keys(v2, V2Place.MARKER) == {"delete", "additionalDirectories"}
    assert session_keys(v2, V2Place.META) == {"fork", "attach"}


def test_a_row_is_served_or_relayed() -> None:
    """A row cannot both relay and name a handler."""
    async def handler(conn: Any, params: dict[str, Any]) -> None:
        return None
    for bad in (lambda: Method("x/y", "x/y", handler, route=Route.RELAYED),
                lambda: Method("x/y", "x/y")):
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("a contradictory row was accepted")
