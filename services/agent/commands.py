"""A session's available commands, told to the client (ACP ``available_commands_update``).

Sent once the ``session/new``, ``session/load`` or ``session/resume`` that set the
session up is answered: before that answer a client does not know the session id yet
(Zed drops an update for a session it does not know). The answer is queued on the
connection when the handler returns, before the task made here runs, so the update
always follows it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.agent.providers.base import Provider, provider_commands
from services.agent.session import AgentSession
from services.common.protocol import U_AVAILABLE_COMMANDS


def commands_update(provider: Provider) -> dict[str, Any] | None:
    """The ``available_commands_update`` of a session on ``provider``; None when it
    understands no commands (a real model: nothing is advertised)."""
    commands = provider_commands(provider)
    if not commands:
        return None
    return {"sessionUpdate": U_AVAILABLE_COMMANDS,
            "availableCommands": [command.to_acp() for command in commands]}


class CommandAdvertiser:
    """Sends each set-up session its commands right after the setup's answer."""

    def __init__(self) -> None:
        #: The sends still running (kept so none is collected half-way).
        self._sending: set[asyncio.Task[None]] = set()

    def after_answer(self, session: AgentSession, provider: Provider) -> None:
        """Send ``session`` the commands of ``provider`` once the current request is answered."""
        update = commands_update(provider)
        if update is None:
            return
        task = asyncio.ensure_future(session.context.send_update(update))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
