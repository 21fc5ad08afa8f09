"""No import circles among the modules of ``services`` and ``acpgate``.

Two modules that import each other (directly or around a longer loop) are one concept
cut in two, or a lower one reaching up: neither can be read, tested or moved alone. The
graph is the one :mod:`tests.test_architecture` reads — every import counts, at the top,
inside a function, under ``TYPE_CHECKING`` or through ``importlib`` — so hiding an import
in a function does not break a circle; only removing the need for it does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.test_architecture import ROOT, imports_in, module_name, source_files

#: The packages whose modules must not import each other in a circle.
CIRCLE_FREE = ("services", "acpgate")

#: Packages whose modules still import each other in a circle; a circle found passes only
#: when all its modules lie inside one of these. None left: keep it empty.
KNOWN_CIRCLES_IN: tuple[str, ...] = ()


def _known(name: str, modules: Iterable[str]) -> str | None:
    """``name``, or the nearest enclosing module in ``modules`` (``import a.b.c`` of a name)."""
    known = set(modules)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(tops: tuple[str, ...] = CIRCLE_FREE) -> dict[str, set[str]]:
    """Module → the modules of ``tops`` it imports (itself left out)."""
    paths = [p for p in source_files() if module_name(p).split(".")[0] in tops]
    names = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        importer = module_name(path)
        found = imports_in(path.read_text(encoding="utf-8"), importer,
                           is_package=path.name == "__init__.py")
        targets = {_known(imp.module, names) for imp in found}
        graph[importer] = {t for t in targets if t is not None and t != importer}
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        # Tarjan's algorithm, iteratively: each frame is a module and its remaining targets.
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
    return sorted(found)


def test_the_circle_finder_sees_long_and_short_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert circles(graph) == [["a", "b", "c"], ["d", "e"]]


def test_no_import_circles() -> None:
    found = [part for part in circles(import_graph())
             if not any(all(m.startswith(f"{p}.") for m in part) for p in KNOWN_CIRCLES_IN)]
    assert not found, "import circles (each module imports the next, around):\n" + "\n".join(
        f"{len(part)} modules: {', '.join(part)}" for part in found) \
        + f"\n(read from {ROOT})"
