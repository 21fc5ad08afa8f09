"""``python -m services.agent --config-dir DIR --alias A``: the built-in agent behind the edge.

This is the command the session service launches for a ``kind = "builtin"``
agent, so no local policy is passed: every session's policy comes from the
edge in ``_meta.acpgate.policy``. (``acpgate agent`` is the standalone entry.)
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from services.common import event_loop
from services.common.config import ConfigError, load_config, resolve_config_dir
from services.common.log_output import plan_logging, start_logging
from services.common.logs import setup_logging
from services.common.version import installed_version


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
        # Its stderr is its lease's log (the wrapper's file): the configured level and
        # format there, never the install's log file.
        start_logging(replace(plan_logging(cfg, "agent", stdio=False), file=None))
    except ConfigError as exc:
        print(f"acpgate agent: {exc}", file=sys.stderr)
        return 2
    from services.agent.main import run_agent_stdio

    return event_loop.run(run_agent_stdio(cfg, args.alias, version=installed_version()),
                          process="agent")


if __name__ == "__main__":
    sys.exit(main())
