"""Fixtures shared by the in-process edge tests: one real runtime per test module."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from acpgate import __version__
from acpgate.embedded import start_embedded
from services.common.config import load_config
from services.edge.connection import EdgeRuntime, open_runtime
from tests.e2e.harness import write_config


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop the module's runtime lives on (tests drive it synchronously)."""
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def runtime(loop: asyncio.AbstractEventLoop,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeRuntime]:
    """A real edge runtime with embedded services, on the harness config."""
    cfg_dir = write_config(tmp_path_factory.mktemp("edge") / "cfg")
    rt = loop.run_until_complete(open_runtime(load_config(Path(cfg_dir), environ={}),
                                              version=__version__,
                                              start_services=start_embedded))
    yield rt
    loop.run_until_complete(rt.close())
