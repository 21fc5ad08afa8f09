"""No new import circles: modules that import each other, directly or round a loop.

The import graph is read as :mod:`tests.test_architecture` reads it (every import counts:
at the top, inside a function, under ``TYPE_CHECKING``). Each circle is a strongly
connected part of that graph. A circle found must lie inside one of :data:`KNOWN`, the
circles still to be opened, each with what ties it; opening one (or part of one) never
fails the check, a new one always does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.test_architecture import KNOWN_MODULES, imports_in, module_name, source_files

#: The circles not opened yet, and what ties each.
KNOWN: Mapping[frozenset[str], str] = {}


def import_graph() -> dict[str, set[str]]:
    """Each checked module and the checked modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in source_files():
        name = module_name(path)
        found = imports_in(path.read_text(), name, is_package=path.name == "__init__.py")
        graph[name] = {imp.module for imp in found
                       if imp.module in KNOWN_MODULES and imp.module != name}
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.add(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(frozenset(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_loop_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_circle_but_the_known_ones() -> None:
    new = [sorted(part) for part in circles(import_graph())
           if not any(part <= known for known in KNOWN)]
    assert not new, "modules that import each other (open the circle at its cause: a type " \
                    f"moves down, a callback or a protocol replaces a back-reference): {new}"
