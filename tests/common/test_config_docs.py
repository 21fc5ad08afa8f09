"""The configuration reference (docs/configuration.md) is generated from the schema and
says every key's bounds as the loader enforces them."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

import services.common.config as cm
from services.common.config.reload import RELOADABLE, needs_restart
from services.common.config.schema import SECTIONS, AgentSection, settings
from tools import gen_config_docs


def test_the_committed_reference_is_up_to_date() -> None:
    """`make config-docs` was run after the last change to the schema or the generator."""
    assert gen_config_docs.OUTPUT.read_text(encoding="utf-8") == gen_config_docs.render(), \
        "docs/configuration.md is stale: run `make config-docs`"


def test_every_key_is_in_the_reference_with_its_meaning() -> None:
    text = gen_config_docs.render()
    for name, cls in [*SECTIONS.items(), ("agents.<alias>", AgentSection)]:
        assert f"## `[{name}]`" in text
        for key, declared in settings(cls).items():
            assert declared.doc, f"[{name}] {key} declares no meaning"
            assert f"| `{key}` |" in text


def test_the_reload_split_is_the_declared_one() -> None:
    """A key applies at once exactly when its field says so; agents reload whole."""
    assert "agents" in RELOADABLE and not needs_restart("agents.new")
    for name, cls in SECTIONS.items():
        for key, declared in settings(cls).items():
            assert needs_restart(f"{name}.{key}") is not declared.reload, f"{name}.{key}"


@pytest.mark.parametrize(("name", "key"), [
    (name, f.name) for name, cls in SECTIONS.items() for f in fields(cls)
    if (s := settings(cls).get(f.name)) is not None and s.min is not None
])
def test_a_value_below_a_declared_minimum_is_refused(tmp_path: Path, name: str,
                                                     key: str) -> None:
    declared = settings(SECTIONS[name])[key]
    assert declared.min is not None
    section, _, nested = name.partition(".")
    table = f"[{section}]\n" if not nested else f"[{section}.{nested}]\n"
    (tmp_path / "config.toml").write_text(f"{table}{key} = {declared.min - 1}\n")
    with pytest.raises(cm.ConfigError) as err:
        cm.load_config(tmp_path, environ={})
    assert f"[{name}] {key}: expected" in str(err.value)
