"""The loader and interpreter variables a gateway client's stdio server never gets."""

from __future__ import annotations

import pytest

from services.common.loader_env import (
    LOADER_ENV_NAMES,
    LOADER_ENV_PREFIXES,
    is_loader_variable,
    without_loader_variables,
)


@pytest.mark.parametrize("name", [
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PYTHONPATH",
    "PYTHONSTARTUP", "PYTHONHOME", "NODE_OPTIONS", "NODE_PATH", "PERL5LIB", "PERL5OPT",
    "RUBYOPT", "RUBYLIB", "BASH_ENV", "ENV", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
    "GCONV_PATH", "IFS", "GLIBC_TUNABLES", "BASH_FUNC_ls%%", "SHELLOPTS", "PS4",
])
def test_loader_variables(name: str) -> None:
    assert is_loader_variable(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "TERM", "ld_preload", "MY_LD_X",
                                  "NODE_ENV", "ENVIRONMENT", "XPYTHONPATH"])
def test_ordinary_variables(name: str) -> None:
    assert not is_loader_variable(name)


def test_filtered_layers_later_wins() -> None:
    inherited = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib", "HOME": "/h"}
    passed = [("HOME", "/elsewhere"), ("LD_PRELOAD", "/evil.so"), ("PYTHONPATH", "/evil")]
    assert without_loader_variables(inherited, passed) == {"PATH": "/usr/bin", "HOME": "/elsewhere"}


def test_the_list_is_one_named_constant() -> None:
    assert {"NODE_OPTIONS", "BASH_ENV", "IFS", "GCONV_PATH"} <= LOADER_ENV_NAMES
    assert {"LD_", "DYLD_", "PYTHON"} <= set(LOADER_ENV_PREFIXES)
