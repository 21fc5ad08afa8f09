"""The built-in agent's session modes and config options (ACP ``session/set_mode``,
``session/set_config_option``).

- **Modes** are the autonomy levels ``readonly`` < ``supervised`` < ``full``, up to
  the level of the policy the edge sent (the operator's choice, its *ceiling*):
  a client can make a session more careful, never more powerful than configured.
- **Config option** ``model`` (category ``model``): the agent's configured
  ``model`` and its ``models`` list.
"""

from __future__ import annotations

from dataclasses import replace

from services.common.acp.schema import (
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)
from services.common.config import AgentSection
from services.common.policy import SecurityPolicy

__all__ = [
    "AUTONOMY_LEVELS",
    "MODEL_OPTION",
    "mode_state",
    "model_option",
    "models_of",
    "policy_in_mode",
]

#: Autonomy levels, least powerful first.
AUTONOMY_LEVELS = ("readonly", "supervised", "full")
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


def models_of(agent: AgentSection) -> list[str]:
    """The models a session of ``agent`` may use: ``model`` first, then ``models``."""
    return list(dict.fromkeys(m for m in (agent.model, *agent.models) if m))


def model_option(models: list[str], current: str) -> SessionConfigOptionSelect:
    """The ``model`` config option over ``models``."""
    return SessionConfigOptionSelect(
        id=MODEL_OPTION, name="Model", category=MODEL_OPTION, current_value=current,
        options=[SessionConfigSelectOption(value=m, name=m) for m in models])
