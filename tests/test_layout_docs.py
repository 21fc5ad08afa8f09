"""The layout page (docs/layout.md) is generated from the packages' docstrings and draws
every package of the services, the CLI and the contracts."""

from __future__ import annotations

from tests.test_architecture import CHECKED, ROOT
from tools import gen_layout


def test_the_committed_layout_page_is_up_to_date() -> None:
    """`make layout-docs` was run after the last package was added, moved or re-described."""
    assert gen_layout.OUTPUT.read_text(encoding="utf-8") == gen_layout.render(), \
        "docs/layout.md is stale: run `make layout-docs`"


def test_every_package_is_drawn_with_its_job() -> None:
    """Each package of ``services``, ``acpgate`` and ``acpgate_contracts``, down to the
    depth drawn, has a line with the first sentence of its docstring."""
    drawn = gen_layout.drawn_folders()
    depth = dict(gen_layout.TOPS)
    for top in CHECKED:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT)
            if len(folder.parts) - 1 > depth[top]:
                continue
            assert folder.as_posix() in drawn, f"{folder} is not drawn"
            assert gen_layout.job_of(ROOT / folder), f"{folder}/__init__.py says no job"


def test_a_job_is_the_first_sentence_in_plain_text() -> None:
    """Markup goes, abbreviations do not end a sentence, later paragraphs are not read."""
    doc = ("The ``x`` package of :mod:`~.y`, e.g. the z (SPEC §3). More.\n\n"
           "Second paragraph.")
    assert gen_layout.first_sentence(doc) == "The x package of y, e.g. the z."
    assert gen_layout.first_sentence("No full stop: a list\nover two lines") == \
        "No full stop: a list over two lines"
