"""``python -m services.agent --config-dir DIR --alias A``: the built-in agent behind the edge.

This is the command the session service launches for a ``kind = "builtin"``
agent, so no local policy is passed: every session's policy comes from the
edge in ``_meta.acpgate.policy``. (``acpgate agent`` is the standalone entry.)
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from services.common import event_loop
from services.common.config import ConfigError, load_config, resolve_config_dir
from services.common.logs import setup_logging


def installed_version() -> str:
    """The installed distribution's version, reported as ``agentInfo.version``.

    Services do not import the ``acpgate`` package (the composition root), so
    this entry point reads the same metadata ``acpgate.__version__`` does.
    """
    try:
        return version("acpgate")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+src"


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load config, run the agent; logs go to stderr only."""
    parser = argparse.ArgumentParser(prog="python -m services.agent",
                                     description="acpgate's built-in ACP agent on stdio")
    parser.add_argument("--config-dir", default=None)
    parser.add_argument("--alias", default="")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        cfg = load_config(resolve_config_dir(args.config_dir))
    except ConfigError as exc:
        print(f"acpgate agent: {exc}", file=sys.stderr)
        return 2
    from services.agent.main import run_agent_stdio

    return event_loop.run(run_agent_stdio(cfg, args.alias, version=installed_version()),
                          process="agent")


if __name__ == "__main__":
    sys.exit(main())
