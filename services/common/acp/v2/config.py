"""Session modes and config options between v1 and v2 (pure).

v2 has no modes: a v1 agent's ``modes`` become one select config option with
``category: "mode"`` (id :data:`~.names.MODE_CONFIG_ID`, unless the agent has a mode
option of its own), set with ``session/set_config_option`` — acpgate turns that into the
agent's v1 ``session/set_mode``. v1 config options are renamed (``id`` → ``configId``,
``group`` → ``groupId``).
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.names import CATEGORY_MODE, MODE_CONFIG_ID

__all__ = ["config_options_v2", "is_mode_option", "mode_option", "with_mode"]


def mode_option(modes: dict[str, Any]) -> dict[str, Any] | None:
    """v1 ``modes`` (``currentModeId``, ``availableModes``) as a v2 mode config option."""
    current = modes.get("currentModeId")
    available = modes.get("availableModes")
    options = []
    for mode in available if isinstance(available, list) else ():
        if isinstance(mode, dict) and isinstance(mode.get("id"), str):
            item = {"value": mode["id"], "name": str(mode.get("name") or mode["id"])}
            if isinstance(mode.get("description"), str):
                item["description"] = mode["description"]
            options.append(item)
    if not isinstance(current, str):
        return None
    if not any(o["value"] == current for o in options):
        options.append({"value": current, "name": current})
    return {"configId": MODE_CONFIG_ID, "name": "Mode", "category": CATEGORY_MODE,
            "type": "select", "currentValue": current, "options": options}


def _option_v2(option: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in option.items() if k != "id"}
    if "configId" not in out and "id" in option:
        out["configId"] = option["id"]
    choices = out.get("options")
    if isinstance(choices, list):
        out["options"] = [_group_v2(c) if isinstance(c, dict) else c for c in choices]
    return out


def _group_v2(choice: dict[str, Any]) -> dict[str, Any]:
    if "group" in choice and "groupId" not in choice:
        renamed = {k: v for k, v in choice.items() if k != "group"}
        renamed["groupId"] = choice["group"]
        return renamed
    return choice


def is_mode_option(option: Any) -> bool:
    """True for a v2 option of the mode category."""
    return isinstance(option, dict) and option.get("category") == CATEGORY_MODE


def config_options_v2(options: Any, modes: Any) -> list[dict[str, Any]]:
    """A v1 agent's config options (and its modes, as one more option) in v2 shape."""
    out = [_option_v2(o) for o in options if isinstance(o, dict)] \
        if isinstance(options, list) else []
    return with_mode(out, modes)


def with_mode(options: list[dict[str, Any]], modes: Any) -> list[dict[str, Any]]:
    """``options`` with the mode option of ``modes`` first, unless one is there already."""
    if not isinstance(modes, dict) or any(is_mode_option(o) for o in options):
        return options
    option = mode_option(modes)
    return [option, *options] if option is not None else options
