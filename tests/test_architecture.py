"""The service split holds in the imports, and every module says the one job it does.

Every module under ``services/`` and ``acpgate/`` is parsed with :mod:`ast`;
every import counts — at the top, inside a function (lazy), under
``TYPE_CHECKING``, or through ``importlib.import_module``/``__import__`` with a
literal name. A failure names the module, the line and the rule it breaks.

The services meet only through the generated gRPC contracts (the
``acpgate_contracts`` package) and ``services.common``; composition (which
process runs which service) lives in ``acpgate/``, and nothing imports it but
the command line's own modules.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The packages whose modules are checked.
CHECKED = ("services", "acpgate", "acpgate_contracts")
#: Generated gRPC code: the contracts every service may import, never checked for size.
GENERATED = ("acpgate_contracts",)
#: Other generated modules (``make acp-schema``: the typed ACP models), never checked for size.
GENERATED_MODELS = ("services.common.acp.schema",)


@dataclass(frozen=True)
class Rule:
    """Modules within ``importer`` must not import anything within ``imported`` (but ``allowed``)."""

    importer: str
    imported: str
    why: str
    allowed: tuple[str, ...] = ()


#: The edge's parts, top to bottom (ARCHITECTURE): what a client connects to, what
#: the ACP dialect decides, the live sessions, the edge as the ACP client of one adapter, and
#: the ports sessions and adapters talk back to the client through. A part imports only parts
#: below it and the edge-wide modules.
EDGE_LAYERS = ("transport", "dialect", "sessions", "adapter", "ports")
#: Edge-wide modules, below every part: error answers, request params, who a connection acts
#: as, counters, the token store, the typed clients of the two services.
EDGE_WIDE = ("errors", "params", "caller", "metrics", "tokens", "backends")


def _edge_layer_rules() -> tuple[Rule, ...]:
    rules = []
    for i, upper in enumerate(EDGE_LAYERS):
        for lower in EDGE_LAYERS[i + 1:]:
            rules.append(Rule(f"services.edge.{lower}", f"services.edge.{upper}",
                              f"edge parts import downwards only ({' → '.join(EDGE_LAYERS)})"))
        for wide in EDGE_WIDE:
            rules.append(Rule(f"services.edge.{wide}", f"services.edge.{upper}",
                              "edge-wide modules sit below every edge part"))
    return tuple(rules)


#: The forbidden edges. "within p" means p itself or any submodule of it.
FORBIDDEN: tuple[Rule, ...] = (
    Rule("services.edge", "services.session", "the edge calls the session service over gRPC only"),
    Rule("services.edge", "services.lifecycle", "the edge calls the lifecycle service over gRPC only"),
    Rule("services.agent", "services.session", "the agent gets its policy from _meta, not the session service"),
    Rule("services.agent", "services.lifecycle", "the agent is a plain ACP process the lifecycle service runs"),
    Rule("services", "acpgate", "composition lives in acpgate/; services never import it"),
    Rule("acpgate_contracts", "acpgate", "the contracts are generated from protos/ and import only each other"),
    Rule("acpgate_contracts", "services", "the contracts are generated from protos/ and import only each other"),
    Rule("services.session", "services.lifecycle", "the two services meet only through their gRPC contracts"),
    Rule("services.lifecycle", "services.session", "the two services meet only through their gRPC contracts"),
    Rule("services.common", "services.edge", "common code is shared by every service and imports none"),
    Rule("services.common", "services.agent", "common code is shared by every service and imports none"),
    Rule("services.common", "services.session", "common code is shared by every service and imports none"),
    Rule("services.common", "services.lifecycle", "common code is shared by every service and imports none"),
    Rule("services.agent", "services.edge", "the agent is an ACP peer of the edge, never a part of it"),
    Rule("services.edge", "services.agent", "the edge speaks ACP to every agent alike, the built-in one too"),
    *_edge_layer_rules(),
)

#: A module past this many lines almost surely does more than one job: a smell to act on,
#: not a budget to fill. Modules are split by concept (one job each, named by it), never
#: cut to a count: the concept rules below are the check that matters.
MAX_LINES = 800
def within(module: str, package: str) -> bool:
    """True when ``module`` is ``package`` or one of its submodules."""
    return module == package or module.startswith(package + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    for top in CHECKED:
        yield from sorted((ROOT / top).rglob("*.py"))


KNOWN_MODULES = {module_name(path) for path in source_files()}


@dataclass(frozen=True)
class Import:
    """One imported module, where it is imported."""

    module: str
    line: int
    text: str


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute module a (possibly relative) ``from`` import names."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_in(source: str, importer: str, *, is_package: bool = False) -> Iterator[Import]:
    """Every module ``source`` (the module ``importer``) imports, wherever the import is."""
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno, lines[node.lineno - 1].strip())
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(importer, is_package, node.level, node.module)
            for alias in node.names:
                # `from p import m` imports the module p.m when there is one, else names from p.
                sub = f"{base}.{alias.name}"
                yield Import(sub if sub in KNOWN_MODULES else base, node.lineno,
                             lines[node.lineno - 1].strip())
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield Import(node.args[0].value, node.lineno, lines[node.lineno - 1].strip())


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def violations(where: str, importer: str, imports: Iterator[Import]) -> list[str]:
    """One line per import of ``importer`` across a forbidden edge: file, line, import, rule."""
    out = []
    for imp in imports:
        for rule in FORBIDDEN:
            if within(importer, rule.importer) and within(imp.module, rule.imported) \
                    and not any(within(imp.module, ok) for ok in rule.allowed):
                out.append(f"{where}:{imp.line}: `{imp.text}` imports {imp.module} — forbidden: "
                           f"{rule.importer} → {rule.imported} ({rule.why})")
    return out


def test_no_module_imports_across_a_forbidden_edge() -> None:
    found = []
    for path in source_files():
        importer = module_name(path)
        imports = imports_in(path.read_text(encoding="utf-8"), importer,
                             is_package=path.name == "__init__.py")
        found += violations(str(path.relative_to(ROOT)), importer, imports)
    assert not found, "imports across a forbidden edge:\n" + "\n".join(found)


PROBE = """\
import importlib
from acpgate_contracts.session.v1 import session_pb2
from services.common import jsonrpc


