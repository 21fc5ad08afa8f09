"""The wrapper's files run alone: standard library only, installed under the names they import.

The wrapper runs as ``python -I -S <wrapper root>/acpgate_wrapper.py``, with none of acpgate
on its path: whatever its package imports must be the standard library, or a part
installed beside it under the name the supervisor imports it by.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from services.lifecycle import wrapper
from services.lifecycle.adapters.spawn import WRAPPER_FILE_NAME, WRAPPER_PARTS, install_wrapper
from tests.test_architecture import imports_in

PACKAGE = Path(wrapper.__file__).parent
OWN = "services.lifecycle.wrapper"


def test_the_wrapper_package_imports_only_the_standard_library_and_itself() -> None:
    foreign = []
    for path in sorted(PACKAGE.glob("*.py")):
        name = f"{OWN}.{path.stem}" if path.stem != "__init__" else OWN
        for imp in imports_in(path.read_text(encoding="utf-8"), name,
                              is_package=path.stem == "__init__"):
            top = imp.module.split(".")[0]
            installed = f"{imp.module}.py" in {n for _, n in WRAPPER_PARTS}
            if not (top in sys.stdlib_module_names or imp.module.startswith(OWN) or installed):
                foreign.append(f"{path.name}:{imp.line}: {imp.text}")
    assert not foreign, "the wrapper imports outside the standard library:\n" + "\n".join(foreign)


def test_the_supervisor_imports_its_parts_by_the_names_they_are_installed_under() -> None:
    """Run as a file, the supervisor imports its parts by their installed names."""
    source = (PACKAGE / "supervisor.py").read_text(encoding="utf-8")
    as_file = {imp.module for imp in imports_in(source, f"{OWN}.supervisor")
               if f"{imp.module}.py" in {n for _, n in WRAPPER_PARTS}}
    assert as_file == {n.removesuffix(".py") for _, n in WRAPPER_PARTS}


def test_install_writes_the_supervisor_and_each_part(tmp_path: Path) -> None:
    paths = asyncio.run(install_wrapper(tmp_path))
    assert paths.path == paths.root / WRAPPER_FILE_NAME
    installed = sorted(p.name for p in paths.root.iterdir())
    assert installed == sorted([WRAPPER_FILE_NAME, *(n for _, n in WRAPPER_PARTS)])
    for module, name in WRAPPER_PARTS:
        assert (paths.root / name).read_bytes() == Path(str(module.__file__)).read_bytes()
