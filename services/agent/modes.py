"""The built-in agent's session modes and config options (ACP ``session/set_mode``,
``session/set_config_option``).

- **Modes** are the autonomy levels ``readonly`` < ``supervised`` < ``full``, up to
  the level of the policy the edge sent (the operator's choice, its *ceiling*):
  a client can make a session more careful, never more powerful than configured.
- **Config option** ``model`` (category ``model``): the agent's configured
  ``model`` and its ``models`` list.
- **A turn's cap** (``_meta.acpgate.autonomyCap`` of a ``session/prompt``):
  a turn another session started runs at most at the sender's level, for
  that turn only (:meth:`AgentSession.cap_turn`); tools needing more are denied
  or asked for as the capped level says.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from services.agent.session import AgentSession
from services.common.acp.schema import (
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)
from services.common.config import AUTONOMY_LEVELS, AgentSection
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    INVALID_PARAMS,
    MSG_BAD_AUTONOMY_CAP,
    MSG_MISSING_PARAM,
    U_CURRENT_MODE,
)

log = get_logger("agent.modes")

__all__ = [
    "AUTONOMY_LEVELS",
    "MODEL_OPTION",
    "Refused",
    "mode_state",
    "model_option",
    "models_of",
    "policy_in_mode",
    "read_autonomy_cap",
    "session_state",
    "set_config_option",
    "set_mode",
    "switch_mode",
    "switch_model",
]


class Refused(ValueError):
    """A mode or option value this session may not take; ``str(exc)`` says which."""

#: The id (and category) of the model config option.
MODEL_OPTION = "model"

_MODES = {
    "readonly": SessionMode(id="readonly", name="Read-only",
                            description="Reads and searches; no writes, no shell."),
    "supervised": SessionMode(id="supervised", name="Supervised",
                              description="Asks before writes and shell commands."),
    "full": SessionMode(id="full", name="Full",
                        description="Acts without asking, outside the workspace too "
                                    "(forbidden paths stay closed)."),
}


def available_modes(ceiling: SecurityPolicy) -> list[str]:
    """The levels a session under ``ceiling`` may switch to."""
    top = AUTONOMY_LEVELS.index(ceiling.autonomy) if ceiling.autonomy in AUTONOMY_LEVELS else 0
    return list(AUTONOMY_LEVELS[:top + 1])


def mode_state(ceiling: SecurityPolicy, current: SecurityPolicy) -> SessionModeState:
    """ACP ``modes`` of a session: its current level among the allowed ones."""
    return SessionModeState(current_mode_id=current.autonomy,
                            available_modes=[_MODES[m] for m in available_modes(ceiling)])


def policy_in_mode(ceiling: SecurityPolicy, mode: str) -> SecurityPolicy | None:
    """The session policy in ``mode``; None when ``mode`` is above the ceiling or unknown."""
    if mode not in available_modes(ceiling):
        return None
    # workspace_only is off only in full, and only if the ceiling itself has it off.
    return replace(ceiling, autonomy=mode,
                   workspace_only=ceiling.workspace_only if mode == "full" else True)


def read_autonomy_cap(value: Any) -> str:
    """A prompt's ``_meta.acpgate.autonomyCap`` ("" when absent); -32602 unless it is one
    of the autonomy levels."""
    if value is None:
        return ""
    if value not in AUTONOMY_LEVELS:
        raise JsonRpcError(INVALID_PARAMS, MSG_BAD_AUTONOMY_CAP.format(
            levels=", ".join(AUTONOMY_LEVELS)))
    return str(value)


def models_of(agent: AgentSection) -> list[str]:
    """The models a session of ``agent`` may use: ``model`` first, then ``models``."""
    return list(dict.fromkeys(m for m in (agent.model, *agent.models) if m))


def model_option(models: list[str], current: str) -> SessionConfigOptionSelect:
    """The ``model`` config option over ``models``."""
    return SessionConfigOptionSelect(
        id=MODEL_OPTION, name="Model", category=MODEL_OPTION, current_value=current,
        options=[SessionConfigSelectOption(value=m, name=m) for m in models])


def session_state(session: AgentSession, models: list[str]) -> dict[str, Any]:
    """``modes`` and ``configOptions`` of a session (new, load and resume results)."""
    return {"modes": mode_state(session.ceiling, session.chosen).to_json(),
            "configOptions": [model_option(models, session.model).to_json()]}


def switch_mode(session: AgentSession, mode: Any) -> None:
    """Put the session in autonomy level ``mode``; :class:`Refused` above its ceiling."""
    policy = policy_in_mode(session.ceiling, mode) if isinstance(mode, str) else None
    if policy is None:
        raise Refused(f"Mode not available in this session: {mode}")
    session.apply_policy(policy)


def switch_model(session: AgentSession, models: list[str], config_id: Any, value: Any) -> None:
    """Set the ``model`` option to one of ``models``; :class:`Refused` for anything else."""
    if config_id != MODEL_OPTION:
        raise Refused(f"Unknown config option: {config_id}")
    if not isinstance(value, str) or value not in models:
        raise Refused(f"Model not available for this agent: {value}")
    session.model = value


async def set_mode(session: AgentSession, params: dict[str, Any]) -> dict[str, Any]:
    """``session/set_mode``: an autonomy level up to the ceiling, announced to the client
    with ``current_mode_update``; -32602 otherwise."""
    mode = params.get("modeId")
    if not isinstance(mode, str) or not mode:
        raise JsonRpcError(INVALID_PARAMS, MSG_MISSING_PARAM.format(name="modeId"))
    try:
        switch_mode(session, mode)
    except Refused as exc:
        raise JsonRpcError(INVALID_PARAMS, str(exc)) from None
    log.info("session_mode", session_id=session.id, autonomy=mode)
    await session.context.send_update({"sessionUpdate": U_CURRENT_MODE, "currentModeId": mode})
    return {}


def set_config_option(session: AgentSession, models: list[str],
                      params: dict[str, Any]) -> dict[str, Any]:
    """``session/set_config_option`` ``model``: one of ``models``, from the next model call
    on; -32602 for another option or model."""
    try:
        switch_model(session, models, params.get("configId"), params.get("value"))
    except Refused as exc:
        raise JsonRpcError(INVALID_PARAMS, str(exc)) from None
    log.info("session_model", session_id=session.id, model=session.model)
    return {"configOptions": [model_option(models, session.model).to_json()]}
