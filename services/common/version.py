"""acpgate's version as the installed distribution reports it.

Services do not import the ``acpgate`` package (the composition root), so they
read the same metadata ``acpgate.__version__`` does.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

__all__ = ["installed_version"]


@cache
def installed_version() -> str:
    """The installed distribution's version ("0.0.0+src" for a source tree never installed)."""
    try:
        return version("acpgate")
    except PackageNotFoundError:
        return "0.0.0+src"
