"""A setup cancelled at any await leaves no lease behind.

The attacker's lever is timing: a client that disconnects while its session is
being set up gets that setup cancelled (once the connection's drain runs out),
and so does a session the built-in agent is spawning when the session that
asked is closed. Wherever the cancellation lands — before or after the lease
is ensured, while the adapter initializes, during its ``session/new`` or the
restore's seeding, while the row is marked active — the session's adapter and
lease must go with it.

The handlers run on a real edge runtime (embedded session and lifecycle
services, the built-in demo agent as a real child process with its warm pool);
each setup is cancelled after a growing number of event-loop turns (a sweep
over its awaits), then at random moments. Afterwards no lease may be open and
no process may carry a lease that is not a warm one.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from services.edge.backends.lifecycle import Lease, LeaseState
from services.edge.caller import LOCAL_OPERATOR
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.new import session_new
from services.edge.dialect.handlers.restore import restore
from services.edge.transport.connection import EdgeRuntime
from tests.e2e.harness import workspace_beside_config
from tests.security.procs import install_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OPEN = LeaseState.OPEN
WARM = LeaseState.WARM
#: Event-loop turns a sweep waits before cancelling: every await of a setup is passed.
SWEEP = range(0, 48, 3)
#: Setups cancelled at a random moment (seconds after they began) per kind.
RANDOM_ROUNDS = 8
RANDOM_SECS = 0.6

Setup = Callable[[DialectConnection], Awaitable[Any]]


async def _ignore(line: str) -> None:
    """The client side of the connection (nobody reads in these races)."""


async def _cancelled_after(setup: Setup, conn: DialectConnection, *, turns: int = 0,
                           secs: float = 0.0) -> None:
    """Run ``setup`` and cancel it after ``turns`` loop turns and ``secs`` seconds; a session
    it finished anyway is closed again (the slots are few)."""
    task = asyncio.ensure_future(setup(conn))
    for _ in range(turns):
        await asyncio.sleep(0)
    if secs:
        await asyncio.sleep(secs)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    for session in list(conn.sessions.values()):
        conn.sessions.pop(session.session_id, None)
        await conn.runtime.deactivate(session, "test")


async def _non_warm(rt: EdgeRuntime) -> list[Lease]:
    return [lease for lease in await rt.lifecycle.list_leases() if lease.state != WARM]


async def _settled(rt: EdgeRuntime) -> None:
    """No lease open, and no live process carrying a lease that is not a warm one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60.0
    while True:
        leases = await _non_warm(rt)
        open_now = [lease.session_key for lease in leases if lease.state == OPEN]
        non_warm = {lease.lease_id for lease in leases}
        marked = await asyncio.to_thread(install_processes, rt.gateway_instance_id)
        left = {lease: procs for lease, procs in marked.items() if lease in non_warm}
        if not open_now and not left:
            return
        if loop.time() > deadline:
            raise AssertionError(f"leaked: open leases {open_now}, processes {left}")
        await asyncio.sleep(0.1)


def test_a_setup_cancelled_at_any_await_leaves_no_lease(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, tmp_path: Path) -> None:
    work = workspace_beside_config(tmp_path)
    rng = random.Random()

    async def new(conn: DialectConnection) -> Any:
        answered = await session_new(conn, {"agentAlias": "demo", "cwd": str(work)})
        await answered.then()  # as the peer does once the answer is written
        return answered.result

    async def scenario() -> None:
        conn = DialectConnection(runtime, _ignore, methods={}, caller=LOCAL_OPERATOR)
        stored = (await new(conn))["sessionId"]
        await runtime.deactivate(conn.sessions.pop(stored), "test")  # stored, inactive

        async def load(c: DialectConnection) -> Any:
            return await restore(c, {"sessionId": stored}, replay=True)

        async def resume(c: DialectConnection) -> Any:
            return await restore(c, {"sessionId": stored}, replay=False)

        try:
            for setup in (new, load, resume):
                for turns in SWEEP:
                    await _cancelled_after(setup, conn, turns=turns)
                for _ in range(RANDOM_ROUNDS):
                    await _cancelled_after(setup, conn, secs=rng.uniform(0.0, RANDOM_SECS))
        finally:
            await conn.close(drain_secs=0)
        registry = runtime.registry
        assert not registry.active and registry.reserved == 0
        assert not registry.creating and not registry.restoring
        await _settled(runtime)

    loop.run_until_complete(scenario())


def test_the_connection_closing_mid_setup_releases_what_it_was_setting_up(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, tmp_path: Path) -> None:
    """A session/new read from the client, then the connection's own close (no drain left:
    its requests are cancelled) at random moments: nothing it was setting up survives."""
    work = workspace_beside_config(tmp_path)
    rng = random.Random()
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                          "params": {"agentAlias": "demo", "cwd": str(work)}})

    async def scenario() -> None:
        for _ in range(RANDOM_ROUNDS):
            conn = DialectConnection(runtime, _ignore, methods={"session/new": session_new},
                                     caller=LOCAL_OPERATOR)
            conn.rpc.feed(request)
            await asyncio.sleep(rng.uniform(0.0, RANDOM_SECS))
            await conn.close(drain_secs=0)
            assert not conn.sessions
        assert not runtime.registry.active
        await _settled(runtime)

    loop.run_until_complete(scenario())
