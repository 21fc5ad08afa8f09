"""``python -m services.agent --config-dir DIR --alias A``: the built-in agent on stdio."""

from __future__ import annotations

import argparse
import asyncio
import sys

from services.common.config import ConfigError, load_config, resolve_config_dir
from services.common.logs import setup_logging


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

    return asyncio.run(run_agent_stdio(cfg, args.alias))


if __name__ == "__main__":
    sys.exit(main())
