"""Environment variables that make a program load or run code other than what it was asked to.

``LD_PRELOAD`` injects a library into every dynamically linked program,
``PYTHONPATH``/``PYTHONSTARTUP`` and ``NODE_OPTIONS=--require …`` run modules in
any interpreter, ``BASH_ENV`` runs a file in every non-interactive bash, an
exported ``BASH_FUNC_ls%%`` replaces a command inside bash scripts, and
``GLIBC_TUNABLES`` has been a privilege-escalation vector of its own. A process
started for someone less trusted (a gateway client's stdio MCP server) gets
none of them, neither from that party nor inherited (:func:`without_loader_variables`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["LOADER_ENV_NAMES", "LOADER_ENV_PREFIXES", "is_loader_variable",
           "without_loader_variables"]

#: Every variable whose name starts with one of these.
LOADER_ENV_PREFIXES: Final = (
    "LD_",          # glibc/musl dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, …
    "DYLD_",        # macOS dynamic loader
    "PYTHON",       # PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE, PYTHONINSPECT, …
    "BASH_FUNC_",   # exported bash functions (BASH_FUNC_name%%)
    "MALLOC_",      # glibc malloc tunables (MALLOC_CHECK_, MALLOC_PERTURB_, …)
)

#: These exact names.
LOADER_ENV_NAMES: Final = frozenset({
    # interpreters' own code-injection hooks
    "NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
    "PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB",
    "RUBYOPT", "RUBYLIB",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
    "LUA_INIT", "LUA_PATH", "LUA_CPATH",
    "PHPRC", "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    # shells: files run at start, word splitting, xtrace command substitution
    "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH",
    # glibc: modules loaded by iconv and locale code, resolver files, tunables
    "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF",
})


def is_loader_variable(name: str) -> bool:
    """True when the variable ``name`` is one of :data:`LOADER_ENV_NAMES` or starts with one
    of :data:`LOADER_ENV_PREFIXES` (names are case-sensitive, as on Linux)."""
    return name in LOADER_ENV_NAMES or name.startswith(LOADER_ENV_PREFIXES)


def without_loader_variables(*layers: Mapping[str, str] | Iterable[tuple[str, str]]
                             ) -> dict[str, str]:
    """The environment made of ``layers`` (later ones win), without any loader variable."""
    out: dict[str, str] = {}
    for layer in layers:
        pairs = layer.items() if isinstance(layer, Mapping) else layer
        for name, value in pairs:
            if not is_loader_variable(name):
                out[name] = value
    return out
