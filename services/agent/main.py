"""Entry point: the built-in agent as a plain ACP agent on stdio.

Two callers: ``acpgate agent`` (standalone, e.g. launched by Zed; the CLI passes
a local policy) and ``python -m services.agent`` (the command the session service
launches behind the edge; no local policy). See :mod:`services.agent.policy_source`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import replace

from services.agent.policy_source import LocalPolicy
from services.agent.providers import ProviderError, make_provider, provider_warnings
from services.agent.rpc import agent_peer
from services.agent.server import AgentServer
from services.agent.stdio import StdioLines
from services.common.config import AgentSection, Config
from services.common.jsonrpc import read_lines
from services.common.logs import get_logger, route_library_logs

log = get_logger("agent.main")

#: How long answers to requests read before EOF may still take.
EOF_DRAIN_SECS = 5.0
#: Loggers of the MCP client stack, routed into the agent's JSON log.
LIBRARY_LOGGERS = ("mcp", "httpx2", "httpcore2")


class AliasError(Exception):
    """The alias does not name a runnable built-in agent."""


def resolve_agent(cfg: Config, alias: str) -> AgentSection:
    """``alias``, else ``[acp] default_agent``, else the only configured agent."""
    chosen = alias.strip() or cfg.acp.default_agent.strip()
    if not chosen:
        if len(cfg.agents) != 1:
            raise AliasError("no agent alias given and no single [agents.*] entry to default to "
                             "(pass --alias or set [acp] default_agent)")
        chosen = next(iter(cfg.agents))
    agent = cfg.agents.get(chosen)
    if agent is None:
        raise AliasError(f"Unknown agent `{chosen}` — no [agents.{chosen}] entry configured")
    if agent.kind != "builtin":
        raise AliasError(f"Agent `{chosen}` is kind = \"{agent.kind}\", not a built-in agent")
    if not agent.dispatchable:
        raise AliasError(f"Agent `{chosen}` is not enabled for dispatch")
    return agent


async def run_agent_stdio(cfg: Config, alias: str, *, version: str,
                          local_policy: LocalPolicy | None = None) -> int:
    """Serve ACP on stdin/stdout until EOF or SIGINT/SIGTERM; returns the exit code.

    ``version`` is reported as ``agentInfo.version``; ``local_policy`` decides the
    policy of sessions that arrive without ``_meta.acpgate.policy`` (standalone
    only — ``None`` behind the edge, where such a session is refused).
    """
    try:
        agent = resolve_agent(cfg, alias)
        provider = make_provider(agent)
    except (AliasError, ProviderError) as exc:
        print(f"acpgate agent: {exc}", file=sys.stderr)
        return 2
    route_library_logs(*LIBRARY_LOGGERS)
    log.info("agent_start", alias=agent.alias, provider=agent.provider, model=agent.model,
             standalone=local_policy is not None)
    for problem in provider_warnings(provider):  # every prompt will fail saying so
        log.warning("agent_misconfigured", alias=agent.alias, problem=problem)
    stdio = StdioLines()
    server = AgentServer(cfg, agent.alias, agent, provider, version=version,
                         provider_for=lambda model: make_provider(replace(agent, model=model)),
                         local_policy=local_policy)
    peer = agent_peer(stdio.write_line, server)
    server.attach(peer)
    loop = asyncio.get_running_loop()
    reading = asyncio.create_task(peer.serve(read_lines(stdio.reader)))
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, reading.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await reading
    # Input ended: running turns are cancelled (their tools killed) and answer
    # "cancelled"; requests already read still get their answers.
    await server.cancel_turns()
    await peer.drain(EOF_DRAIN_SECS)
    await server.shutdown()
    await peer.drain(1.0)
    await peer.cancel()
    stdio.close()
    log.info("agent_stop", alias=agent.alias)
    return 0