def later():
    from services.session import store
    importlib.import_module("services.lifecycle.reaper")


from ..agent import server
from acpgate import cli
"""


def test_the_check_sees_lazy_relative_and_dynamic_imports() -> None:
    """The checker itself, on a module that would live at services/edge/probe.py."""
    found = violations("services/edge/probe.py", "services.edge.probe",
                       imports_in(PROBE, "services.edge.probe"))
    assert found == [
        "services/edge/probe.py:11: `from ..agent import server` imports services.agent.server — "
        "forbidden: services.edge → services.agent (the edge speaks ACP to every agent alike, "
        "the built-in one too)",
        "services/edge/probe.py:12: `from acpgate import cli` imports acpgate.cli — forbidden: "
        "services → acpgate (composition lives in acpgate/; services never import it)",
        "services/edge/probe.py:7: `from services.session import store` imports "
        "services.session.store — forbidden: services.edge → services.session (the edge calls "
        "the session service over gRPC only)",
        "services/edge/probe.py:8: `importlib.import_module(\"services.lifecycle.reaper\")` imports "
        "services.lifecycle.reaper — forbidden: services.edge → services.lifecycle (the edge "
        "calls the lifecycle service over gRPC only)",
    ]


def hand_written(path: Path) -> bool:
    return not any(within(module_name(path), g) for g in (*GENERATED, *GENERATED_MODELS))


#: What only the edge's typed service clients import: gRPC and the generated contracts.
RPC_MODULES = ("grpc", "grpc_health", "acpgate_contracts")


def test_only_the_backends_see_grpc() -> None:
    """The edge reaches both services through ``services/edge/backends`` only: every other
    edge module works with domain types and :class:`ServiceError`, never a stub, a
    protobuf message or a gRPC status."""
    found = []
    for path in sorted((ROOT / "services" / "edge").rglob("*.py")):
        name = module_name(path)
        if within(name, "services.edge.backends"):
            continue
        source = path.read_text(encoding="utf-8")
        for imp in imports_in(source, name, is_package=path.name == "__init__.py"):
            if any(within(imp.module, rpc) for rpc in RPC_MODULES):
                found.append(f"{path.relative_to(ROOT)}:{imp.line}: `{imp.text}`")
    assert not found, "edge modules outside services/edge/backends that import gRPC or " \
        "the generated contracts:\n" + "\n".join(found)


def test_every_edge_module_sits_in_a_part() -> None:
    """A new edge module goes into the part whose job it does, never back to the flat folder."""
    edge = ROOT / "services" / "edge"
    loose = sorted(p.name for p in edge.iterdir()
                   if p.name not in {"__init__.py", "__pycache__"}
                   and p.name.removesuffix(".py") not in (*EDGE_LAYERS, *EDGE_WIDE))
    assert not loose, f"services/edge/ modules outside the parts {EDGE_LAYERS}: {loose}"


def test_every_module_says_its_job_and_stays_whole() -> None:
    """A hand-written module starts with a docstring saying the one thing it does, and a
    package's ``__init__`` says what the package owns; a module far past :data:`MAX_LINES`
    is a sign of more than one job (split it by concept)."""
    undocumented, too_long = [], []
    for path in source_files():
        if not hand_written(path):
            continue
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        if not (ast.get_docstring(ast.parse(text)) or "").strip():
            undocumented.append(name)
        if len(text.splitlines()) > MAX_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
    assert not undocumented, "modules and packages without a docstring saying their job:\n" \
        + "\n".join(undocumented)
    assert not too_long, "modules doing more than one job, by their size:\n" + "\n".join(too_long)


def test_every_package_has_an_init_that_says_what_it_owns() -> None:
    missing = [str(d.relative_to(ROOT)) for top in CHECKED for d in sorted((ROOT / top).rglob("*"))
               if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
               and not (d / "__init__.py").exists()]
    assert not missing, f"packages without an __init__.py: {missing}"


#: Where no comment or docstring may point into the issue tracker.
HISTORY_FREE = ("services", "acpgate", "tools", "tests", "bench")
#: A tracker reference (the word issue or issues, then a number) or a numbered section of
#: bench/PROFILE.md.
TRACKER_REFERENCE = re.compile(r"\b[Ii]ssues?\s+#?\d|PROFILE\.md,?\s*(?:§|section\s+\d)")


def comments_and_docstrings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring in ``source``: a docstring is a string
    literal standing alone as a statement. Other string literals (wire messages, test
    data) are not yielded."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    starts_statement = True
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
        if tok.type in (tokenize.COMMENT, tokenize.NL):
            continue
        if tok.type == tokenize.STRING and starts_statement:
            after = next(t for t in tokens[i + 1:] if t.type not in (tokenize.COMMENT, tokenize.NL))
            if after.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                yield tok.start[0], tok.string
        starts_statement = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)


def tracker_references(name: str, source: str) -> list[str]:
    """``name:line: text`` for each tracker reference in the comments and docstrings."""
    found = []
    for line, text in comments_and_docstrings(source):
        for m in TRACKER_REFERENCE.finditer(text):
            at = line + text.count("\n", 0, m.start())
            found.append(f"{name}:{at}: {text.splitlines()[at - line].strip()}")
    return found


def test_no_comment_or_docstring_points_into_the_tracker() -> None:
    """A comment or docstring says what the code does and what its caller must do; which
    issue asked for it is history, for the commit message. A reader of the repository
    cannot follow ``issue <number>``, nor a section number of the profiling notes."""
    found = []
    for top in HISTORY_FREE:
        for path in sorted((ROOT / top).rglob("*.py")):
            if top in CHECKED and not hand_written(path):
                continue
            found += tracker_references(str(path.relative_to(ROOT)),
                                        path.read_text(encoding="utf-8"))
    assert not found, "tracker references in comments and docstrings (say what holds " \
        "instead):\n" + "\n".join(found)


HISTORY_PROBE = '''\
"""A module (issue 12)."""
MESSAGE = "see issue 12"  # the text a client gets
SECTION = {"title": """issue 12"""}


def f() -> None:
    """Measured in bench/PROFILE.md §3.

    As issues 4, 5 decided."""
    x = 1  # see issue 7
'''


def test_the_tracker_check_reads_only_comments_and_docstrings() -> None:
    """The checker itself: string data is never read, every comment and docstring is."""
    assert tracker_references("probe.py", HISTORY_PROBE) == [
        'probe.py:1: """A module (issue 12)."""',
        'probe.py:7: """Measured in bench/PROFILE.md §3.',
        "probe.py:9: As issues 4, 5 decided.\"\"\"",
        "probe.py:10: # see issue 7",
    ]
