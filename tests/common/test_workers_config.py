"""``[gateway] workers``: a count or "auto", and the edge children serve runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from acpgate.serve_children import edge_specs
from services.common import config as cm
from services.common.config.schema import MAX_AUTO_WORKERS, worker_count


def load(tmp_path: Path, value: str) -> cm.Config:
    (tmp_path / "config.toml").write_text(f"[gateway]\nworkers = {value}\n", encoding="utf-8")
    return cm.load_config(tmp_path, environ={})


def test_default_is_one_edge(tmp_path: Path) -> None:
    cfg = cm.load_config(tmp_path, environ={})
    assert cfg.gateway.workers == 1
    assert [(s.name, s.worker) for s in edge_specs(cfg, cores=16)] == [("edge", 0)]


def test_a_count_and_auto(tmp_path: Path) -> None:
    cfg = load(tmp_path, "3")
    assert [(s.name, s.worker) for s in edge_specs(cfg, cores=1)] == [
        ("edge-1", 1), ("edge-2", 2), ("edge-3", 3)]
    auto = load(tmp_path, '"auto"')
    assert auto.gateway.workers == "auto"
    assert len(edge_specs(auto, cores=2)) == 2
    assert worker_count("auto", 64) == MAX_AUTO_WORKERS
    assert worker_count("auto", None) == 1
    env = cm.load_config(tmp_path, environ={"ACPGATE_gateway__workers": "4"})
    assert env.gateway.workers == 4


@pytest.mark.parametrize(("value", "needle"), [
    ("0", 'expected 1 to 64 or "auto", got 0'),
    ("65", 'expected 1 to 64 or "auto", got 65'),
    ('"many"', "expected integer or \"auto\", got 'many'"),
    ("true", 'expected integer or "auto", got True'),
])
def test_bad_values_name_the_key(tmp_path: Path, value: str, needle: str) -> None:
    with pytest.raises(cm.ConfigError) as info:
        load(tmp_path, value)
    assert "[gateway] workers" in str(info.value) and needle in str(info.value)
