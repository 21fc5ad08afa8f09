"""Which event loop a process runs on (services.common.event_loop)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.common import event_loop
from services.common.event_loop import ASYNCIO, ENV_EVENT_LOOP, PROCESSES, UVLOOP, choose

REPO = Path(__file__).resolve().parents[2]


def test_default_follows_the_measured_wins() -> None:
    for process in PROCESSES:
        expected = UVLOOP if process in event_loop.UVLOOP_BY_DEFAULT else ASYNCIO
        assert choose(process, {}) == expected


@pytest.mark.parametrize("value", ["uvloop", "UVLOOP", " uvloop "])
def test_a_bare_value_applies_to_every_process(value: str) -> None:
    for process in PROCESSES:
        assert choose(process, {ENV_EVENT_LOOP: value}) == UVLOOP
        assert choose(process, {ENV_EVENT_LOOP: "asyncio"}) == ASYNCIO


def test_a_per_process_entry_beats_a_bare_value() -> None:
    env = {ENV_EVENT_LOOP: "edge=asyncio, uvloop ,lifecycle=uvloop"}
    assert choose("edge", env) == ASYNCIO
    assert choose("lifecycle", env) == UVLOOP
    assert choose("session", env) == UVLOOP  # the bare value
    env = {ENV_EVENT_LOOP: "agent=uvloop"}
    assert choose("agent", env) == UVLOOP
    assert choose("edge", env) == choose("edge", {})  # untouched: its default


def test_unknown_values_are_ignored() -> None:
    for value in ("trio", "edge=tokio", "=", ",,", "edge="):
        for process in PROCESSES:
            assert choose(process, {ENV_EVENT_LOOP: value}) == choose(process, {})


def test_serve_always_runs_the_standard_loop() -> None:
    # uvloop's subprocess_exec has no process_group, which serve's children need.
    assert "serve" not in PROCESSES
    assert choose("serve", {ENV_EVENT_LOOP: "uvloop"}) == ASYNCIO
    assert choose("serve", {ENV_EVENT_LOOP: "serve=uvloop"}) == ASYNCIO


def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_the_chosen_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")

    async def which() -> str:
        return _loop_module()

    monkeypatch.setenv(ENV_EVENT_LOOP, "edge=uvloop")
    assert event_loop.run(which(), process="edge").startswith("uvloop")
    monkeypatch.setenv(ENV_EVENT_LOOP, "edge=asyncio")
    assert event_loop.run(which(), process="edge").startswith("asyncio")


def test_without_uvloop_the_standard_loop_runs(tmp_path: Path) -> None:
    # A real interpreter in which `import uvloop` fails (a minimal install).
    (tmp_path / "uvloop.py").write_text("raise ImportError('not here')\n", encoding="utf-8")
    code = ("import asyncio; from services.common import event_loop\n"
            "async def f():\n    return type(asyncio.get_running_loop()).__module__\n"
            "print(event_loop.run(f(), process='edge'))\n")
    env = {**os.environ, ENV_EVENT_LOOP: "uvloop",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip().startswith("asyncio")
