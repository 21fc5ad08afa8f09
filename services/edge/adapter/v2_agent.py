"""The adapter link's side of a v2 agent: acpgate's v1 requests and turns over v2.

An adapter whose alias has ``protocol = "auto"`` or ``2`` gets a :class:`V2Agent` on its
link. ``initialize`` is offered as the setting says (:mod:`services.common.acp.v2.agent_init`);
once the agent answered v2, every request, update and agent request goes through the
pure translation of :mod:`services.common.acp.v2.agent_wire`, and a ``session/prompt`` is
answered when the agent reports the turn idle (v2's answer only acknowledges the
prompt). An agent that answered v1 is spoken to as before, untouched. A re-adopted
adapter is not asked again: :meth:`V2Agent.adopt` takes the version its alias's profile
recorded, and :meth:`V2Agent.adopt_turn` a turn its predecessor's prompt left running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from services.common.acp.v2.agent_init import fallback, offer, read_answer
from services.common.acp.v2.agent_wire import AgentWire, TurnEnd
from services.common.acp.v2.names import PROTOCOL_AUTO, PROTOCOL_V2
from services.common.jsonrpc import JsonRpcError
from services.common.logs import CountedWarning, get_logger
from services.common.protocol import M_INITIALIZE, M_SESSION_PROMPT, M_SESSION_UPDATE

__all__ = ["V2Agent"]

log = get_logger("edge.adapter")

#: How the link sends one request (screened as the agent calls for).
Send = Callable[[str, dict[str, Any], float | None], Awaitable[Any]]
#: Where a run of translated notifications goes (the adapter's owner).
Deliver = Callable[[list[tuple[str, dict[str, Any]]]], Awaitable[None]]


class V2Agent:
    """One adapter's v2 state: the negotiated version, the translation, the turns."""

    def __init__(self, protocol: int) -> None:
        #: The alias's setting (:data:`~services.common.acp.v2.names.PROTOCOL_AUTO`, 1, 2).
        self.protocol = protocol
        #: True once the agent answered ``initialize`` with v2.
        self.active = False
        self.wire = AgentWire()
        #: Until the edge session names itself (it counts its own): the adapter's.
        self.wire.on_drop = CountedWarning(log, "agent_state_dropped")
        self._turns: dict[str, asyncio.Future[TurnEnd]] = {}
        #: Adopted turns taken up before their log was read (:meth:`adopt_turn`).
        self._adopted: dict[str, asyncio.Future[TurnEnd]] = {}
        self._gone: BaseException | None = None

    def adopt(self, recorded: int) -> None:
        """A re-adopted adapter (no ``initialize`` on this link): it speaks v2 when the
        setting says 2, or when ``auto`` negotiated 2 (``recorded``: the version the alias's
        recorded profile names)."""
        self.active = self.protocol == PROTOCOL_V2 or (
            self.protocol == PROTOCOL_AUTO and recorded == PROTOCOL_V2)

    def adopt_turn(self, sid: str,
                   logged: Sequence[Any] | None = None) -> asyncio.Future[TurnEnd]:
        """The turn a predecessor's prompt started on the agent's session ``sid``
        (``logged``: the updates its clients got so far): it ends, as a prompt's turn
        does, when the agent reports ``idle``. Called early without ``logged`` (before the
        link reads the agent's lines, so an ``idle`` already waiting in its pipe ends it),
        then with the log, which takes up the same turn."""
        ended = self._adopted.pop(sid, None)
        if ended is None:
            ended = asyncio.get_running_loop().create_future()
            if self._gone is not None:
                ended.set_exception(self._gone)
                return ended
            self._turns[sid] = ended
            if logged is None:  # the early call: the later one takes this turn up
                self._adopted[sid] = ended
        if not ended.done():
            self.wire.adopt_turn(sid, logged or ())
        return ended

    async def request(self, send: Send, method: str, params: dict[str, Any],
                      wait_secs: float | None) -> Any:
        """``method`` as acpgate means it (v1), sent as the agent speaks; its v1 result."""
        if method == M_INITIALIZE:
            return await self._initialize(send, params, wait_secs)
        if not self.active:
            return await send(method, params, wait_secs)
        if method == M_SESSION_PROMPT:
            return await self._prompt(send, params, wait_secs)
        sent_method, sent = self.wire.request(method, params)
        return self.wire.result(method, params, await send(sent_method, sent, wait_secs))

    def notification(self, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A notification acpgate sends (``session/cancel``), as the agent is to get it."""
        return self.wire.request(method, params) if self.active else (method, params)

    async def _initialize(self, send: Send, params: dict[str, Any],
                          wait_secs: float | None) -> Any:
        try:
            answer = await send(M_INITIALIZE, offer(params, self.protocol), wait_secs)
        except JsonRpcError:
            if not fallback(self.protocol):
                raise
            return await send(M_INITIALIZE, params, wait_secs)  # a v1 agent refusing 2
        version, result = read_answer(answer, self.protocol)
        self.active = version == PROTOCOL_V2
        return result

    async def _prompt(self, send: Send, params: dict[str, Any],
                      wait_secs: float | None) -> Any:
        sid = str(params.get("sessionId"))
        if self._gone is not None:
            raise self._gone
        ended: asyncio.Future[TurnEnd] = asyncio.get_running_loop().create_future()
        self._turns[sid] = ended
        self.wire.prompt_sent(sid)
        try:
            await send(M_SESSION_PROMPT, params, wait_secs)
            end = await ended
        except BaseException:
            self.wire.prompt_failed(sid)
            raise
        finally:
            if self._turns.get(sid) is ended:
                del self._turns[sid]
        if end.error is not None:
            code = end.error.get("code")
            message = end.error.get("message")
            raise JsonRpcError(code if isinstance(code, int) else -32603,
                               message if isinstance(message, str) else "turn failed",
                               end.error.get("data"))
        return end.result

    async def notifications(self, batch: list[tuple[str, dict[str, Any]]],
                            deliver: Deliver) -> None:
        """The agent's notifications, translated, to ``deliver`` in order; a turn ends
        after the updates before its idle state were delivered."""
        out: list[tuple[str, dict[str, Any]]] = []
        for method, params in batch:
            if method != M_SESSION_UPDATE:
                out.append((method, params))
                continue
            updates, end = self.wire.update(params)
            out.extend((method, u) for u in updates)
            if end is None:
                continue
            if out:
                await deliver(out)
                out = []
            waiting = self._turns.pop(end.session_id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(end)
        if out:
            await deliver(out)

    def agent_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """An agent→client request's params as acpgate reads them (v1)."""
        return self.wire.agent_request(method, params) if self.active else params

    def gone(self, error: BaseException) -> None:
        """The adapter went: every turn still waiting fails with ``error``."""
        self._gone = error
        for waiting in self._turns.values():
            if not waiting.done():
                waiting.set_exception(error)
        self._turns.clear()
