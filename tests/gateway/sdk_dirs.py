"""Where the official TypeScript SDK for the remote-transport tests is, and node.

``@agentclientprotocol/sdk`` (the version ``tests/realagents/packages.txt`` pins)
is looked for in ``$ACPGATE_TRANSPORT_SDK``, then in the real-adapter tier's cache
(``$ACPGATE_REAL_ADAPTERS``, which ``.ci/run`` installs), then in
``~/.cache/acpgate/transport-sdk`` (``npm install --prefix ~/.cache/acpgate/transport-sdk
@agentclientprotocol/sdk@2.4.0``). Without node or the SDK the tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SDK_PACKAGE = "node_modules/@agentclientprotocol/sdk/dist/transports/http-stream.js"
DEFAULT_DIR = Path.home() / ".cache" / "acpgate" / "transport-sdk"


def ts_sdk_dir() -> Path:
    """The npm prefix holding the SDK (skips the test, with the reason, when there is none)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the TypeScript SDK client tests need it")
    candidates = [os.environ.get("ACPGATE_TRANSPORT_SDK", ""),
                  os.environ.get("ACPGATE_REAL_ADAPTERS", ""), str(DEFAULT_DIR)]
    for entry in candidates:
        if entry and (Path(entry) / SDK_PACKAGE).is_file():
            return Path(entry)
    pytest.skip("@agentclientprotocol/sdk is not installed: set ACPGATE_TRANSPORT_SDK (or "
                f"ACPGATE_REAL_ADAPTERS) to an npm prefix holding it, or `npm install --prefix "
                f"{DEFAULT_DIR} @agentclientprotocol/sdk@2.4.0`")
