"""An external ACP agent on raw JSON-RPC (no SDK, no acpgate imports) whose v1 ``authMethods``
carry no ``type``, as codex-acp 2.6's do: for the automatic login's tests.

Environment:

- ``TYPELESS_AGENT_LOG``: every message it reads is appended there as one JSON line, and
  first a line ``{"env": [...]}`` naming the variables of its environment whose name holds
  ``KEY`` (names only), so a test sees what reached it;
- ``TYPELESS_AGENT_NAME``: its ``agentInfo.name``;
- ``TYPELESS_AGENT_METHODS``: its ``authMethods`` (JSON);
- ``TYPELESS_AGENT_VARS``: the variables its ``api-key`` method reads (comma-separated):
  ``authenticate`` with ``api-key`` succeeds when one of them is set, or when the
  request itself carries a key in ``_meta["api-key"].apiKey``; anything else is -32000.

``session/new`` answers -32000 ``Authentication required`` until it is authenticated;
``session/prompt`` ends the turn at once.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LOG = os.environ.get("TYPELESS_AGENT_LOG", "")
NAME = os.environ.get("TYPELESS_AGENT_NAME", "typeless-agent")
METHODS = json.loads(os.environ.get("TYPELESS_AGENT_METHODS", "[]"))
VARS = [v for v in os.environ.get("TYPELESS_AGENT_VARS", "").split(",") if v]
AUTH_REQUIRED = -32000


def agent_section(alias: str, log: str, name: str, methods: list[dict[str, Any]],
                  env: dict[str, str] | None = None, reads: str = "",
                  pass_env: tuple[str, ...] = ()) -> str:
    """The ``[agents.<alias>]`` config section running this script (``reads``: its
    ``TYPELESS_AGENT_VARS``)."""
    full = {"TYPELESS_AGENT_LOG": log, "TYPELESS_AGENT_NAME": name,
            "TYPELESS_AGENT_METHODS": json.dumps(methods), "TYPELESS_AGENT_VARS": reads,
            **(env or {})}
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in full.items())
    return (f"\n[agents.{alias}]\nkind = \"acp\"\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(os.path.abspath(__file__))}]\nenv = {{ {pairs} }}\n"
            f"pass_env = {json.dumps(list(pass_env))}\n")


def received(log: str) -> list[dict[str, Any]]:
    """What the agent's processes logged, in order."""
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _record(msg: dict[str, Any]) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(msg) + "\n")


def _send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
    sys.stdout.flush()


def main() -> None:
    _record({"env": sorted(k for k in os.environ if "KEY" in k)})
    authenticated = False
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        _record(msg)
        if "id" not in msg or "method" not in msg:
            continue
        method, params, rid = msg["method"], msg.get("params") or {}, msg["id"]
        if method == "initialize":
            _send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {},
                                         "agentInfo": {"name": NAME, "version": "1"},
                                         "authMethods": METHODS}})
        elif method == "authenticate":
            given = ((params.get("_meta") or {}).get("api-key") or {}).get("apiKey")
            if params.get("methodId") == "api-key" and (
                    given or any(os.environ.get(v) for v in VARS)):
                authenticated = True
                _send({"id": rid, "result": {}})
            else:
                _send({"id": rid, "error": {"code": AUTH_REQUIRED, "message": "no key"}})
        elif method == "session/new":
            if authenticated:
                _send({"id": rid, "result": {"sessionId": "typeless-1"}})
            else:
                _send({"id": rid, "error": {"code": AUTH_REQUIRED,
                                            "message": "Authentication required"}})
        elif method == "session/prompt":
            _send({"id": rid, "result": {"stopReason": "end_turn"}})
        else:
            _send({"id": rid, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
