"""The real-adapter tier (marker ``realagents``): real npm adapters behind ``acpgate acp``.

Runs only when ``ACPGATE_REAL_ADAPTERS`` names a directory where the
adapters were installed (``.ci/run`` does that when node and npm exist);
otherwise every test of the tier is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realagents.adapters import ENV_DIR, adapters_dir
from tests.realagents.fake_models import FakeModelServer


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tier and skip it, with the reason, when no adapters are installed."""
    base = adapters_dir()
    for item in items:
        if "tests/realagents/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.realagents)
        if base is None:
            item.add_marker(pytest.mark.skip(
                reason=f"real adapters not installed (set {ENV_DIR} to an npm cache dir; "
                       ".ci/run does when node and npm exist)"))


@pytest.fixture(scope="session")
def npm_dir() -> Path:
    """The cache dir holding ``node_modules`` with the adapters."""
    base = adapters_dir()
    assert base is not None
    return base


class ThreadedModelServer:
    """A :class:`FakeModelServer` on its own event loop thread (the tier's clients are sync)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = FakeModelServer()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._server.__aenter__(), self._loop).result(10)
        return self._server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._server.__aexit__(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture(scope="module")
def model_server() -> Iterator[FakeModelServer]:
    """The local fake model provider, for one test module."""
    with ThreadedModelServer() as server:
        yield server
